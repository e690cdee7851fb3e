"""The homework profile: ``homework.toml``, the one declared description
of the homework (its module, reference, notebook, release name, Gradescope
venv and data files), read by the grader, the staff tools and the tests.

``current()`` is the profile in use: the folder named by ``$HOMEWORK``
(one holding ``homework.toml``), else the repository (or shipped copy)
this package sits in. ``load(root)`` reads and validates one: an unknown
key, a wrong type or a missing file is a :class:`HomeworkError` naming
the key and the fix. The grader's files must exist wherever the profile
is read; the staff-only ones (the reference, the notebook, the catalogue,
the cases' and steps' definitions), which never ship, are checked by
``load(root, staff=True)`` and :func:`staff`, which the kit uses.
"""
from __future__ import annotations

import functools
import os
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

PROFILE = "homework.toml"
ENV = "HOMEWORK"
# The folder this package sits in: the repository, the release or the
# Gradescope source folder (each carries its homework.toml).
DEFAULT_ROOT = Path(__file__).resolve().parents[1]

# section -> key -> (kind, staff only). "path" is a path relative to the
# root, "paths" a list of them, "name" a word (letters, digits, _ . -),
# "text" any string, "abspath" an absolute path of plain characters (shell
# scripts read it).
SCHEMA: dict[str, dict[str, tuple[str, bool]]] = {
    "homework": {"name": ("name", False), "title": ("text", False)},
    "module": {"package": ("name", False), "file": ("path", True),
               "reference": ("path", True)},
    "notebook": {"source": ("path", True), "master": ("path", True)},
    "release": {"folder": ("name", False), "summary": ("text", False),
                "hidden": ("text", False)},
    "gradescope": {"venv": ("abspath", False)},
    "data": {"rubric": ("path", False), "mistakes": ("path", False),
             "questions": ("path", False),
             "python_features": ("path", False),
             "imports": ("path", False),
             "shape_notation": ("path", False),
             "test_values": ("path", False), "catalogue": ("path", True),
             "cases": ("path", True), "steps": ("path", True),
             "kinds": ("paths", False)},
    "docs": {"facts": ("paths", True)},
}
# Keys a profile may leave out, and what stands in for each: what the
# grader's Python lacks is the grader's fact, not a homework's (one shared
# table; a homework names its own only to override it).
SHARED_FEATURES = Path(__file__).resolve().with_name("python_features.toml")
# A homework's own check kinds (modules that register kinds only its
# rubric uses) are optional: most homeworks use the grader's alone.
OPTIONAL: dict[tuple[str, str], object] = {
    ("data", "python_features"): SHARED_FEATURES, ("data", "kinds"): ()}
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,100}")
_ABSPATH = re.compile(r"/[A-Za-z0-9_./-]{1,200}")


class HomeworkError(ValueError):
    """The homework profile cannot be used; the message names the file,
    the key and the fix."""


@dataclass(frozen=True)
class Homework:
    """A validated homework profile, paths resolved against ``root``."""

    root: Path
    name: str
    title: str
    package: str            # the importable package students write in
    module_file: str        # the students' module, relative to root (posix;
    #                         staff only: Gradescope's copy has none)
    reference: Path         # the hidden reference (staff only)
    notebook_source: Path   # the notebook's text source (staff only)
    notebook: Path          # the otter-assign master notebook (staff only)
    release_folder: str     # student.zip unpacks into this folder
    summary: str            # what students do, the student README's intro
    hidden: str             # what the hidden cases vary, said to students
    gradescope_venv: str    # the Gradescope image's venv
    rubric: Path
    mistakes: Path
    questions: Path
    python_features: Path
    imports: Path           # the packages a submission may import
    shape_notation: Path    # the shape comments' size names and forms
    test_values: Path
    catalogue: Path         # the variant catalogue folder (staff only)
    cases: Path             # the cases' definitions (staff only)
    steps: Path             # the reference's named steps (staff only)
    kinds: tuple[Path, ...]   # its own check kinds' modules (registered
    #                           through autograder.checks.registry)
    fact_documents: tuple[str, ...]   # documents with facts blocks, relative
    #                                   to root (posix; staff only)

    @property
    def module(self) -> Path:
        """The students' module in this checkout."""
        return self.root / self.module_file

    @property
    def module_name(self) -> str:
        """The module's file name (``modeling_attention.py``)."""
        return Path(self.module_file).name

    @property
    def module_stem(self) -> str:
        """The module's import name within its package."""
        return Path(self.module_file).stem

    @property
    def import_name(self) -> str:
        """The module's dotted import name (``package.stem``)."""
        return f"{self.package}.{self.module_stem}"

    @property
    def profile(self) -> Path:
        """This profile's file."""
        return self.root / PROFILE


def _paths(path: Path, section: str, key: str,
           value: object) -> tuple[str, ...]:
    """A "paths" list, each checked as a "path"; HomeworkError naming the
    key."""
    if not isinstance(value, list) or not value:
        raise HomeworkError(f"{path}: [{section}] {key} must be a non-empty "
                            f"list of relative paths (got {value!r}): set "
                            f"it in {PROFILE}")
    return tuple(_value(path, section, key, "path", item) for item in value)


