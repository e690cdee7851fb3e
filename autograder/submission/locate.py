"""Find the student's ``modeling_attention.py`` in what was handed in.

A submission is a ``.py`` file, a directory (searched for exactly one
``modeling_attention.py``, preferring one under ``transformer_lm/``), or a
``.zip`` of either. Zips are extracted safely: no absolute paths, no ``..``,
no links, and caps on entries and sizes. Nothing here executes student code.

Who is at fault is decided here: what the submission's files are (no
module, a corrupt zip, a name the file system refuses) is the student's
(``Submission.error``, a zero with the reason); the grader's own machine
failing while it reads or extracts them (a full disk, an I/O error, its
folders unwritable, the path gone mid-batch: ``GRADER_ERRNOS``) is the
grader's (``Submission.internal_error``: no score, and the batch proves
its environment again with the canary).
"""
from __future__ import annotations

import contextlib
import errno
import hashlib
import mmap
import os
import re
import shutil
import stat
import struct
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Iterator

from autograder import homework
from autograder.files.user_files import NotRegularFile, open_regular

MAX_SOURCE_BYTES = 1_000_000
MAX_ZIP_ENTRIES = 2_000
MAX_ZIP_FILE_BYTES = 50_000_000
MAX_ZIP_TOTAL_BYTES = 200_000_000
MAX_NAME_CHARS = 80          # of a submission's name (a folder name in OUT)
MAX_SHOWN_CHARS = 200        # of a file name quoted in a message
# Not part of anyone's submission: editor, OS and environment debris.
SKIPPED_DIRS = {"__MACOSX", "__pycache__", ".ipynb_checkpoints", ".git",
                ".venv", "venv", "site-packages", "node_modules"}
# OS errors that come from the grader's machine whatever the submission
# holds: its disk full or failing, its memory, its own folders refused,
# files gone from under it. (A name the file system refuses, ENAMETOOLONG
# or EILSEQ, is the submission's; so is any OSError without an errno.)
GRADER_ERRNOS = frozenset(
    getattr(errno, name) for name in (
        "ENOSPC", "EDQUOT", "EIO", "ENOMEM", "EROFS", "EACCES", "EPERM",
        "ENOENT", "ESTALE", "EMFILE", "ENFILE", "ENXIO", "ENODEV")
    if hasattr(errno, name))


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
    # The grader's machine failed while reading it (GRADER_ERRNOS): no
    # score; the text says what failed, for staff and the student.
    internal_error: str = ""


def submission_name(path: Path) -> str:
    """The stem of the file, directory or zip, safe as a directory name:
    ASCII letters, digits, ``._-`` only (non-UTF-8 bytes and control
    characters become ``_``) and at most MAX_NAME_CHARS characters (a
    longer name keeps its start and a hash of the whole)."""
    stem = _stem(path)
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "_", stem).strip("._")
    if len(cleaned) > MAX_NAME_CHARS:
        digest = hashlib.sha256(_raw(stem)).hexdigest()[:10]
        cleaned = f"{cleaned[:MAX_NAME_CHARS - 11].rstrip('._')}-{digest}"
    return cleaned or "submission"


def _raw(name: str) -> bytes:
    """A file name's bytes as the OS gave them (undecodable bytes are
    surrogate escapes in Python's str)."""
    return name.encode("utf-8", "surrogateescape")


def shown_name(name: str) -> str:
    """A file name for a message: undecodable bytes as U+FFFD, bounded in
    length (the escaping for its context happens where it is written)."""
    text = _raw(name).decode("utf-8", "replace")
    if len(text) > MAX_SHOWN_CHARS:
        text = text[:MAX_SHOWN_CHARS] + "..."
    return text


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


def submission_names(paths: list[Path]) -> tuple[list[str], list[str]]:
    """A distinct folder name for each path (``submission_name``), and a
    warning for each that had to change to be distinct. A name that
    cleaning left as it was keeps it: ``bob.py`` is ``bob`` even beside
    ``bob!.py`` (which becomes ``bob-2``), whatever their order."""
    wanted = [submission_name(p) for p in paths]
    exact = [_stem(p) == w for p, w in zip(paths, wanted)]
    order = sorted(range(len(paths)), key=lambda i: not exact[i])
    taken: set[str] = set()
    names = [""] * len(paths)
    warnings = []
    for i in order:
        candidate, count = wanted[i], 1
        while candidate in taken:
            count += 1
            candidate = f"{wanted[i]}-{count}"
        taken.add(candidate)
        names[i] = candidate
    for i, name in enumerate(names):
        if name != wanted[i]:
            others = [shown_name(paths[j].name) for j in range(len(paths))
                      if j != i and wanted[j] == wanted[i]]
            warnings.append(
                f"{shown_name(str(paths[i]))} and {', '.join(others)} have "
                f"the same name once cleaned ({wanted[i]}): graded as "
                f"{name}")
    return names, warnings


