"""The anonymised view of a graded folder: ``OUT/anonymised/``.

The class report, every submission's feedback, the answer pages (one per
question) and the similarity pages, with each submission named by a stable
pseudonym (``anon-7KQ3``) and no name, email, student id, submission name
or path: a TA can grade the inline answers or review the class blind, and
the folder can be handed on alone. Built from what ``grade`` wrote
(nothing is regraded).

The staff-only key (``OUT/pseudonyms.csv`` by default, mode 0600, never
inside the view) maps each pseudonym back to its submission and people.
Pseudonyms are stable: a student keeps theirs in every view made with the
same key (rerun, regrade, a later assignment: pass ``--pseudonym-key`` a
term-wide file), found by their SID, else email, else submission name;
a new student draws a new one at random (``secrets``: nothing in it is
derived from the name).

What the grader knows of a student is scrubbed from every page, student
text included (a signed answer, a name in a code string): the submission
name, the names, emails and SIDs of the export (each word of a name
too), matched whole and case-blind. A name the grader was never told
(not in the export's metadata or the file name) cannot be found; the
view ends with a scan of every file it wrote for every identifier, and a
view that fails it is removed whole.
"""
from __future__ import annotations

import html
import json
import os
import re
import secrets
import shutil
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from autograder.files import atomic
from autograder.report import layout
from autograder.text import csvsafe

if TYPE_CHECKING:   # imported where used (class_report never imports this)
    from autograder.staff.class_report import ReportOptions

VIEW = "anonymised"                  # the view's folder under OUT
KEY_NAME = "pseudonyms.csv"          # the default key, under OUT
KEY_HEADER = ["pseudonym", "identity", "submission", "name", "email",
              "sid"]
PREFIX = "anon-"
# No vowels (no word, no name, spelled by chance), no 0/O or 1/I.
ALPHABET = "23456789BCDFGHJKLMNPQRSTVWXZ"
LENGTH = 4
# grades.csv's columns that name a student (a Gradescope export's): never
# in the view. The others (scores, late days, ...) stay.
IDENTITY_COLUMNS = ("submission_id", "name", "email", "sid",
                    layout.PATH_COLUMN)
WITHHELD = "(withheld)"   # no character markdown or HTML escapes
MIN_PART = 2                         # letters of a name's word scrubbed


class KeyError_(ValueError):
    """The pseudonym key cannot be read or is contradictory; the message
    names the file, the line and the fix."""


@dataclass
class Person:
    """What the grader knows of one submission's people."""

    submission: str
    names: list[str] = field(default_factory=list)
    emails: list[str] = field(default_factory=list)
    sids: list[str] = field(default_factory=list)

    @property
    def identity(self) -> str:
        """What a pseudonym is kept by: the SIDs, else the emails, else
        the submission name (a Gradescope export's names it per
        submission, a local folder per student)."""
        for kind, values in (("sid", self.sids), ("email", self.emails)):
            if values:
                return f"{kind}:" + ";".join(sorted(v.lower()
                                                    for v in values))
        return f"submission:{self.submission}"

    def identifiers(self) -> set[str]:
        """Every string that names this submission's people."""
        found = {self.submission, *self.names, *self.emails, *self.sids}
        for name in self.names:
            found |= {w for w in re.split(r"[\s,]+", name)
                      if len(re.sub(r"\W", "", w)) >= MIN_PART}
        for email in self.emails:
            local = email.split("@", 1)[0]
            found |= {local} | {w for w in re.split(r"[._+-]+", local)
                                if len(w) >= MIN_PART + 1}
        return {f for f in found if scrubbable(f)}


def scrubbable(text: str) -> bool:
    """Whether ``text`` is replaced in free text: two characters or more,
    and four or more digits for a number (a SID of 1-3 digits would take
    every score and line number with it; it stays in its columns, which
    the view drops)."""
    text = text.strip()
    return len(text) >= MIN_PART and not (text.isdigit() and len(text) < 4)


