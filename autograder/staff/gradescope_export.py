"""Gradescope's "Export Submissions" archive in, grades out.

The export is a zip (or its unzipped folder) holding one folder per
submission (``submission_<id>/`` with the files the students uploaded) and
``submission_metadata.yml``, which maps each folder to its submitters::

    submission_123456:
      :submitters:
      - :name: Ada Lovelace
        :sid: '1815'
        :email: ada@example.edu
      :created_at: ...

``grade`` accepts the archive as it comes (the zip, its folder, or the
folder's entries as a shell glob passes them), named alone on the command
line: only what staff name can be an export. A zip or folder holding the
metadata file beside other paths is one student's submission (a student
could otherwise hand in a fake export and replace the batch's rows), and
staff are told so. Each submission folder is
graded under its folder name; afterwards ``annotate`` adds the submission
id, names, emails and SIDs to ``grades.csv``, from which
autograder/staff/lms_exports.py writes the upload files (Gradescope,
Canvas, Moodle). Each
submission's ``:created_at:`` is kept (``Export.created``): the late
policy reads it (autograder/term/).
"""
from __future__ import annotations

import json
import struct
import zipfile
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path, PurePosixPath

from autograder.report.layout import PATH_COLUMN
from autograder.report.results import write_json
from autograder.text import csvsafe
from autograder.files.user_files import read_regular_text
from autograder.submission.locate import (SubmissionError, safe_extract,
                                          shown_name, zip_names)

METADATA = "submission_metadata.yml"
MAX_ENTRIES = 200_000             # files in an export
MAX_BYTES = 4 * 1024 ** 3         # extracted size of an export
MAX_METADATA_BYTES = 50 * 1024 ** 2
MAX_ALIASES = 20                  # YAML aliases (an alias bomb expands)
MAX_FIELD_CHARS = 500             # a name, SID or email


class ExportError(ValueError):
    """The export cannot be read (a usage error for the command line)."""


@dataclass
class Submitter:
    """One student of a (possibly group) submission."""

    name: str
    sid: str
    email: str


@dataclass
class Export:
    """An opened export: the submission folders to grade and who made
    each (by folder name)."""

    root: Path
    paths: list[Path]
    submitters: dict[str, list[Submitter]] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)  # listed, no folder
    # entries left out of the zip (unsafe or unreadable names), as shown
    skipped: list[tuple[str, str]] = field(default_factory=list)
    # grades.csv's submission name -> its folder (set by ``grade``: names
    # are made safe and unique, so they may differ from the folder's)
    folders: dict[str, str] = field(default_factory=dict)
    # each of ``paths`` as the grader knows it: in the export it named
    given: list[str] = field(default_factory=list)
    # folder name -> its submission time (``:created_at:``, with its zone)
    created: dict[str, datetime] = field(default_factory=dict)


def find_export(paths: list[Path]) -> Path | None:
    """The export the command names: a zip or a folder holding
    ``submission_metadata.yml`` named alone, or that file among a folder's
    entries when every path is one of them (a shell glob of the folder).
    None when the paths are ordinary submissions; an export-like zip or
    folder among other paths is one of them (``lookalikes``)."""
    for path in paths:
        if path.name == METADATA and path.is_file():
            folder = path.parent.resolve()
            if all(p.resolve().parent == folder for p in paths):
                return path.parent
            raise ExportError(
                f"{path} is named beside paths outside its folder: grade "
                f"a Gradescope export alone (its zip, its folder, or "
                f"{path.parent}/*)")
    if len(paths) == 1 and _looks_like_export(paths[0]):
        return paths[0]
    return None


def lookalikes(paths: list[Path]) -> list[Path]:
    """The paths holding ``submission_metadata.yml`` that are graded as one
    submission each, since they are not named alone."""
    if len(paths) < 2:
        return []
    return [p for p in paths if _looks_like_export(p)]


def _looks_like_export(path: Path) -> bool:
    if path.is_dir():
        return (path / METADATA).is_file()
    return path.is_file() and path.suffix == ".zip" and \
        _zip_has_metadata(path)


def _zip_has_metadata(path: Path) -> bool:
    try:
        return any(PurePosixPath(n).name == METADATA and
                   len(PurePosixPath(n).parts) <= 2 for n in zip_names(path))
    except (zipfile.BadZipFile, OSError, ValueError, struct.error):
        return False


