"""The registry of check kinds: the name ``rubric.toml`` gives a kind, its
implementation and its typed parameters.

A kind registers itself where it is defined
(``@register("item", "module_output", params=ModuleOutputParams)``);
``autograder.checks.kinds`` imports every module that does, so the
registry is complete once that module is imported. Nothing here imports
a kind or the rubric.
"""
from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from autograder.checks.entries import NoParams

if TYPE_CHECKING:
    from autograder.checks.base import CheckKind

SECTIONS = ("item", "deduction", "bonus")


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
    explains_crashes: bool = False   # a shape error its calls raise is
    #                                  read (checks.diagnosis.crash)

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
             uses_cases: bool = False, explains_crashes: bool = False
             ) -> Callable[[type], type]:
    """Class decorator: make ``name`` usable as ``kind`` in ``section``,
    with the parameters of the frozen dataclass ``params`` (``uses_cases``:
    the item must have a ``cases`` filter; ``explains_crashes``: a failing
    case's shape error is explained, line and sizes, by
    ``autograder.checks.diagnosis.crash``). The class is instantiated once;
    see ``autograder.checks.base.CheckKind`` for the methods each section
    calls (``plan``, ``evaluate``)."""
    if section not in SECTIONS:
        raise ValueError(f"unknown section {section!r}")
    if not (dataclasses.is_dataclass(params)
            and params.__dataclass_params__.frozen):
        raise TypeError(f"{name}: params must be a frozen dataclass")
    if (section, name) in KINDS:
        raise ValueError(f"{section} kind {name!r} is registered twice")

    def decorate(cls: type) -> type:
        KINDS[(section, name)] = KindSpec(section, name, cls(), params,
                                          uses_cases, explains_crashes)
        return cls
    return decorate
