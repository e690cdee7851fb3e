"""The one way anything is written under a graded folder (OUT): whole or
not at all.

Every file goes to a temporary file in the same folder (a unique name
starting with a dot and ending in ``.tmp``, which no reader of OUT
lists), is flushed and fsynced, then renamed over its real name with
``os.replace``; on any error the temporary file is removed. A kill or a
full disk therefore leaves the previous file or the new one, never half
of either. The folder itself is fsynced after the rename where the name
must survive a power cut (:func:`write_text` ``durable=True``).

An OS error is raised as :class:`OutputError`, whose message names the
path and the cause (``OUT/grades.csv: No space left on device``): the
batch stops on it at once (autograder/batch.py) and the command exits 2.

Tests only: ``AUTOGRADER_TEST_KILL_AT_WRITE=NAME:N`` kills this process
(SIGKILL) in the middle of the N-th write of a file called NAME (``*``:
any file), after half its bytes reached the temporary file
(kit_tests/faults/). Nothing else reads it.
"""
from __future__ import annotations

import errno
import os
import signal
import tempfile
import threading
from pathlib import Path

KILL_ENV = "AUTOGRADER_TEST_KILL_AT_WRITE"
TEMP_SUFFIX = ".tmp"

_kill_lock = threading.Lock()
_kill_count = 0
# Files get the mode open() would give them (mkstemp's is 0600).
_UMASK = os.umask(0o022)
os.umask(_UMASK)


class OutputError(Exception):
    """A file of OUT could not be written: the grader's machine failed,
    not a submission. ``str()`` is ``<path>: <cause>``."""

    def __init__(self, path: Path | str, cause: OSError | str):
        self.path = Path(path)
        why = cause if isinstance(cause, str) else \
            (cause.strerror or type(cause).__name__)
        super().__init__(f"{self.path}: {why}")


def write_text(path: Path | str, text: str, *, durable: bool = False
               ) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically; the parent folder
    is created. ``durable``: fsync the folder too, so the new name
    survives a power cut (the batch's marker and grades.csv)."""
    write_bytes(path, text.encode("utf-8", "surrogateescape"),
                durable=durable)


def write_bytes(path: Path | str, data: bytes, *, durable: bool = False
                ) -> None:
    """Write ``data`` to ``path`` atomically (see the module's text);
    OutputError if the OS refuses."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name[:100]}.",
                                   suffix=TEMP_SUFFIX, dir=path.parent)
    except OSError as exc:
        raise OutputError(path, exc) from None
    try:
        with os.fdopen(fd, "wb") as handle:
            _maybe_kill(path, handle, data)
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o666 & ~_UMASK)
        os.replace(tmp, path)
    except OSError as exc:
        _remove(tmp)
        raise OutputError(path, exc) from None
    except BaseException:
        _remove(tmp)
        raise
    if durable:
        sync_folder(path.parent)


def sync_folder(folder: Path | str) -> None:
    """fsync a folder, so the names just renamed into it are on disk;
    OutputError if the OS refuses (a filesystem that cannot fsync a
    folder is no error)."""
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError as exc:
        raise OutputError(folder, exc) from None
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.EOPNOTSUPP):
            raise OutputError(folder, exc) from None
    finally:
        os.close(fd)


def is_temporary(path: Path) -> bool:
    """Whether ``path`` is one of this module's temporary files (left by
    a killed run: never a result)."""
    return path.name.startswith(".") and path.name.endswith(TEMP_SUFFIX)


def _remove(tmp: str) -> None:
    try:
        os.unlink(tmp)
    except OSError:
        pass


def _maybe_kill(path: Path, handle, data: bytes) -> None:
    # The fault suite's deterministic kill: half the bytes on disk, then
    # SIGKILL, as a power cut or an OOM kill would leave them.
    global _kill_count
    spec = os.environ.get(KILL_ENV)
    if not spec:
        return
    name, _, nth = spec.rpartition(":")
    if name not in ("*", path.name) or not nth.isdigit():
        return
    with _kill_lock:
        _kill_count += 1
        hit = _kill_count == int(nth)
    if hit:
        handle.write(data[:len(data) // 2])
        handle.flush()
        os.fsync(handle.fileno())
        os.kill(os.getpid(), signal.SIGKILL)


__all__ = ["KILL_ENV", "OutputError", "is_temporary", "sync_folder",
           "write_bytes", "write_text"]
