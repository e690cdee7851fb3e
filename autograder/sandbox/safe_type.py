"""Type tests and type names that run none of a value's own code.

``isinstance(value, cls)`` reads ``value.__class__`` when the value's
type is not ``cls`` or a subclass: a property there (or a C callable
posing as one) is the submission's code, run inside the grader's call
with the grader's frame innermost. ``type(value).__name__`` can be a
metaclass's property. These read the C type only.
"""
from __future__ import annotations

from typing import Any

_type_name = type.__dict__["__name__"].__get__


def is_a(value: Any, cls: type | tuple[type, ...]) -> bool:
    """``isinstance(value, cls)`` by the value's type alone."""
    return issubclass(type(value), cls)


def type_name(value: Any) -> str:
    """The name of the value's type, read past its metaclass."""
    return _type_name(type(value))
