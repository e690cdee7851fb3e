"""Skip the generated-files check when nothing it reads has changed.

``python -m kit.generate --check`` rebuilds the skeleton, the notebook and the
frozen values in memory (seconds of CPU, paid before the first test). Its
answer depends only on the checkout's files outside ``kit_tests/`` and on
the interpreter and torch, so a clean answer is remembered under a digest
of exactly those, in ``build/`` (``make clean`` forgets it); any change of
a byte, a file added or removed, or another torch runs the check again.
A stale answer is never remembered: it must be fixed, not skipped.
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import os
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STAMP = ROOT / "build" / ".generated-fresh"
# What the check never reads: the tests, build outputs, caches.
IGNORED = {"kit_tests", "build", "dist", "grades", ".git", ".venv",
           "__pycache__", ".pytest_cache", ".ipynb_checkpoints"}


def inputs_digest(root: Path = ROOT) -> str:
    """A digest of every file the check may read, with its path, and of
    the interpreter and torch versions."""
    digest = hashlib.sha256()
    try:
        torch_version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        torch_version = "none"
    digest.update(f"{sys.version}\0{torch_version}\0".encode())
    for path in sorted(_files(root)):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def _files(root: Path) -> list[Path]:
    """Every file under ``root`` outside IGNORED (never walked into: a
    venv holds tens of thousands of files)."""
    found = []
    for folder, subfolders, names in os.walk(root):
        subfolders[:] = [name for name in subfolders if name not in IGNORED]
        found += [Path(folder, name) for name in names]
    return found


def stale_unless_unchanged(check: Callable[[], list[str]],
                           stamp: Path = STAMP,
                           root: Path = ROOT) -> list[str]:
    """``check()``'s lines, or ``[]`` without running it when its last
    clean answer was given for these very inputs."""
    digest = inputs_digest(root)
    try:
        if stamp.read_text() == digest:
            return []
    except OSError:
        pass
    lines = check()
    if not lines:
        try:
            stamp.parent.mkdir(parents=True, exist_ok=True)
            stamp.write_text(digest)
        except OSError:
            pass          # a read-only checkout checks every time
    return lines