def _split(value: str) -> list[str]:
    return [v.strip() for v in value.split(";") if v.strip()]


def people(grades_rows: Iterable[Mapping[str, str]],
           extra: Iterable[str] = ()) -> list[Person]:
    """The people of each row of grades.csv (``submission`` and, from a
    Gradescope export, ``name``, ``email``, ``sid``: several joined by
    ``; ``), plus submissions named only in ``extra`` (an archive's)."""
    found = [Person(row.get("submission", ""), _split(row.get("name", "")),
                    _split(row.get("email", "")), _split(row.get("sid", "")))
             for row in grades_rows if row.get("submission")]
    known = {p.submission for p in found}
    found += [Person(name) for name in extra if name not in known]
    return found


# --------------------------------------------------------------------------
# The key

@dataclass
class Key:
    """Pseudonym by identity, read from and written to a staff-only CSV."""

    path: Path
    rows: dict[str, list[str]] = field(default_factory=dict)  # identity ->

    @classmethod
    def load(cls, path: Path) -> "Key":
        """The key at ``path`` (empty if there is none yet); KeyError_
        naming the line for a malformed or contradictory one."""
        key = cls(Path(path))
        if not key.path.exists():
            return key
        if not key.path.is_file():
            raise KeyError_(f"{path}: not a file (the pseudonym key is a "
                            f"CSV written by the anonymised view)")
        rows = csvsafe.read_rows(key.path)
        if not rows or rows[0] != KEY_HEADER:
            raise KeyError_(f"{path}: line 1: the header must be "
                            f"{','.join(KEY_HEADER)} (a key written by the "
                            f"anonymised view; remove the file to start a "
                            f"new one, and every pseudonym changes)")
        seen: dict[str, int] = {}
        for number, row in enumerate(rows[1:], 2):
            if len(row) != len(KEY_HEADER) or \
                    not re.fullmatch(f"{PREFIX}[{ALPHABET}]{{{LENGTH}}}",
                                     row[0]) or not row[1]:
                raise KeyError_(f"{path}: line {number}: not a pseudonym "
                                f"row ({PREFIX}XXXX, identity, ...): fix "
                                f"or remove the line")
            for value, what in ((row[0], "pseudonym"),
                                (row[1], "identity")):
                if value in seen:
                    raise KeyError_(f"{path}: line {number}: {what} "
                                    f"{value} is already on line "
                                    f"{seen[value]}: keep one of them")
                seen[value] = number
            key.rows[row[1]] = row
        return key

    def assign(self, found: Sequence[Person]) -> dict[str, str]:
        """Submission -> pseudonym for ``found``: each identity's own
        from the key, a new one drawn for a new identity (recorded with
        its submission and people)."""
        taken = {row[0] for row in self.rows.values()}
        names = {}
        for person in found:
            row = self.rows.get(person.identity)
            if row is None:
                pseudonym = _draw(taken)
                taken.add(pseudonym)
                row = [pseudonym, person.identity, "", "", "", ""]
                self.rows[person.identity] = row
            row[2:] = [person.submission, "; ".join(person.names),
                       "; ".join(person.emails), "; ".join(person.sids)]
            names[person.submission] = row[0]
        return names

    def save(self) -> None:
        """Write the key whole (atomic), readable by its owner only."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        csvsafe.write_rows(self.path, [KEY_HEADER, *sorted(
            self.rows.values())])
        os.chmod(self.path, 0o600)


def _draw(taken: set[str]) -> str:
    while True:
        found = PREFIX + "".join(secrets.choice(ALPHABET)
                                 for _ in range(LENGTH))
        if found not in taken:
            return found


# --------------------------------------------------------------------------
# Scrubbing

@dataclass(frozen=True)
class Scrubber:
    """Replaces every identifier of a batch in a text: a submission's
    name by its pseudonym, the rest by WITHHELD; whole words only (not
    inside a longer word), case-blind, in plain and HTML-escaped form."""

    pattern: re.Pattern[str] | None
    to: Mapping[str, str]

    @classmethod
    def of(cls, found: Sequence[Person], names: Mapping[str, str]
           ) -> "Scrubber":
        to: dict[str, str] = {}
        for person in found:
            for text in person.identifiers():
                for form in {text, html.escape(text, quote=True)}:
                    to.setdefault(form.lower(), WITHHELD)
        for person in found:   # a submission's own name: its pseudonym
            if not scrubbable(person.submission):
                continue
            pseudonym = names.get(person.submission, WITHHELD)
            for form in {person.submission,
                         html.escape(person.submission, quote=True)}:
                to[form.lower()] = pseudonym
        if not to:
            return cls(None, {})
        words = sorted(to, key=len, reverse=True)
        pattern = re.compile(
            r"(?<![A-Za-z0-9])(?:" + "|".join(map(re.escape, words))
            + r")(?![A-Za-z0-9])", re.IGNORECASE)
        return cls(pattern, to)

    def __call__(self, text: str) -> str:
        if self.pattern is None:
            return text
        return self.pattern.sub(lambda m: self.to[m.group(0).lower()],
                                text)

    def leaks(self, text: str) -> list[str]:
        """The identifiers still in ``text`` (a pseudonym is none)."""
        if self.pattern is None:
            return []
        return sorted({m.group(0) for m in self.pattern.finditer(text)
                       if self.to[m.group(0).lower()] != m.group(0)})


# --------------------------------------------------------------------------
# The view

def check_key(path: Path) -> Key:
    """The key at ``path`` read and checked (KeyError_ naming the line),
    before anything is graded."""
    return Key.load(path)


def key_path(out: Path, key: Path | None) -> Path:
    """The key in use: ``key``, else OUT/pseudonyms.csv."""
    return Path(key) if key is not None else Path(out) / KEY_NAME


def write_view(out: Path | str, messages: dict[str, str], *,
               key: Path | None = None,
               archive: Sequence[Path | str] = ()) -> Path:
    """Write ``OUT/anonymised/`` (report.html, submissions/<pseudonym>/
    feedback, answers/, similarity/) from the batch graded into ``out``,
    pseudonyms from ``key`` (default OUT/pseudonyms.csv, updated);
    returns the view's report. Written into a new folder that replaces
    the old one only once whole and scanned clean."""
    from autograder.staff import class_report, similarity
    out = Path(out)
    batch = class_report.read_batch(out)
    rows = csvsafe.read_dicts(out / "grades.csv")[1] \
        if (out / "grades.csv").is_file() else \
        [{"submission": s.name} for s in batch.submissions]
    labels = similarity.archive_labels(archive)
    archived = [f"{label}/{name}" for path, label in zip(archive, labels)
                for name in _archive_names(path)]
    found = people(rows, archived)
    the_key = Key.load(key_path(out, key))
    names = the_key.assign(found)
    scrub = Scrubber.of(found, names)
    view = out / VIEW
    building = out / f".{VIEW}.new"
    shutil.rmtree(building, ignore_errors=True)
    building.mkdir()
    try:
        anonymous = _anonymous_batch(batch, names, building)
        _copy_feedback(batch, names, building, scrub)
        _answer_pages(out, names, building, scrub)
        links = class_report.write_linked_pages(anonymous)
        section = similarity.report_section(
            out, links, archive=archive, names=names, pages=building,
            scrub=scrub)
        page = class_report.build_report(
            anonymous, messages, links, [section],
            title=f"Class report (anonymised): {out.name}")
        atomic.write_text(building / class_report.REPORT_NAME, scrub(page))
        _scan(building, scrub)
        the_key.save()
        old = out / f".{VIEW}.old"
        shutil.rmtree(old, ignore_errors=True)
        if view.exists():
            view.rename(old)
        building.rename(view)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(building, ignore_errors=True)
    return view / class_report.REPORT_NAME


def _archive_names(path: Path | str) -> list[str]:
    """The submissions an archive holds (for their pseudonyms)."""
    from autograder.staff import similarity
    sources, answers = similarity.read_archive(path, "")
    return sorted({n.split("/", 1)[1] for n in (*sources, *answers)})


def _anonymous_batch(batch, names: Mapping[str, str], view: Path):
    """``batch`` with each submission named by its pseudonym, without the
    identity columns, read from ``view``; in pseudonym order."""
    subs = [replace(s, name=names[s.name], extra={
        c: v for c, v in s.extra.items() if c not in IDENTITY_COLUMNS})
        for s in batch.submissions]
    columns = [c for c in batch.csv_extra if c not in IDENTITY_COLUMNS]
    return replace(batch, out=view, csv_extra=columns,
                   submissions=sorted(subs, key=lambda s: s.name))


def _copy_feedback(batch, names: Mapping[str, str], view: Path,
                   scrub: Scrubber) -> None:
    """Each submission's feedback.md, scrubbed, under the view's
    submissions/<pseudonym>/."""
    for sub in batch.submissions:
        source = layout.submission_dir(batch.out, sub.name) / "feedback.md"
        if source.is_file():
            folder = view / layout.SUBMISSIONS / names[sub.name]
            folder.mkdir(parents=True, exist_ok=True)
            atomic.write_text(folder / "feedback.md",
                              scrub(source.read_text(errors="replace")))


def _answer_pages(out: Path, names: Mapping[str, str], view: Path,
                  scrub: Scrubber) -> None:
    """The answer pages (one per question), each answer scrubbed and
    under its pseudonym, in pseudonym order."""
    found: dict[str, dict[str, str]] = {}
    for name, folder in layout.submission_dirs(out, "answers.json").items():
        if name not in names:
            continue
        try:
            data = json.loads((folder / "answers.json").read_text())
        except (OSError, ValueError, RecursionError):
            continue
        if isinstance(data, dict):
            found[names[name]] = {str(q): scrub(str(t))
                                  for q, t in data.items()}
    if found:
        from autograder.submission import answers
        answers.write_question_pages(view, dict(sorted(found.items())))


def _scan(view: Path, scrub: Scrubber) -> None:
    """Every file of ``view`` scanned for every identifier; a leak raises
    (the view is then not written)."""
    for path in sorted(p for p in view.rglob("*") if p.is_file()):
        leaks = scrub.leaks(path.read_text(errors="replace"))
        if leaks or scrub.leaks(path.name):
            raise RuntimeError(f"anonymised view not written: "
                               f"{path.relative_to(view)} still names a "
                               f"student ({len(leaks)} identifier(s))")


def write_views(out: Path | str, messages: dict[str, str],
                options: ReportOptions | None = None, *,
                strict: bool = False) -> str:
    """``class_report.write_report``, then with ``options.anonymise``
    the anonymised view (OUT/anonymised/: :func:`write_view`); the
    terminal lines. A view that fails is said in them and leaves the report
    (``strict``: raised)."""
    from autograder.staff import class_report
    options = options or class_report.ReportOptions()
    line = ("class report: "
            f"{class_report.write_report(out, messages, options=options)}")
    if not options.anonymise:
        return line
    try:
        view = write_view(out, messages, key=options.key,
                          archive=options.archive)
    except atomic.OutputError:
        raise   # the machine's failure: the command stops
    except Exception as exc:   # noqa: BLE001 - the report stands
        if strict:
            raise
        return (f"{line}\nanonymised view: not written "
                f"({type(exc).__name__}: {str(exc)[:300]})")
    return (f"{line}\nanonymised view: {view} (pseudonyms only; the key, "
            f"staff only: {key_path(Path(out), options.key)})")


__all__ = ["IDENTITY_COLUMNS", "KEY_NAME", "Key", "KeyError_", "Person",
           "Scrubber", "VIEW", "check_key", "key_path", "people",
           "scrubbable", "write_view", "write_views"]