def _extract(archive: Path, dest: Path,
             skipped: list[tuple[str, str]]) -> Path:
    """Extract safely (the submissions' own extractor: no absolute or
    parent paths, no links, bounded by the export's caps, each file counted
    as it decompresses) and return the folder that holds the metadata
    file. An entry with an unsafe or unreadable name is left out and
    listed in ``skipped``: it is one submission's problem, not the
    export's."""
    try:
        safe_extract(archive, dest, max_entries=MAX_ENTRIES,
                     max_total=MAX_BYTES, skipped=skipped)
    except SubmissionError as exc:
        raise ExportError(str(exc)) from None
    found = sorted(dest.rglob(METADATA), key=lambda p: len(p.parts))
    if not found:
        raise ExportError(f"{archive.name}: no {METADATA}")
    return found[0].parent


def read_metadata(path: Path) -> dict[str, list[Submitter]]:
    """Folder name -> its submitters, from submission_metadata.yml."""
    return submitters(_read_yaml(path))


def submitters(data: dict) -> dict[str, list[Submitter]]:
    """Folder name -> its submitters, from the metadata's mapping."""
    out = {}
    for folder, entry in data.items():
        people = entry.get(":submitters") if isinstance(entry, dict) else None
        out[str(folder)] = [
            Submitter(_field(p.get(":name")), _field(p.get(":sid")),
                      _field(p.get(":email")))
            for p in (people if isinstance(people, list) else [])
            if isinstance(p, dict)]
    return out


def created(data: dict) -> dict[str, datetime]:
    """Folder name -> its ``:created_at:`` where it is a time with its
    zone (YAML reads Gradescope's ``2026-11-20 10:00:00.0 -08:00`` as one;
    anything else is left out: the time is then unknown)."""
    out = {}
    for folder, entry in data.items():
        when = entry.get(":created_at") if isinstance(entry, dict) else None
        if isinstance(when, str):
            try:
                when = datetime.fromisoformat(when)
            except ValueError:
                continue
        if isinstance(when, datetime) and when.utcoffset() is not None:
            out[str(folder)] = when
    return out


def _read_yaml(path: Path) -> dict:
    """submission_metadata.yml's mapping, read with bounds."""
    try:
        import yaml
    except ImportError as exc:
        raise ExportError(f"reading {METADATA} needs PyYAML: {exc}"
                          ) from None
    try:   # only a regular file is opened: a FIFO never blocks it
        text = read_regular_text(path, errors="replace",
                                 limit=MAX_METADATA_BYTES)
    except ValueError:
        raise ExportError(f"{path} is larger than {MAX_METADATA_BYTES} "
                          f"bytes") from None
    except OSError as exc:
        raise ExportError(f"{path.name} cannot be read: {exc}") from None
    try:
        data = yaml.load(text,
                         Loader=_bounded_loader(yaml))
    except yaml.YAMLError as exc:
        raise ExportError(f"{path.name} is not valid YAML: {exc}") from None
    except RecursionError:
        raise ExportError(f"{path.name} is nested too deeply") from None
    if not isinstance(data, dict):
        raise ExportError(f"{path.name}: expected a mapping of submission "
                          f"folders")
    return data


