"""Where a graded folder keeps what: the one place that knows the layout.

``grade --out OUT`` writes the batch's own files at the top of OUT
(``grades.csv``, ``report.html``, ``regrade.md``, ``answers/``,
``similarity/``, ...) and each submission's files (``results.json``,
``feedback.md``, ``source.py``, ``answers.json``) under
``OUT/submissions/<name>/``: a submission's name, whatever it is, can
never take the name of a batch file (a submission called
``grades.csv.py`` once turned OUT/grades.csv into a folder).

Folders graded before this layout kept each submission at ``OUT/<name>/``;
the readers here still find them (``--compare`` with an older folder).
"""
from __future__ import annotations

from pathlib import Path

SUBMISSIONS = "submissions"
# grades.csv's last column: each submission's path as the grader named it
# (the submission's name is that path's name made safe and distinct)
PATH_COLUMN = "path"
# The batch's own entries of an old-layout OUT: never a submission there.
_BATCH_ENTRIES = {SUBMISSIONS, "answers", "similarity"}


# A submission's results.json larger than this is not read back (the
# class report, the term's adjustment ranges): no file of the grader's
# is near it.
MAX_RESULTS_BYTES = 20_000_000


def submission_dir(out: Path | str, name: str) -> Path:
    """The folder of submission ``name`` in the graded folder ``out``:
    ``OUT/submissions/<name>``, or ``OUT/<name>`` in a folder graded with
    the old layout (no ``submissions/``) that has it."""
    out = Path(out)
    new = out / SUBMISSIONS / name
    if not (out / SUBMISSIONS).is_dir() and (out / name).is_dir() and \
            name not in _BATCH_ENTRIES:
        return out / name
    return new


def submission_link(out: Path | str, name: str) -> str:
    """``submission_dir`` relative to ``out``, as a POSIX path."""
    return submission_dir(out, name).relative_to(Path(out)).as_posix()


def submission_dirs(out: Path | str, holding: str = "") -> dict[str, Path]:
    """Name -> folder of every submission graded into ``out`` (new layout,
    else the old one), in name order; with ``holding``, only the folders
    that hold that file."""
    out = Path(out)
    root = out / SUBMISSIONS
    if root.is_dir():
        candidates = [p for p in root.iterdir() if p.is_dir()]
    else:
        candidates = [p for p in out.iterdir() if p.is_dir() and
                      p.name not in _BATCH_ENTRIES] if out.is_dir() else []
    found = {p.name: p for p in candidates
             if not p.name.startswith(".") and
             (not holding or (p / holding).is_file())}
    return dict(sorted(found.items()))


__all__ = ["PATH_COLUMN", "SUBMISSIONS", "submission_dir", "submission_dirs",
           "submission_link"]
