"""OUT proved able to hold a batch before the canary runs: a folder (or
creatable as one), writable, with room for the batch. A refusal names the
path, the cause and the fix, before any submission is graded."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

# What one submission's files take at most in practice (results.json,
# feedback.md and .html, source.py, answers.json: about 70 kB for a
# submission failing most items), with room to spare; and the batch's own
# files (grades.csv, the class report, the answer and similarity pages).
BYTES_PER_SUBMISSION = 256 * 1024
BYTES_PER_BATCH = 2 * 1024 * 1024
FILES_PER_SUBMISSION = 12


class OutDirError(Exception):
    """OUT cannot hold the batch: ``<path>: <cause> (<fix>)``."""


def needed_bytes(submissions: int) -> int:
    """The room a batch of ``submissions`` needs in OUT (an estimate)."""
    return BYTES_PER_BATCH + submissions * BYTES_PER_SUBMISSION


def check_out(out: Path, submissions: int) -> None:
    """OutDirError unless ``out`` is (or can be made) a writable folder
    with room for ``submissions``' outputs; creates it."""
    if out.exists() and not out.is_dir():
        raise OutDirError(f"{out}: not a folder (a file is there): give "
                          f"--out a folder, new or graded before")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutDirError(f"{out}: cannot create it ({_why(exc)}): give "
                          f"--out a folder you can write") from None
    try:   # what the OS says, not the mode bits (root, read-only mounts)
        fd, probe = tempfile.mkstemp(prefix=".write-test.", dir=out)
        try:
            os.write(fd, b"x")
            os.fsync(fd)
        finally:
            os.close(fd)
            os.unlink(probe)
    except OSError as exc:
        raise OutDirError(f"{out}: cannot write there ({_why(exc)}): fix "
                          f"its permissions or give --out another "
                          f"folder") from None
    try:
        stat = os.statvfs(out)
    except (OSError, AttributeError):   # no statvfs: the writes will tell
        return
    free = stat.f_bavail * stat.f_frsize
    need = needed_bytes(submissions)
    if free < need:
        raise OutDirError(
            f"{out}: {_mb(free)} free, the batch needs about {_mb(need)} "
            f"({submissions} submission{'s' * (submissions != 1)}): free "
            f"space there or give --out another disk")
    if stat.f_files and stat.f_favail < FILES_PER_SUBMISSION * submissions:
        raise OutDirError(
            f"{out}: room for {stat.f_favail} more files, the batch writes "
            f"about {FILES_PER_SUBMISSION * submissions}: free some or give "
            f"--out another disk")


def _why(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__


def _mb(size: int) -> str:
    return f"{size / 1e6:.1f} MB"


__all__ = ["BYTES_PER_SUBMISSION", "OutDirError", "check_out",
           "needed_bytes"]
