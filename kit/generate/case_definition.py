"""A frozen test case as a homework's cases' definitions declare it.

Every homework's cases file (its profile's ``[data] cases``: the attention
homework's kit/generate/cases.py, homeworks/ffn/kit/cases.py) lists
``CASES`` of this one :class:`Case`; kit/generate/values.py runs and
records them without knowing any homework. What differs per class (its
constructor's arguments, which of them hold the input's size, the heads,
the context length) is declared in the case, never assumed by the code.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field

from autograder import homework

# The roles a case's ``arguments`` may name: "input" (x's last size),
# "width" (the output's size, or one head's where the heads are stacked
# modules), "heads" (the number of heads), "context" (the longest input).
ROLES = ("input", "width", "heads", "context")


@dataclass(frozen=True)
class Case:
    """One frozen case: a module configuration, an input size and a seed."""

    name: str
    set: str                 # "public" or "hidden"
    cls: str                 # the class (or factory function) it builds
    init: dict = field(hash=False)
    batch: int = 3
    seq: int = 5
    seed: int = 0
    mode: str = "eval"       # "train": dropout case (outputs are eval values)
    description: str = ""
    # Recorded in the manifest when not the default:
    inputs: str = "randn"    # "randn", "book" (the book's six tokens) or
    #                          "identity" (x[i] = the identity, seq = input)
    weights: str = "init"    # "init": as seeded; "dropout_probe": values
    #                          that copy the attention weights out;
    #                          "concat:<case>": the fused weights of that
    #                          stacked-heads case's heads concatenated, the
    #                          output layer the identity
    same_sizes: str = ""     # why some sizes coincide (a course's or a
    #                          book's own examples only)
    # How kit/generate/values.py runs and records the case (homework-neutral
    # code; the class-specific facts are declared here):
    call: dict = field(default_factory=dict, hash=False)
    #                          forward's keyword arguments (recorded in the
    #                          manifest when any); a tuple it returns is
    #                          (output, attention), both frozen
    extras: tuple[str, ...] = ()   # more tensors frozen, by recipe name
    #                          ("value_mix": see kit/generate/values.py)
    sizes_only: bool = False  # freeze the input, the parameter count and
    #                          shapes only, no output (a factory's module)
    arguments: dict = field(default_factory=dict, hash=False)
    #                          role (ROLES) -> the constructor argument that
    #                          holds it, e.g. {"heads": "n"}; frozen in
    #                          the manifest for the grader
    features: int = 0        # x's last size where no argument holds it
    #                          (a factory called without arguments)

    def __post_init__(self) -> None:
        unknown = set(self.arguments) - set(ROLES)
        if unknown:
            raise ValueError(f"case {self.name}: unknown argument roles "
                             f"{sorted(unknown)} (the roles are "
                             f"{', '.join(ROLES)})")

    @property
    def task(self) -> str:
        return tasks()[self.cls]

    def size(self, role: str, default: int | None = None) -> int | None:
        """The value of the constructor argument holding ``role``."""
        name = self.arguments.get(role)
        return self.init.get(name, default) if name else default

    @property
    def in_size(self) -> int:
        """The last dimension of ``x``; ValueError naming the case and the
        fix where neither an argument nor ``features`` gives it."""
        size = self.size("input", self.features)
        if not size:
            raise ValueError(
                f"case {self.name}: no size for x's last dimension: add "
                f"arguments={{'input': <the constructor argument that is "
                f"it>}} to the Case (or features=<the size>)")
        return size


@functools.lru_cache(maxsize=None)
def _tasks(rubric: str) -> dict[str, str]:
    from autograder.rubric import load_rubric
    return {task.cls: task.id for task in load_rubric(rubric).tasks}


def tasks(hw: homework.Homework | None = None) -> dict[str, str]:
    """class (or factory function) -> rubric task id, from the rubric of
    ``hw`` (default: the homework in use)."""
    return dict(_tasks(str((hw or homework.current()).rubric)))
