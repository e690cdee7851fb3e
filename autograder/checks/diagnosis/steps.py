"""The reference's named steps: what each is called, its rank on the path,
and which tensors of a frozen case hold them.

A case's steps are frozen by ``make test-values``
(``kit/generate/steps.py``) as ``step.<name>`` tensors beside its output,
in the canonical layout below;
public cases' steps ship with the public values, hidden cases' stay with
the grader. Ranks order the path: steps of one rank are alternatives or
siblings (q, k and v; scores scaled or masked first).
"""
from __future__ import annotations

from dataclasses import dataclass

PREFIX = "step."


@dataclass(frozen=True)
class Step:
    """One named step of the reference's computation."""

    name: str
    rank: int
    words: str        # how the feedback names it


STEPS = {s.name: s for s in (
    Step("x", 0, "the input x"),
    Step("q", 1, "the queries q"),
    Step("k", 1, "the keys k"),
    Step("v", 1, "the values v"),
    Step("scores", 2, "the scores q @ k^T"),
    Step("scaled", 3, "the scaled scores"),
    Step("masked", 3, "the masked scores"),
    Step("scaled_masked", 4, "the scaled and masked scores"),
    Step("weights", 5, "the attention weights (softmax)"),
    Step("context", 6, "the context (weights @ v)"),
    Step("merged", 7, "the heads merged"),
    Step("output", 8, "the output"),
)}


# Steps whose last two dimensions are [query, key]: their transpose is
# another tensor (k @ q^T), not a layout of theirs (a claim about their
# rows holds only in the layout the student's code holds them in).
ORIENTED = ("scores", "scaled", "masked", "scaled_masked", "weights")


def case_steps(tensors: dict) -> dict[str, object]:
    """The frozen steps among a case's tensors (name -> tensor), in path
    order (``x``, the input, is the path's start)."""
    found = {k[len(PREFIX):]: v for k, v in tensors.items()
             if k.startswith(PREFIX) and k[len(PREFIX):] in STEPS}
    if found and "x" in tensors:
        found["x"] = tensors["x"]
    return dict(sorted(found.items(), key=lambda kv: STEPS[kv[0]].rank))
