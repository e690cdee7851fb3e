"""The grading rubric: load ``rubric.toml``, validate it, and register the
check kinds its items name.

Points, tolerances, case filters and timeouts live in the TOML file; what a
kind of check does lives in code, registered under the name the file uses
(``@register("item", "module_output", params=ModuleOutputParams)``), its
tolerances and thresholds a frozen dataclass whose defaults the file may
override. Adding a task is a TOML edit; adding a kind of check is one
registered class and its parameters.
"""
from __future__ import annotations

import dataclasses
import importlib
import tomllib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autograder import homework

if TYPE_CHECKING:
    from autograder.checks.base import CheckKind

DEFAULT_RUBRIC = homework.current().rubric
SECTIONS = ("item", "deduction", "bonus")
RUN_MODES = ("eval", "train")
# Case-filter keys that are not constructor arguments of the case.
CASE_KEYS = ("task", "set", "mode", "name", "recipe")
# Modules that register check kinds; imported before validation.
KIND_MODULES = tuple(f"autograder.checks.{family}" for family in (
    "values", "dropout", "causal", "heads", "size", "source"))


class RubricError(ValueError):
    """The rubric file is missing or invalid; the message says where."""


@dataclass(frozen=True)
class NoParams:
    """The parameters of a kind that takes none."""


@dataclass(frozen=True)
class Check:
    """One entry of a task: a scored item, a deduction or a bonus."""

    section: str                 # "item", "deduction" or "bonus"
    id: str
    title: str
    points: float
    kind: str
    cases: dict[str, Any] = field(default_factory=dict)
    run_mode: str = "eval"
    timeout: float = 10.0
    atol: float = 1e-6
    rtol: float = 0.0
    requires: tuple[str, ...] = ()
    # The kind's parameter dataclass (``KindSpec.params``), filled from
    # the entry's extra keys over the dataclass's defaults.
    params: Any = NoParams()


@dataclass(frozen=True)
class Task:
    """A graded class: its items, deductions (floor 0) and bonuses."""

    id: str
    title: str
    cls: str
    items: tuple[Check, ...]
    deductions: tuple[Check, ...]
    bonuses: tuple[Check, ...]
    # The methods whose code the student writes ("" for a module-level
    # function): a method without markers is graded whole.
    methods: tuple[str, ...] = ("forward",)

    @property
    def max_points(self) -> float:
        return sum(item.points for item in self.items)


@dataclass(frozen=True)
class Rubric:
    """The whole rubric, in file order."""

    tasks: tuple[Task, ...]
    atol: float
    rtol: float
    mistake_atol: float
    timeout: float
    max_score: float
    path: str = ""
    # Wall clock for all of one submission's probes: a batch of N
    # submissions ends within N times this (plus the static checks).
    submission_timeout: float = 300.0

    @property
    def max_bonus(self) -> float:
        return sum(b.points for t in self.tasks for b in t.bonuses)

    def checks(self) -> list[Check]:
        """Every item, deduction and bonus, in file order."""
        return [c for t in self.tasks
                for c in (*t.items, *t.deductions, *t.bonuses)]


@dataclass
class Outcome:
    """What one check found.

    ``points`` is earned (items, bonuses) or to deduct (deductions, before
    the task's floor); ``lines`` are markdown shown to the student;
    ``hidden_lines`` are full details of hidden cases (staff, and students
    once grades are published); ``mistakes`` the catalogue ids recognised.
    """

    points: float
    passed: bool
    lines: list[str] = field(default_factory=list)
    hidden_lines: list[str] = field(default_factory=list)
    mistakes: list[str] = field(default_factory=list)
    not_implemented: bool = False
    # Value-flow diagnoses of failing cases (``checks/diagnosis``): each
    # the step where the values left the reference and the relation
    # named there, without values (the class report groups by them).
    diagnosis: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------
# Registry of check kinds

@dataclass(frozen=True)
class KindSpec:
    """A registered kind: its implementation and its parameters, a frozen
    dataclass whose fields are the extra keys it takes in the rubric
    (a field without a default is a required key)."""

    section: str
    name: str
    impl: CheckKind
    params: type
    uses_cases: bool

    def fields(self) -> dict[str, tuple[type, ...]]:
        """Each parameter's name -> the types its rubric value may have."""
        hints = typing.get_type_hints(self.params)
        return {f.name: _accepted(hints[f.name])
                for f in dataclasses.fields(self.params)}

    def required(self) -> tuple[str, ...]:
        """The parameters without a default."""
        return tuple(f.name for f in dataclasses.fields(self.params)
                     if f.default is dataclasses.MISSING
                     and f.default_factory is dataclasses.MISSING)


def _accepted(hint: Any) -> tuple[type, ...]:
    """The runtime types of an annotation (``dict[str, int] | None``:
    dict): a rubric value is never None, so None is dropped."""
    options = typing.get_args(hint) if isinstance(
        hint, types.UnionType) else (hint,)
    return tuple(typing.get_origin(o) or o for o in options
                 if o is not type(None))