def _value(path: Path, section: str, key: str, kind: str,
           value: object) -> str:
    """``value`` checked against ``kind``; HomeworkError naming the key."""
    where = f"{path}: [{section}] {key}"
    if not isinstance(value, str) or not value.strip():
        raise HomeworkError(f"{where} must be a non-empty string (got "
                            f"{value!r}): set it in {PROFILE}")
    if kind == "name" and not _NAME.fullmatch(value):
        raise HomeworkError(f"{where} = {value!r} must be one word of "
                            f"letters, digits, '_', '.' or '-': fix it in "
                            f"{PROFILE}")
    if kind == "abspath" and not _ABSPATH.fullmatch(value):
        raise HomeworkError(f"{where} = {value!r} must be an absolute path "
                            f"of letters, digits, '_', '.', '-' and '/': fix "
                            f"it in {PROFILE}")
    if kind == "path" and (Path(value).is_absolute() or ".." in
                           Path(value).parts or "\\" in value):
        raise HomeworkError(f"{where} = {value!r} must be a relative path "
                            f"with '/' inside the homework's folder: fix it "
                            f"in {PROFILE}")
    return value


def _read(path: Path) -> dict:
    """The profile's TOML; HomeworkError naming the file if unreadable."""
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise HomeworkError(
            f"{path} is missing: a homework's folder holds its "
            f"{PROFILE}: name the folder as {ENV}=DIR (or `homework-kit "
            f"--homework DIR ...`)"
            f"{'' if os.environ.get(ENV) else f'; {ENV} is not set'}"
            ) from None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise HomeworkError(f"cannot read {path}: {exc}: fix the "
                            f"file") from None


def load(root: Path | None = None, *, staff: bool = False) -> Homework:
    """Read and validate ``root/homework.toml`` (default: the repository).
    Every declared file must exist; with ``staff`` the staff-only ones too
    (they never ship). HomeworkError naming the key and the fix."""
    root = Path(root if root is not None else DEFAULT_ROOT).resolve()
    path = root / PROFILE
    data = _read(path)
    for section in data:
        if section not in SCHEMA:
            raise HomeworkError(f"{path}: unknown section [{section}]: the "
                                f"sections are {', '.join(SCHEMA)}")
    fields: dict[str, object] = {}
    for section, keys in SCHEMA.items():
        table = data.get(section)
        if not isinstance(table, dict):
            raise HomeworkError(f"{path}: section [{section}] is missing: "
                                f"add it with {', '.join(keys)}")
        for key in table:
            if key not in keys:
                raise HomeworkError(f"{path}: unknown key [{section}] {key}:"
                                    f" the keys are {', '.join(keys)}")
        for key, (kind, staff_only) in keys.items():
            if key not in table and (section, key) in OPTIONAL:
                continue
            if key not in table:
                raise HomeworkError(f"{path}: [{section}] {key} is missing:"
                                    f" add it to {PROFILE}")
            value = _paths(path, section, key, table[key]) \
                if kind == "paths" else \
                _value(path, section, key, kind, table[key])
            if kind in ("path", "paths") and (staff or not staff_only):
                for one in (value,) if kind == "path" else value:
                    if not (root / one).exists():
                        raise HomeworkError(
                            f"{path}: [{section}] {key} = {one!r}: "
                            f"{root / one} does not exist: create it or "
                            f"fix the path")
            fields[f"{section}.{key}"] = value
    return _homework(root, fields)


def _homework(root: Path, f: dict[str, object]) -> Homework:
    """The dataclass from the validated ``section.key`` values."""
    def at(key: str) -> Path:
        return root / str(f[key])
    return Homework(
        root=root, name=str(f["homework.name"]),
        title=str(f["homework.title"]), package=str(f["module.package"]),
        module_file=str(f["module.file"]), reference=at("module.reference"),
        notebook_source=at("notebook.source"),
        notebook=at("notebook.master"),
        release_folder=str(f["release.folder"]),
        summary=str(f["release.summary"]), hidden=str(f["release.hidden"]),
        gradescope_venv=str(f["gradescope.venv"]), rubric=at("data.rubric"),
        mistakes=at("data.mistakes"), questions=at("data.questions"),
        python_features=at("data.python_features")
        if "data.python_features" in f
        else OPTIONAL[("data", "python_features")],
        imports=at("data.imports"),
        shape_notation=at("data.shape_notation"),
        test_values=at("data.test_values"), catalogue=at("data.catalogue"),
        cases=at("data.cases"), steps=at("data.steps"),
        kinds=tuple(root / one for one in f.get("data.kinds", ())),
        fact_documents=tuple(f["docs.facts"]))


def selected_root() -> Path:
    """The root in use: ``$HOMEWORK`` if set, else the repository."""
    chosen = os.environ.get(ENV, "").strip()
    return Path(chosen) if chosen else DEFAULT_ROOT


@functools.lru_cache(maxsize=None)
def _cached(root: Path, staff: bool) -> Homework:
    return load(root, staff=staff)


def current() -> Homework:
    """The profile in use (``$HOMEWORK`` or the repository's), read once."""
    return _cached(selected_root().resolve(), False)


def staff() -> Homework:
    """The profile in use, its staff-only files checked too (the kit)."""
    return _cached(selected_root().resolve(), True)