def _stem(path: Path) -> str:
    stem = path.name
    for suffix in (".zip", ".py"):
        if stem.lower().endswith(suffix):
            return stem[:-len(suffix)]
    return stem


def check_path(path: Path) -> None:
    """Raise UsageError if ``path`` does not exist (a typo on the command
    line). Anything that exists is graded: a file of the wrong kind in a
    folder of submissions gets 0 with the reason, and the batch goes on."""
    if not path.exists():
        raise UsageError(f"{path}: no such file or directory")


def resolve(path: Path, workdir: Path, name: str | None = None, *,
            hw: homework.Homework | None = None) -> Submission:
    """Read the submission at ``path``; zips are extracted under
    ``workdir``. Problems inside the submission (no or several of the
    homework ``hw``'s module, default the one in use; bad zip, unreadable
    file) give ``error``."""
    path = Path(path)
    hw = hw or homework.current()
    module = hw.module_name, hw.package
    sub = Submission(name or submission_name(path), path)
    shown = shown_name(path.name)
    try:
        if not os.path.lexists(path):
            raise GraderFault(f"the grader could not read {shown}: it is "
                              f"gone (deleted or moved after the batch "
                              f"started)")
        if path.is_dir():   # a folder, or one of an export's: as a zip
            _from_directory(sub, path, module, shown=shown, lone_py=True)
        elif path.suffix.lower() == ".zip":
            target = Path(tempfile.mkdtemp(prefix="zip-", dir=workdir))
            safe_extract(path, target)
            _from_directory(sub, target, module, shown=shown,
                            lone_py=True)
        elif path.suffix.lower() == ".py":
            _read(sub, path, shown=shown)
        else:
            raise SubmissionError(
                f"{shown} is not a submission: hand in "
                f"{module[0]}, the {module[1]}/ folder, or a "
                f".zip of either")
    except GraderFault as exc:
        sub.internal_error = f"{exc}; no score was written"
    except SubmissionError as exc:
        sub.error = str(exc)
    except OSError as exc:
        if is_grader_fault(exc):
            sub.internal_error = (f"the grader could not read {shown}: "
                                  f"{describe_os_error(exc)}; no score "
                                  f"was written")
        else:   # a name the file system refuses (too long, ...)
            sub.error = f"{shown} could not be read ({type(exc).__name__})"
    except ValueError as exc:
        # This submission's problem, never the batch's.
        sub.error = f"{shown} could not be read ({type(exc).__name__})"
    return sub


class SubmissionError(Exception):
    """Something about the submission's files; the message is for it."""


class GraderFault(SubmissionError):
    """The grader's machine failed while reading or extracting a
    submission (``GRADER_ERRNOS``): not the submission's fault. Its text
    says so ("the grader could not extract a.zip: ..."). A
    SubmissionError, so that callers that stop on one (a Gradescope
    export) stop on this too; ``resolve`` keeps the two apart."""


def is_grader_fault(exc: BaseException) -> bool:
    """Whether ``exc`` is an OS error of the grader's machine, not of the
    files handed in."""
    return isinstance(exc, OSError) and exc.errno in GRADER_ERRNOS


def describe_os_error(exc: OSError) -> str:
    """``exc`` for a message: its cause, errno name and the file (names
    bounded and made printable: a zip entry's name is the student's)."""
    code = errno.errorcode.get(exc.errno or 0, "")
    text = exc.strerror or str(exc) or type(exc).__name__
    where = f", {shown_name(str(exc.filename))}" if exc.filename else ""
    return f"{text} ({code}{where})" if code else f"{text}{where}"


def _read(sub: Submission, file: Path, shown: str) -> None:
    try:
        with open_regular(file) as handle:   # a FIFO never blocks it
            size = os.fstat(handle.fileno()).st_size
            if size > MAX_SOURCE_BYTES:
                raise SubmissionError(f"{shown} is {size} bytes; the "
                                      f"limit is {MAX_SOURCE_BYTES}")
            data = handle.read(MAX_SOURCE_BYTES + 1)
    except NotRegularFile as exc:
        raise SubmissionError(f"{shown} is not a regular file "
                              f"({exc.kind})") from None
    if len(data) > MAX_SOURCE_BYTES:   # grew since fstat
        raise SubmissionError(f"{shown} is larger than "
                              f"{MAX_SOURCE_BYTES} bytes")
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


