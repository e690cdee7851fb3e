"""The rubric's entries as every check kind sees them: a task, one of its
checks (an item, a deduction or a bonus) with its typed parameters, what
a check found (``Outcome``), and the cases a check's filter selects.

``autograder.rubric`` builds these from ``rubric.toml``; a kind only reads
them, so no kind imports the rubric.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from autograder.sandbox.limits import LIMITS
from autograder.values import Case

# Case-filter keys that are not constructor arguments of the case.
CASE_KEYS = ("task", "set", "mode", "name", "recipe")


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
    # seconds per probe: the item's, else the rubric's [grading] timeout
    timeout: float = LIMITS.probe_seconds
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


def select_cases(filters: dict[str, Any],
                 cases: list[Case]) -> list[Case]:
    """The cases matching every filter: the keys
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
