"""The grading rubric: load ``rubric.toml`` and validate it against the
registered check kinds.

Points, tolerances, case filters and timeouts live in the TOML file; what a
kind of check does lives in code (``autograder/checks/``), registered under
the name the file uses (``autograder.checks.registry.register``), its
tolerances and thresholds a frozen dataclass whose defaults the file may
override. Adding a task is a TOML edit; adding a kind of check is one
module and its registration.
"""
from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autograder import homework
# The entries' types, the case filter and the kind lookup are also read
# from here by the stages that hold a rubric.
from autograder.checks.entries import Check, Outcome, Task, select_cases
from autograder.checks.kinds import kind, register_homework_kinds
from autograder.checks.registry import KINDS, SECTIONS, KindSpec
from autograder.files.user_files import read_regular_text
from autograder.sandbox.limits import LIMITS

RUN_MODES = ("eval", "train")
# What a total above the maximum means ([grading] bonus): "extra_credit"
# keeps it, "capped" cuts it to the maximum. Every export states it.
BONUS_POLICIES = ("extra_credit", "capped")


class RubricError(ValueError):
    """The rubric file is missing or invalid; the message says where."""


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
    bonus_policy: str = "extra_credit"

    @property
    def max_bonus(self) -> float:
        return sum(b.points for t in self.tasks for b in t.bonuses)

    def checks(self) -> list[Check]:
        """Every item, deduction and bonus, in file order."""
        return [c for t in self.tasks
                for c in (*t.items, *t.deductions, *t.bonuses)]


# --------------------------------------------------------------------------
# Loading and validation

def load_rubric(path: Path | str | None = None, *,
                hw: homework.Homework | None = None) -> Rubric:
    """Read and validate the rubric (default: ``hw``'s, else the homework
    in use). Raises RubricError with a message naming the offending
    entry."""
    hw = hw or homework.current()
    path = Path(path or hw.rubric)
    try:
        # never a FIFO; a link to a regular file is followed
        data = tomllib.loads(read_regular_text(path, follow_links=True))
    except (OSError, UnicodeDecodeError) as exc:
        raise RubricError(f"cannot read rubric {path}: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise RubricError(f"{path} is not valid TOML: {exc}") from None
    return parse_rubric(data, str(path), hw=hw)


def parse_rubric(data: dict[str, Any], where: str = "rubric", *,
                 hw: homework.Homework | None = None) -> Rubric:
    """Validate the decoded TOML ``data`` against the shared kinds and the
    homework ``hw``'s own (default: the one in use) and build the
    Rubric."""
    register_homework_kinds(hw or homework.current())
    _expect_keys(data, where, allowed={"grading", "task"}, required={"task"})
    grading = data.get("grading", {})
    _expect_keys(grading, f"{where} [grading]", allowed={
        "atol", "rtol", "mistake_atol", "timeout", "max_score",
        "submission_timeout", "bonus"})
    bonus_policy = grading.get("bonus", "extra_credit")
    if bonus_policy not in BONUS_POLICIES:
        raise RubricError(f"{where} [grading] bonus: {bonus_policy!r} is "
                          f"not a bonus policy; write one of "
                          f"{', '.join(map(repr, BONUS_POLICIES))}")
    defaults = {
        "atol": _number(grading.get("atol", 1e-6), "[grading] atol"),
        "rtol": _number(grading.get("rtol", 0.0), "[grading] rtol"),
        "timeout": _number(grading.get("timeout", LIMITS.probe_seconds),
                           "[grading] timeout", positive=True),
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
                          "[grading] submission_timeout", positive=True),
                  bonus_policy)


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