KINDS: dict[tuple[str, str], KindSpec] = {}


def register(section: str, name: str, *, params: type = NoParams,
             uses_cases: bool = False):
    """Class decorator: make ``name`` usable as ``kind`` in ``section``,
    with the parameters of the frozen dataclass ``params``. The class is
    instantiated once; see ``autograder.checks.base.CheckKind`` for the
    methods each section calls (``plan``, ``evaluate``)."""
    if section not in SECTIONS:
        raise ValueError(f"unknown section {section!r}")
    if not (dataclasses.is_dataclass(params)
            and params.__dataclass_params__.frozen):
        raise TypeError(f"{name}: params must be a frozen dataclass")

    def decorate(cls):
        KINDS[(section, name)] = KindSpec(section, name, cls(), params,
                                          uses_cases)
        return cls
    return decorate


def kind(check: Check) -> KindSpec:
    """The registered implementation of ``check.kind``."""
    _load_kinds()
    return KINDS[(check.section, check.kind)]


def _load_kinds() -> None:
    for module in KIND_MODULES:
        importlib.import_module(module)


# --------------------------------------------------------------------------
# Loading and validation

def load_rubric(path: Path | str | None = None) -> Rubric:
    """Read and validate the rubric (default ``autograder/rubric.toml``).
    Raises RubricError with a message naming the offending entry."""
    path = Path(path or DEFAULT_RUBRIC)
    try:
        data = tomllib.loads(path.read_text())
    except OSError as exc:
        raise RubricError(f"cannot read rubric {path}: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise RubricError(f"{path} is not valid TOML: {exc}") from None
    return parse_rubric(data, str(path))


def parse_rubric(data: dict[str, Any], where: str = "rubric") -> Rubric:
    """Validate the decoded TOML ``data`` and build the Rubric."""
    _load_kinds()
    _expect_keys(data, where, allowed={"grading", "task"}, required={"task"})
    grading = data.get("grading", {})
    _expect_keys(grading, f"{where} [grading]", allowed={
        "atol", "rtol", "mistake_atol", "timeout", "max_score",
        "submission_timeout"})
    defaults = {
        "atol": _number(grading.get("atol", 1e-6), "[grading] atol"),
        "rtol": _number(grading.get("rtol", 0.0), "[grading] rtol"),
        "timeout": _number(grading.get("timeout", 10.0), "[grading] timeout",
                           positive=True),
    }
    tasks = []
    seen_tasks: set[str] = set()
    seen_checks: set[str] = set()
    if not isinstance(data["task"], list) or not data["task"]:
        raise RubricError(f"{where}: [[task]] must list at least one task")
    for index, raw in enumerate(data["task"], 1):
        label = f"{where}: task #{index}"
        _expect_keys(raw, label, allowed={
            "id", "title", "class", "methods", "item", "deduction",
            "bonus"},
            required={"id", "title", "class", "item"})
        task_id = _string(raw["id"], f"{label} id")
        if task_id in seen_tasks:
            raise RubricError(f"{label}: duplicate task id {task_id!r}")
        seen_tasks.add(task_id)
        sections = {}
        for section in SECTIONS:
            entries = raw.get(section, [])
            if not isinstance(entries, list):
                raise RubricError(f"{label}: {section} must be [[task."
                                  f"{section}]] tables")
            sections[section] = tuple(
                _parse_check(section, entry, f"{where}: task {task_id!r}",
                             defaults, seen_checks)
                for entry in entries)
        if not sections["item"]:
            raise RubricError(f"{label}: a task needs at least one item")
        methods = raw.get("methods", ["forward"])
        if not isinstance(methods, list) or not methods or not all(
                isinstance(m, str) for m in methods):
            raise RubricError(f"{label}: methods must be a list of method "
                              f"names (\"\" for a module-level function)")
        tasks.append(Task(task_id, _string(raw["title"], f"{label} title"),
                          _string(raw["class"], f"{label} class"),
                          sections["item"], sections["deduction"],
                          sections["bonus"], tuple(methods)))
    # A bonus may require items (passed) and deductions (not taken).
    item_ids = {c.id for t in tasks for c in (*t.items, *t.deductions)}
    for task in tasks:
        for bonus in task.bonuses:
            for required in bonus.requires:
                if required not in item_ids:
                    raise RubricError(f"{where}: bonus {bonus.id!r} requires "
                                      f"unknown item {required!r}")
    total = sum(t.max_points for t in tasks)
    max_score = _number(grading.get("max_score", total),
                        "[grading] max_score")
    if abs(max_score - total) > 1e-9:
        raise RubricError(f"{where}: the items' points add up to {total:g} "
                          f"but [grading] max_score is {max_score:g}")
    return Rubric(tuple(tasks), defaults["atol"], defaults["rtol"],
                  _number(grading.get("mistake_atol", 1e-5),
                          "[grading] mistake_atol"),
                  defaults["timeout"], max_score, where,
                  _number(grading.get("submission_timeout", 300.0),
                          "[grading] submission_timeout", positive=True))


_COMMON = {"id", "title", "points", "kind", "cases", "run_mode", "timeout",
           "atol", "rtol", "requires"}


def _parse_check(section: str, raw: Any, where: str,
                 defaults: dict[str, float], seen: set[str]) -> Check:
    if not isinstance(raw, dict):
        raise RubricError(f"{where}: each {section} must be a table")
    label = f"{where} {section} {raw.get('id', '?')!r}"
    for key in ("id", "title", "points", "kind"):
        if key not in raw:
            raise RubricError(f"{label}: missing key {key!r}")
    check_id = _string(raw["id"], f"{label} id")
    if check_id in seen:
        raise RubricError(f"{label}: duplicate id")
    seen.add(check_id)
    name = _string(raw["kind"], f"{label} kind")
    spec = KINDS.get((section, name))
    if spec is None:
        known = sorted(n for s, n in KINDS if s == section)
        raise RubricError(f"{label}: unknown {section} kind {name!r}; known: "
                          f"{', '.join(known)}")
    extra = {k: v for k, v in raw.items() if k not in _COMMON}
    fields = spec.fields()
    for key, value in extra.items():
        if key not in fields:
            allowed = sorted(_COMMON | set(fields))
            raise RubricError(f"{label}: unknown key {key!r} for kind "
                              f"{name!r}; allowed: {', '.join(allowed)}")
        if not isinstance(value, fields[key]) or (
                isinstance(value, bool) and bool not in fields[key]):
            raise RubricError(f"{label}: {key} has the wrong type "
                              f"({type(value).__name__})")
    for key in spec.required():
        if key not in raw:
            raise RubricError(f"{label}: kind {name!r} needs key {key!r}")
    cases = raw.get("cases", {})
    if not isinstance(cases, dict):
        raise RubricError(f"{label}: cases must be a table of filters")
    if spec.uses_cases and not cases:
        raise RubricError(f"{label}: kind {name!r} needs a cases filter")
    run_mode = raw.get("run_mode", "eval")
    if run_mode not in RUN_MODES:
        raise RubricError(f"{label}: run_mode must be one of {RUN_MODES}")
    requires = raw.get("requires", [])
    if not isinstance(requires, list) or not all(
            isinstance(r, str) for r in requires):
        raise RubricError(f"{label}: requires must be a list of item ids")
    return Check(
        section=section, id=check_id,
        title=_string(raw["title"], f"{label} title"),
        points=_number(raw["points"], f"{label} points"),
        kind=name, cases=dict(cases), run_mode=run_mode,
        timeout=_number(raw.get("timeout", defaults["timeout"]),
                        f"{label} timeout", positive=True),
        atol=_number(raw.get("atol", defaults["atol"]), f"{label} atol"),
        rtol=_number(raw.get("rtol", defaults["rtol"]), f"{label} rtol"),
        requires=tuple(requires), params=_params(spec, extra, label))


def _params(spec: KindSpec, extra: dict[str, Any], label: str) -> Any:
    """The kind's parameters; a value its dataclass refuses (ValueError
    from its ``__post_init__``) is a RubricError naming the item."""
    try:
        return spec.params(**extra)
    except ValueError as exc:
        raise RubricError(f"{label}: {exc}") from None


def _expect_keys(table: Any, where: str, allowed: set[str],
                 required: set[str] = frozenset()) -> None:
    if not isinstance(table, dict):
        raise RubricError(f"{where} must be a table")
    unknown = set(table) - allowed
    if unknown:
        raise RubricError(f"{where}: unknown key(s) {sorted(unknown)}; "
                          f"allowed: {sorted(allowed)}")
    missing = required - set(table)
    if missing:
        raise RubricError(f"{where}: missing key(s) {sorted(missing)}")


def _number(value: Any, where: str, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RubricError(f"{where} must be a number, got {value!r}")
    if value < 0 or (positive and value == 0):
        bound = "positive" if positive else ">= 0"
        raise RubricError(f"{where} must be {bound}, got {value!r}")
    return float(value)


def _string(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise RubricError(f"{where} must be a non-empty string")
    return value


# --------------------------------------------------------------------------
# Case selection

def select_cases(filters: dict[str, Any], cases: list) -> list:
    """The cases (autograder.values.Case) matching every filter: the keys
    ``task``, ``set``, ``mode``, ``name`` and ``recipe`` match the case's
    fields, any
    other key a constructor argument in ``case.init``; a list value
    matches any of its items."""
    chosen = []
    for case in cases:
        fields = {"task": case.task, "set": case.set, "mode": case.mode,
                  "name": case.name, "recipe": case.recipe}
        if all(_matches(fields[k] if k in CASE_KEYS else
                        case.init.get(k, _MISSING), v)
               for k, v in filters.items()):
            chosen.append(case)
    return chosen


_MISSING = object()


def _matches(value: Any, wanted: Any) -> bool:
    # A list in a filter means "any of these" (e.g. several case names).
    if isinstance(wanted, list):
        return value in wanted
    return value == wanted
