"""Sizes and source lines as the diagnosis names them: the head size,
every size a relation or a crash may name, a quoted line (used by both
``attach`` and ``crash``, which must not import each other)."""
from __future__ import annotations

from autograder.text import mdsafe
from autograder.values import Case


def head_size(case: Case) -> tuple[int, str]:
    """The size each head's scores are divided by the root of, and its
    name as the class's docstring says it: the case's frozen ``scale``
    (a case without one is never diagnosed: ``attach.diagnosable``)."""
    assert case.scale is not None, case.name
    return case.scale.size, case.scale.name


def named_sizes(case: Case) -> dict[str, int]:
    """The sizes a relation may name (the batch is no scale anyone
    uses; the head size first)."""
    head, name = head_size(case)
    sizes = {name: head}
    sizes.update((k, v) for k, v in case.sizes.items()
                 if k != "batch_size" and k not in sizes)
    heads, name = case.size("heads"), case.argument("input")
    if heads and name in case.init:
        # A head size taken from the input's features.
        sizes.setdefault(f"{name} // {case.argument('heads')}",
                         case.init[name] // heads)
    return sizes


def quote(source: str, line: int) -> str:
    """Line ``line`` of ``source``, stripped, as a Markdown code span."""
    lines = source.splitlines()
    text = lines[line - 1].strip() if 0 < line <= len(lines) else ""
    return mdsafe.code_span(text, 120)
