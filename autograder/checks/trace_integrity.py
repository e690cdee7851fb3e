"""Whether a shape trace can be trusted, and what ran while it was taken.

The shape recorder lives in the worker, beside student code that may patch
it (a no-op ``add``, a replaced recorder object). The parent therefore
checks each traced call that returned: the canary, a record the worker
makes through the recorder at every function entry with a shape drawn
from a nonce the parent chose (``Probe.canary``), must be there, and every
statement that runs on any path through the task's ``forward`` (its
top-level statements up to the first that may leave it) must have been
recorded. A trace that fails either is not evidence: the shape-comment
deduction applies.

The trace also records the first line of every function of the submission
that ran (and of every lambda outside a function): the functions a task's
code actually ran, however it called them (a dict, ``getattr``, a lambda),
are graded with it (``regions.graded_regions``, ``ran``).
"""
from __future__ import annotations

import ast

from autograder.submission import regions

CANARY_LINE = 0     # no source line is 0


def canary_shape(nonce: int) -> list[int]:
    """The shape the canary record of ``nonce`` carries."""
    return [2 + nonce % 89, 2 + (nonce // 89) % 97]


def expected_lines(source: str, cls: str) -> set[int]:
    """Lines the trace of any call of ``cls.forward`` that returned must
    hold: the ``def`` line (its entry) and the recorded statements of its
    body that run on every path, up to the first statement that may leave
    it (a ``return``, ``raise`` or a block holding one)."""
    try:
        tree = regions.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return set()
    # The class wherever Python defines it (under ``if True:`` too).
    forward = next((item for node in regions.flatten(tree.body)
                    if isinstance(node, ast.ClassDef) and node.name == cls
                    for item in regions.flatten(node.body)
                    if isinstance(item, ast.FunctionDef)
                    and item.name == "forward"), None)
    if forward is None:
        return set()
    lines = {forward.lineno}
    for stmt in forward.body:
        if regions.recorded(stmt):
            lines.add(stmt.lineno)
        if isinstance(stmt, (ast.Return, ast.Raise)) or any(
                isinstance(n, (ast.Return, ast.Raise))
                for n in ast.walk(stmt)):
            break
    return lines


def trace_problem(source: str, cls: str, nonce: int,
                  shapes: dict[int, list]) -> str | None:
    """Why the trace of a call of ``cls`` that returned cannot be trusted
    (student-facing words), or None."""
    if shapes.get(CANARY_LINE) != [[canary_shape(nonce)]]:
        return "the grader's check record is missing or altered"
    missing = sorted(expected_lines(source, cls) - set(shapes))
    if missing:
        shown = ", ".join(map(str, missing[:5]))
        return (f"line{'s' * (len(missing) > 1)} {shown} ran but "
                f"{'were' if len(missing) > 1 else 'was'} not recorded")
    return None