def _from_directory(sub: Submission, root: Path, module: tuple[str, str],
                    shown: str, lone_py: bool = False) -> None:
    """``module``: the file name students hand in and its package."""
    (target, package), files = module, _walk(root)
    sub.notebooks = tuple(f for f in files if f.suffix == ".ipynb")
    matches = [f for f in files if f.name == target]
    preferred = [f for f in matches if f.parent.name == package]
    if len(preferred) == 1:
        matches = preferred
    if not matches and lone_py:
        py_files = [f for f in files if f.suffix == ".py"]
        if len(py_files) == 1:   # a zip of one renamed .py file
            matches = py_files
    if not matches:
        raise SubmissionError(
            f"no {target} found in {shown}: hand in "
            f"{package}/{target} (or just {target})")
    if len(matches) > 1:
        listed = ", ".join(shown_name(str(m.relative_to(root)))
                           for m in matches[:5])
        raise SubmissionError(
            f"several {target} files in {shown} ({listed}): hand in "
            f"exactly one, ideally {package}/{target}")
    _read(sub, matches[0],
          f"{shown}/{shown_name(str(matches[0].relative_to(root)))}")


def safe_extract(archive: Path, target: Path, *,
                 max_entries: int | None = None,
                 max_total: int | None = None,
                 skipped: list[tuple[str, str]] | None = None) -> None:
    """Extract ``archive`` into ``target``, refusing path traversal,
    absolute names, links, and archives beyond the entry and size caps
    (one submission's by default; a Gradescope export passes its own).
    Raises SubmissionError (nothing is extracted outside ``target``).
    An entry whose name is flagged UTF-8 but is not is read as bytes
    (cp437, as zip names without the flag are). With ``skipped`` (an
    export of many submissions), an entry with an unsafe name is left out
    and listed there as (name, reason) instead of refusing the archive."""
    max_entries = max_entries or MAX_ZIP_ENTRIES
    max_total = max_total or MAX_ZIP_TOTAL_BYTES
    shown = shown_name(archive.name)
    try:
        with _open_zip(archive, target) as zf:
            infos = zf.infolist()
            if len(infos) > max_entries:
                raise SubmissionError(f"{shown} has {len(infos)} "
                                      f"entries; the limit is "
                                      f"{max_entries}")
            total = 0
            root = target.resolve()
            for info in infos:
                try:
                    dest = _destination(info, root, shown)
                except SubmissionError as exc:
                    if skipped is None:
                        raise
                    skipped.append((shown_name(info.filename), str(exc)))
                    continue
                if dest is None:
                    continue
                if info.file_size > MAX_ZIP_FILE_BYTES:
                    raise SubmissionError(f"{shown}: "
                                          f"{shown_name(info.filename)} "
                                          f"is too large")
                total += info.file_size
                if total > max_total:
                    raise SubmissionError(f"{shown} is too large once "
                                          f"extracted")
                try:
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    _copy_capped(zf, info, dest)
                except OSError as exc:   # a name the file system refuses
                    if skipped is None or is_grader_fault(exc):
                        raise
                    skipped.append((shown_name(info.filename),
                                    f"not extracted ({exc.strerror})"))
    except OSError as exc:
        if is_grader_fault(exc):
            raise GraderFault(f"the grader could not extract {shown}: "
                              f"{describe_os_error(exc)}") from None
        raise SubmissionError(f"{shown} is not a readable zip "
                              f"({type(exc).__name__}: "
                              f"{shown_name(str(exc))})") from None
    except (zipfile.BadZipFile, zipfile.LargeZipFile,
            NotImplementedError, RuntimeError, ValueError,
            struct.error) as exc:
        raise SubmissionError(f"{shown} is not a readable zip "
                              f"({type(exc).__name__}: "
                              f"{shown_name(str(exc))})") from None


def _destination(info: zipfile.ZipInfo, root: Path, shown: str
                 ) -> Path | None:
    """Where a zip entry goes under ``root``; None for what is not
    extracted (folders, links); SubmissionError for an unsafe name."""
    name = PurePosixPath(info.filename.replace("\\", "/"))
    unsafe = SubmissionError(f"{shown} contains an unsafe path: "
                             f"{shown_name(info.filename)!r}")
    if name.is_absolute() or ".." in name.parts or \
            ":" in info.filename or "\x00" in info.filename:
        raise unsafe
    mode = info.external_attr >> 16
    if stat.S_ISLNK(mode) or info.is_dir():
        return None   # links could point anywhere: ignored
    dest = (root / Path(*name.parts)).resolve()
    if root not in dest.parents:
        raise unsafe
    return dest