def _field(value: object) -> str:
    """A submitter's name, SID or email: a scalar, bounded; anything else
    (a list, a mapping: what an alias would repeat) is empty."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return ""
    return str(value)[:MAX_FIELD_CHARS]


def _bounded_loader(yaml):
    """PyYAML's safe loader refusing more than MAX_ALIASES aliases: safe
    constructs no object, but an alias bomb (each level naming the one
    below ten times) expands past any memory when it is used."""

    class Loader(yaml.SafeLoader):
        aliases = 0

        def compose_node(self, parent, index):
            if self.check_event(yaml.AliasEvent):
                self.aliases += 1
                if self.aliases > MAX_ALIASES:
                    event = self.peek_event()
                    raise yaml.composer.ComposerError(
                        None, None, f"more than {MAX_ALIASES} aliases "
                        f"(an export has none)", event.start_mark)
            return super().compose_node(parent, index)

    return Loader


def open_export(source: Path, workdir: Path) -> Export:
    """Open the export at ``source`` (zip or folder), extracting a zip
    into ``workdir``. Raises ExportError if it cannot be read."""
    skipped: list[tuple[str, str]] = []
    root = _extract(source, workdir, skipped) if source.is_file() \
        else source
    data = _read_yaml(root / METADATA)
    people = submitters(data)
    paths, missing = [], []
    for name in sorted(people):
        if _is_folder(root, name):
            paths.append(root / name)
        else:
            missing.append(shown_name(name))
    return Export(root, paths, people, missing, skipped,
                  given=[str(source / p.name) for p in paths],
                  created=created(data))


def _is_folder(root: Path, name: str) -> bool:
    """Whether the metadata's ``name`` is a submission folder right under
    ``root`` (a name with a path in it, or one the file system refuses,
    never is)."""
    if not name or name in (".", "..") or "/" in name or "\x00" in name:
        return False
    try:
        return (root / name).is_dir()
    except (OSError, ValueError):
        return False


KEPT = "export.json"    # OUT's copy of the export's names and times


def keep(out: Path, export: Export) -> None:
    """Write OUT/export.json: each graded submission's folder, every
    folder's submitters and submission time (``term OUT`` reads it)."""
    write_json({
        "folders": export.folders,
        "submitters": {f: [[p.name, p.sid, p.email] for p in people]
                       for f, people in export.submitters.items()},
        "created": {f: t.isoformat() for f, t in export.created.items()}},
        out / KEPT)


def load_kept(out: Path) -> Export | None:
    """The export kept in OUT/export.json, or None where OUT was not
    graded from one; ExportError if the file is damaged."""
    path = out / KEPT
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return Export(out, [], {
            f: [Submitter(*map(str, p)) for p in people]
            for f, people in data["submitters"].items()},
            folders=dict(data["folders"]),
            created={f: datetime.fromisoformat(t)
                     for f, t in data["created"].items()})
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ExportError(f"{path} is damaged ({exc}): grade the export "
                          f"into OUT again") from None


def annotate(out: Path, export: Export) -> str:
    """Add submission id, names, emails and SIDs to OUT/grades.csv;
    returns a line for the terminal (the upload files are
    autograder/staff/lms_exports.py's, written after the term's
    totals)."""
    grades = out / "grades.csv"
    rows = csvsafe.read_rows(grades)
    if not rows:
        return ""
    header, body = rows[0], rows[1:]
    at = header.index("submission") + 1
    new_header = [*header[:at], "submission_id", "name", "email", "sid",
                  *header[at:]]
    students = 0
    annotated = []
    for row in body:
        folder = export.folders.get(row[0], row[0])
        people = export.submitters.get(folder, [])
        sub_id = folder.removeprefix("submission_")
        # score, max_score and the tasks stay numbers (csvsafe.cell), a
        # path stays text
        numbers = [value if column == PATH_COLUMN else _number(value)
                   for column, value in zip(header[at:], row[at:])]
        annotated.append([*row[:at], sub_id,
                          "; ".join(p.name for p in people),
                          "; ".join(p.email for p in people),
                          "; ".join(p.sid for p in people), *numbers])
        students += len(people)
    # Names, emails and SIDs come from the export (students typed them):
    # csvsafe neutralises a cell that a spreadsheet would run as a formula.
    csvsafe.write_rows(grades, [new_header, *annotated])
    keep(out, export)
    # Every student the export lists, as the upload files count them:
    # those without files too (a row without a grade).
    absent = sum(len(export.submitters.get(f, [])) for f in export.missing)
    students += absent
    note = (f"; listed without files ({absent} students, no grade): "
            f"{', '.join(export.missing)}" if export.missing else "")
    if export.skipped:
        note += (f"; {len(export.skipped)} entries of the zip left out "
                 f"(unsafe or unreadable names): " + ", ".join(
                     f"{name} ({why})" for name, why in export.skipped[:10]))
    return (f"Gradescope export: {len(body)} submissions, {students} "
            f"students: names in grades.csv{note}")


def _number(text: str) -> float | str:
    try:
        return float(text)
    except ValueError:
        return text


__all__ = ["Export", "ExportError", "KEPT", "Submitter", "annotate",
           "created", "find_export", "keep", "load_kept", "lookalikes",
           "open_export", "read_metadata", "submitters"]
