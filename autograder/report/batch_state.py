"""A graded folder's batch as one unit: begun, complete, resumable.

``grade --out OUT`` writes ``OUT/.batch.json`` (the batch's id, its grader
fingerprint, its state) as ``in-progress`` before the first submission
and ``complete`` once grades.csv and the answer pages are written. The
staff commands that read OUT (``report``, ``similarity``, ``--compare``)
refuse a folder whose batch is not complete (:func:`require_complete`):
an interrupted regrade leaves the old grades.csv beside new results.

Each submission's folder gets ``.graded.json`` last, after its files: the
digest of what was handed in, the grader's fingerprint (rubric, test
values, mistakes, the grader's own code, the command's options), the
sha256 of each file written and its row of grades.csv. A rerun of the
same command keeps a submission (:meth:`BatchState.kept`) only if all of
these still hold, so a resumed batch ends with the grades a clean run
gives; anything in doubt is graded again.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autograder.files import atomic
from autograder.files.user_files import open_regular, read_regular

MARKER = ".batch.json"
STAMP = ".graded.json"
FORMAT = 1
IN_PROGRESS, COMPLETE = "in-progress", "complete"
MAX_STATE_BYTES = 1_000_000       # a marker or stamp larger is damaged
MAX_INPUT_BYTES = 500_000_000     # larger inputs are never kept: regraded
GRADER_ROOT = Path(__file__).resolve().parents[1]   # autograder/


class IncompleteError(Exception):
    """The graded folder holds an interrupted or damaged batch."""


class OtherValuesError(IncompleteError):
    """The graded folder was graded with other test values (another
    edition's): grading into it again would silently replace its grades."""


@dataclass(frozen=True)
class Kept:
    """A submission kept from an earlier run: its grades.csv row (name,
    score, max_score, task scores, the summary's note) and its inline
    answers (None: it had no readable notebook)."""

    row: dict[str, Any]
    answers: dict[str, str] | None


# --------------------------------------------------------------------------
# Fingerprints

def grader_fingerprint(rubric: Path | None, values: Path | None,
                       options: dict[str, Any]) -> str:
    """sha256 of everything a grade depends on besides the submission:
    the rubric, the test values (their manifest holds each file's sha256,
    checked when they are loaded), the grader's code and data files
    (mistakes.toml among them), the homework's own check kinds and the
    command's options."""
    from autograder import homework
    from autograder.values import values_dir
    digest = hashlib.sha256()

    def add(label: str, data: bytes) -> None:
        digest.update(f"{label}\0{len(data)}\0".encode())
        digest.update(data)

    # Staff's own files: a link to a regular file is followed (a rubric
    # kept in a course's repository), a FIFO never waited on.
    add("rubric", read_regular(Path(rubric or homework.current().rubric),
                               follow_links=True))
    add("values", read_regular(Path(values or values_dir()) /
                               "manifest.json", follow_links=True))
    for path in sorted(GRADER_ROOT.rglob("*")):
        if path.suffix in (".py", ".toml") and path.is_file():
            add(path.relative_to(GRADER_ROOT).as_posix(),
                read_regular(path, follow_links=True))
    for path in homework.current().kinds:   # the homework's own kinds
        add(f"kinds/{path.name}", read_regular(path, follow_links=True))
    add("options", json.dumps(options, sort_keys=True).encode())
    return digest.hexdigest()


def values_digest(values: Path) -> str | None:
    """sha256 of the test values' manifest (it holds every value file's
    sha256), or None when it cannot be read (the grading says why)."""
    try:
        return hashlib.sha256(read_regular(
            values / "manifest.json", follow_links=True)).hexdigest()
    except OSError:
        return None


def check_values(out: Path, values: str | None, *, new_values: bool
                 ) -> None:
    """OtherValuesError, naming the fixes, when ``out`` was graded with
    test values other than ``values`` (unless ``new_values``: the staff
    regrade it with these on purpose). A folder graded before markers
    recorded the values is accepted."""
    previous = load(out / MARKER)
    old = previous.get("values") if isinstance(previous, dict) else None
    if new_values or values is None or not isinstance(old, str) or \
            old == values:
        return
    raise OtherValuesError(
        f"{out} was graded with other test values (its {MARKER} records "
        f"the values' manifest {old[:12]}, the grader now has "
        f"{values[:12]}: a new edition, or regenerated values); grading "
        f"into it again would replace its grades with grades on other "
        f"hidden cases. To regrade that term, check out the commit that "
        f"graded it (docs/instructors.md, \"A new edition\"); to grade a "
        f"new term, give --out another folder; to regrade {out} with these "
        f"values on purpose, add --new-values (make: NEW_VALUES=1)")


def input_digest(path: Path, source: str | None = None) -> str | None:
    """sha256 of what was handed in (a file, or every file of a folder
    with its relative path; ``source``: code already in memory), or None
    when it cannot be read whole (never kept then: graded again)."""
    digest = hashlib.sha256()
    if source is not None:
        digest.update(b"source\0" + source.encode("utf-8", "surrogatepass"))
        return digest.hexdigest()
    budget = [MAX_INPUT_BYTES]

    def add_file(file: Path, label: str) -> None:
        if file.is_symlink():
            digest.update(f"link\0{label}\0{os.readlink(file)}\0".encode(
                "utf-8", "surrogateescape"))
            return
        digest.update(f"file\0{label}\0".encode("utf-8", "surrogateescape"))
        with open_regular(file) as handle:   # a FIFO never blocks it
            while chunk := handle.read(1 << 20):
                budget[0] -= len(chunk)
                if budget[0] < 0:
                    raise OSError("too large to fingerprint")
                digest.update(chunk)
        digest.update(b"\0")

    try:
        if path.is_dir() and not path.is_symlink():
            for file in sorted(path.rglob("*")):
                if file.is_file() or file.is_symlink():
                    add_file(file, file.relative_to(path).as_posix())
        else:
            add_file(path, path.name)
    except (OSError, ValueError):
        return None
    return digest.hexdigest()


def file_digest(path: Path) -> str | None:
    """sha256 of a file, or None if it cannot be read."""
    try:
        return hashlib.sha256(_read(path)).hexdigest()
    except OSError:
        return None


def _read(path: Path, limit: int | None = None) -> bytes:
    # OUT and the inputs are named by a user: only a regular file is
    # opened (a FIFO planted there would block the batch).
    return read_regular(path, limit)


# --------------------------------------------------------------------------
# The batch

@dataclass
class BatchState:
    """The batch being graded into ``out``: its id and fingerprint."""

    out: Path
    id: str
    grader: str
    resumed: bool = False
    values: str | None = None    # the test values' manifest sha256

    def write(self, state: str) -> None:
        """Write OUT/.batch.json with ``state`` (durably)."""
        atomic.write_text(self.out / MARKER, json.dumps(
            {"format": FORMAT, "id": self.id, "state": state,
             "grader": self.grader, "values": self.values}, indent=1)
            + "\n", durable=True)

    def kept(self, folder: Path, digest: str | None) -> Kept | None:
        """The submission graded into ``folder`` by an earlier run, if its
        input (``digest``) and the grader are unchanged and every file it
        wrote is whole; else None (grade it again)."""
        if digest is None:
            return None
        stamp = load(folder / STAMP)
        if not isinstance(stamp, dict) or stamp.get("format") != FORMAT \
                or stamp.get("input") != digest \
                or stamp.get("grader") != self.grader:
            return None
        files, row = stamp.get("files"), stamp.get("row")
        if not isinstance(files, dict) or "results.json" not in files or \
                not _valid_row(row, folder.name):
            return None
        for name, sha in files.items():
            if not isinstance(name, str) or "/" in name or \
                    file_digest(folder / name) != sha:
                return None
        answers = None
        if "answers.json" in files:
            answers = load(folder / "answers.json")
            if not isinstance(answers, dict) or not all(
                    isinstance(k, str) and isinstance(v, str)
                    for k, v in answers.items()):
                return None
        return Kept(row, answers)

    def stamp(self, folder: Path, digest: str | None,
              row: dict[str, Any], files: list[str]) -> None:
        """Record, after its files, that ``folder`` holds a whole grade of
        the input ``digest`` by this grader (nothing without a digest)."""
        if digest is None:
            return
        shas = {name: file_digest(folder / name) for name in files}
        if None in shas.values():
            return
        atomic.write_text(folder / STAMP, json.dumps(
            {"format": FORMAT, "batch": self.id, "input": digest,
             "grader": self.grader, "files": shas, "row": row},
            ensure_ascii=False) + "\n")


def begin(out: Path, grader: str, values: str | None = None, *,
          new_values: bool = False) -> BatchState:
    """Mark ``out`` in progress for a batch graded by ``grader`` with the
    test values ``values`` (their manifest's sha256): the interrupted
    batch's id when it resumes one by the same grader, else a new id.
    Holds a lock on ``out`` until the process ends (a second run into the
    same folder is IncompleteError), refuses a folder graded with other
    values (:func:`check_values`), and removes the temporary files a
    killed run left."""
    _lock(out)
    check_values(out, values, new_values=new_values)
    for leftover in out.rglob(f".*{atomic.TEMP_SUFFIX}"):
        try:
            if atomic.is_temporary(leftover) and leftover.is_file():
                leftover.unlink()
        except OSError:
            pass   # a later write there will say what is wrong
    previous = load(out / MARKER)
    if isinstance(previous, dict) and previous.get("grader") == grader \
            and previous.get("state") == IN_PROGRESS and \
            isinstance(previous.get("id"), str):
        state = BatchState(out, previous["id"][:64], grader, resumed=True,
                           values=values)
    else:
        state = BatchState(out, secrets.token_hex(8), grader, values=values)
    state.write(IN_PROGRESS)
    return state


_locks: dict[str, int] = {}


def _lock(out: Path) -> None:
    # flock on the folder itself: released by the kernel when the
    # process ends, however it ends; nothing to clean up after a kill.
    key = str(out.resolve())
    if key in _locks:
        return
    try:
        import fcntl
    except ImportError:   # not POSIX: no lock
        return
    fd = os.open(out, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise IncompleteError(
            f"{out}: another grade run is writing into this folder: wait "
            f"for it to finish, or give --out another folder") from None
    _locks[key] = fd


def require_complete(out: Path, command: str) -> None:
    """IncompleteError, naming the fix, unless the batch graded into
    ``out`` finished (a folder graded before batches were marked has no
    marker and is accepted)."""
    path = out / MARKER
    if not path.exists():
        return
    data = load(path)
    state = data.get("state") if isinstance(data, dict) else None
    if state == COMPLETE:
        return
    why = ("was interrupted: it is incomplete, and some results may be "
           "from an earlier grading" if state == IN_PROGRESS else
           f"is in an unknown state ({path.name} is damaged)")
    raise IncompleteError(
        f"{out}: the batch graded there {why}, so `{command}` would read "
        f"a mixed folder. Rerun the same `python -m autograder grade --out "
        f"{out} ...` command: it resumes where it stopped; then run "
        f"`{command}` again")


def load(path: Path) -> Any:
    """A JSON file of this module (a marker, a stamp) or any small JSON
    file of OUT, or None if absent, too large or damaged."""
    try:
        return json.loads(_read(path, MAX_STATE_BYTES))
    except (OSError, ValueError, RecursionError):
        return None


def _valid_row(row: Any, name: str) -> bool:
    if not isinstance(row, dict) or row.get("name") != name or \
            not isinstance(row.get("note"), str) or \
            not isinstance(row.get("tasks"), dict):
        return False
    numbers = [row.get("score"), row.get("max_score"),
               *row["tasks"].values()]
    return all(isinstance(x, (int, float)) and not isinstance(x, bool)
               and math.isfinite(x) for x in numbers) and \
        all(isinstance(k, str) for k in row["tasks"])


__all__ = ["COMPLETE", "IN_PROGRESS", "MARKER", "STAMP", "BatchState",
           "IncompleteError", "Kept", "begin", "file_digest",
           "grader_fingerprint", "input_digest", "load", "require_complete"]
