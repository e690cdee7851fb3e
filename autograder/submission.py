"""Find the student's ``modeling_attention.py`` in what was handed in.

A submission is a ``.py`` file, a directory (searched for exactly one
``modeling_attention.py``, preferring one under ``transformer_lm/``), or a
``.zip`` of either. Zips are extracted safely: no absolute paths, no ``..``,
no links, and caps on entries and sizes. Nothing here executes student code.
"""
from __future__ import annotations

import re
import stat
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

TARGET = "modeling_attention.py"
PACKAGE = "transformer_lm"
MAX_SOURCE_BYTES = 1_000_000
MAX_ZIP_ENTRIES = 2_000
MAX_ZIP_FILE_BYTES = 50_000_000
MAX_ZIP_TOTAL_BYTES = 200_000_000
# Not part of anyone's submission: editor, OS and environment debris.
SKIPPED_DIRS = {"__MACOSX", "__pycache__", ".ipynb_checkpoints", ".git",
                ".venv", "venv", "site-packages", "node_modules"}


class UsageError(ValueError):
    """The path cannot be a submission at all (missing, wrong type)."""


@dataclass
class Submission:
    """A resolved submission: its name, source text and where it came
    from; ``error`` (student-facing) when the code could not be found."""

    name: str
    path: Path                  # what was given on the command line
    filename: str = ""          # the file graded, for messages
    source: str | None = None
    error: str = ""
    notebooks: tuple[Path, ...] = ()   # .ipynb files handed in, if any


def submission_name(path: Path) -> str:
    """The stem of the file, directory or zip, safe as a directory name."""
    stem = path.name
    for suffix in (".zip", ".py"):
        if stem.lower().endswith(suffix):
            stem = stem[:-len(suffix)]
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "_", stem).strip("._")
    return cleaned or "submission"


def unique_names(names: list[str]) -> list[str]:
    """``names`` with repeats suffixed ``-2``, ``-3``, ... in order."""
    taken: set[str] = set()
    result = []
    for name in names:
        candidate, count = name, 1
        while candidate in taken:
            count += 1
            candidate = f"{name}-{count}"
        taken.add(candidate)
        result.append(candidate)
    return result


def check_path(path: Path) -> None:
    """Raise UsageError if ``path`` does not exist (a typo on the command
    line). Anything that exists is graded: a file of the wrong kind in a
    folder of submissions gets 0 with the reason, and the batch goes on."""
    if not path.exists():
        raise UsageError(f"{path}: no such file or directory")


def resolve(path: Path, workdir: Path, name: str | None = None
            ) -> Submission:
    """Read the submission at ``path``; zips are extracted under
    ``workdir``. Problems inside the submission (no or several
    modeling_attention.py, bad zip, unreadable file) give ``error``."""
    path = Path(path)
    sub = Submission(name or submission_name(path), path)
    try:
        if path.is_dir():
            _from_directory(sub, path, shown=path.name)
        elif path.suffix.lower() == ".zip":
            target = Path(tempfile.mkdtemp(prefix="zip-", dir=workdir))
            safe_extract(path, target)
            _from_directory(sub, target, shown=path.name, lone_py=True)
        elif path.suffix.lower() == ".py":
            _read(sub, path, shown=path.name)
        else:
            raise SubmissionError(
                f"{path.name} is not a submission: hand in "
                f"modeling_attention.py, the transformer_lm/ folder, or a "
                f".zip of either")
    except SubmissionError as exc:
        sub.error = str(exc)
    return sub


class SubmissionError(Exception):
    """Something about the submission's files; the message is for it."""


def _read(sub: Submission, file: Path, shown: str) -> None:
    if file.is_symlink() or not file.is_file():
        raise SubmissionError(f"{shown} is not a regular file")
    size = file.stat().st_size
    if size > MAX_SOURCE_BYTES:
        raise SubmissionError(f"{shown} is {size} bytes; the limit is "
                              f"{MAX_SOURCE_BYTES}")
    data = file.read_bytes()
    try:
        sub.source = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise SubmissionError(f"{shown} is not UTF-8 text ({exc})") from None
    sub.filename = shown