@contextlib.contextmanager
def _open_zip(archive: Path, scratch: Path) -> Iterator[zipfile.ZipFile]:
    """``archive`` opened; when a name flagged UTF-8 is not (zipfile then
    raises UnicodeDecodeError for the whole archive), a copy in
    ``scratch`` with that flag cleared on those entries, so their names
    read as bytes (cp437) and the rest of the archive is unaffected.
    Only a regular file is opened (SubmissionError for a FIFO, ...)."""
    try:
        handle = open_regular(archive)
    except NotRegularFile as exc:
        raise SubmissionError(f"{shown_name(archive.name)} is not a "
                              f"regular file ({exc.kind})") from None
    with handle:
        try:
            zf = zipfile.ZipFile(handle)
        except UnicodeDecodeError:
            copy = scratch / ".names-as-bytes.zip"
            with open(copy, "wb") as out:
                handle.seek(0)
                shutil.copyfileobj(handle, out)
            with open(copy, "r+b") as fixed, \
                    mmap.mmap(fixed.fileno(), 0) as data:
                _clear_false_utf8_flags(data)
            zf = zipfile.ZipFile(copy)
            copy.unlink()   # the open handle keeps it readable
        with zf:
            yield zf


def zip_names(archive: Path) -> list[str]:
    """The entry names of ``archive`` (names flagged UTF-8 that are not
    read as bytes, as ``safe_extract`` reads them). Raises what
    ``zipfile`` raises for an unreadable archive, or OSError."""
    with tempfile.TemporaryDirectory(prefix="zip-names-") as scratch:
        with _open_zip(archive, Path(scratch)) as zf:
            return zf.namelist()


_EOCD = struct.Struct("<4s4H2LH")
_ZIP64_LOCATOR = struct.Struct("<4sLQL")
_ZIP64_EOCD = struct.Struct("<4sQ2H2L4Q")
_CENTRAL = struct.Struct("<4s4B4HL2L5H2L")
_UTF8_FLAG = 0x800


def _clear_false_utf8_flags(data: mmap.mmap) -> None:
    """Clear the UTF-8 flag of every entry (central directory and local
    header) whose name is not UTF-8. Raises ValueError if the archive's
    structure cannot be followed."""
    at = data.rfind(b"PK\x05\x06", max(0, len(data) - 65_557))
    if at < 0:
        raise ValueError("no end of central directory")
    _, _, _, _, count, size, offset, _ = _EOCD.unpack_from(data, at)
    end = at
    if offset == 0xFFFFFFFF or count == 0xFFFF:
        sig, _, where, _ = _ZIP64_LOCATOR.unpack_from(data, at - 20)
        if sig != b"PK\x06\x07":
            raise ValueError("bad zip64 locator")
        fields = _ZIP64_EOCD.unpack_from(data, where)
        count, size, offset = fields[7], fields[8], fields[9]
        end = at - 20 - _ZIP64_EOCD.size
    concat = end - size - offset   # bytes prepended to the archive
    pos = offset + concat
    for _ in range(count):
        head = _CENTRAL.unpack_from(data, pos)
        if head[0] != b"PK\x01\x02":
            raise ValueError("bad central directory")
        flags, n, m, k, local = head[5], head[12], head[13], head[14], \
            head[18]
        name = bytes(data[pos + 46:pos + 46 + n])
        if flags & _UTF8_FLAG and not _is_utf8(name):
            struct.pack_into("<H", data, pos + 8, flags & ~_UTF8_FLAG)
            lh = local + concat
            if local != 0xFFFFFFFF and data[lh:lh + 4] == b"PK\x03\x04":
                (lflags,) = struct.unpack_from("<H", data, lh + 6)
                struct.pack_into("<H", data, lh + 6, lflags & ~_UTF8_FLAG)
        pos += 46 + n + m + k


def _is_utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _copy_capped(zf: zipfile.ZipFile, info: zipfile.ZipInfo,
                 dest: Path) -> None:
    # The header's file_size may lie (zip bombs): count what comes out.
    written = 0
    with zf.open(info) as src, open(dest, "wb") as out:
        while chunk := src.read(1 << 16):
            written += len(chunk)
            if written > MAX_ZIP_FILE_BYTES:
                raise SubmissionError(f"{shown_name(info.filename)} is too "
                                      f"large once decompressed")
            out.write(chunk)