def _walk(root: Path) -> list[Path]:
    """Regular files under ``root``, skipping debris and symlinks."""
    found, stack = [], [root]
    while stack:
        folder = stack.pop()
        for entry in sorted(folder.iterdir()):
            if entry.is_symlink() or entry.name in SKIPPED_DIRS:
                continue
            if entry.is_dir():
                if not entry.name.startswith("."):
                    stack.append(entry)
            elif entry.is_file() and not entry.name.startswith("._"):
                found.append(entry)
    return found


def _from_directory(sub: Submission, root: Path, shown: str,
                    lone_py: bool = False) -> None:
    files = _walk(root)
    sub.notebooks = tuple(f for f in files if f.suffix == ".ipynb")
    matches = [f for f in files if f.name == TARGET]
    preferred = [f for f in matches if f.parent.name == PACKAGE]
    if len(preferred) == 1:
        matches = preferred
    if not matches and lone_py:
        py_files = [f for f in files if f.suffix == ".py"]
        if len(py_files) == 1:   # a zip of one renamed .py file
            matches = py_files
    if not matches:
        raise SubmissionError(
            f"no {TARGET} found in {shown}: hand in "
            f"{PACKAGE}/{TARGET} (or just {TARGET})")
    if len(matches) > 1:
        listed = ", ".join(str(m.relative_to(root)) for m in matches[:5])
        raise SubmissionError(
            f"several {TARGET} files in {shown} ({listed}): hand in "
            f"exactly one, ideally {PACKAGE}/{TARGET}")
    _read(sub, matches[0], f"{shown}/{matches[0].relative_to(root)}")


def safe_extract(archive: Path, target: Path, *,
                 max_entries: int | None = None,
                 max_total: int | None = None) -> None:
    """Extract ``archive`` into ``target``, refusing path traversal,
    absolute names, links, and archives beyond the entry and size caps
    (one submission's by default; a Gradescope export passes its own).
    Raises SubmissionError (nothing is extracted outside ``target``)."""
    max_entries = max_entries or MAX_ZIP_ENTRIES
    max_total = max_total or MAX_ZIP_TOTAL_BYTES
    try:
        with zipfile.ZipFile(archive) as zf:
            infos = zf.infolist()
            if len(infos) > max_entries:
                raise SubmissionError(f"{archive.name} has {len(infos)} "
                                      f"entries; the limit is "
                                      f"{max_entries}")
            total = 0
            root = target.resolve()
            for info in infos:
                name = PurePosixPath(info.filename.replace("\\", "/"))
                if name.is_absolute() or ".." in name.parts or \
                        ":" in info.filename:
                    raise SubmissionError(f"{archive.name} contains an unsafe"
                                          f" path: {info.filename!r}")
                mode = info.external_attr >> 16
                if stat.S_ISLNK(mode):
                    continue   # links could point anywhere: ignored
                if info.is_dir():
                    continue
                if info.file_size > MAX_ZIP_FILE_BYTES:
                    raise SubmissionError(f"{archive.name}: {info.filename} "
                                          f"is too large")
                total += info.file_size
                if total > max_total:
                    raise SubmissionError(f"{archive.name} is too large once "
                                          f"extracted")
                dest = (root / Path(*name.parts)).resolve()
                if root not in dest.parents:
                    raise SubmissionError(f"{archive.name} contains an unsafe"
                                          f" path: {info.filename!r}")
                dest.parent.mkdir(parents=True, exist_ok=True)
                _copy_capped(zf, info, dest)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError,
            NotImplementedError, RuntimeError) as exc:
        raise SubmissionError(f"{archive.name} is not a readable zip "
                              f"({exc})") from None


def _copy_capped(zf: zipfile.ZipFile, info: zipfile.ZipInfo,
                 dest: Path) -> None:
    # The header's file_size may lie (zip bombs): count what comes out.
    written = 0
    with zf.open(info) as src, open(dest, "wb") as out:
        while chunk := src.read(1 << 16):
            written += len(chunk)
            if written > MAX_ZIP_FILE_BYTES:
                raise SubmissionError(f"{info.filename} is too large once "
                                      f"decompressed")
            out.write(chunk)
