"""What a probed call returned, read the same way by every kind: the
returned tensors in the expected form, and a comparison with the frozen
answer that names the catalogue mistake a wrong answer equals.
"""
from __future__ import annotations

import torch

from autograder import probes as P
from autograder.checks import layout
from autograder.checks.base import Context, Verdict
from autograder.checks.compare import close, compare, matching_mistakes
from autograder.checks.entries import Check
from autograder.sandbox.protocol import Probe, ProbeResult
from autograder.values import Case


def returned_tensors(result: ProbeResult, probe: Probe, count: int | None
                     ) -> tuple[list[torch.Tensor] | None, str]:
    """The returned tensors if they have the expected form: a single tensor
    (``count`` None) or a tuple of ``count`` tensors; else None and what
    the call returned instead."""
    call = P.call_text(probe)
    if count is None:
        if result.output_kind != "tensor":
            return None, (f"{call} returned a tuple of "
                          f"{len(result.outputs)} tensors, expected a single "
                          f"tensor")
        return result.outputs, ""
    if result.output_kind != "tuple" or len(result.outputs) != count:
        what = ("a single tensor" if result.output_kind == "tensor" else
                f"{len(result.outputs)} tensors")
        return None, f"{call} returned {what}, expected a tuple of {count} " \
                     f"tensors (att, probs)"
    return result.outputs, ""


def diagnose(got: torch.Tensor, expected: torch.Tensor,
             mistakes: dict[str, torch.Tensor], ctx: Context, check: Check,
             what: str) -> Verdict:
    """Compare, and on a mismatch name the catalogue mistake it equals.

    Mistakes indistinguishable from the right answer on this tensor (e.g.
    "no mix" for the probabilities) are never suggested.
    """
    result = compare(got, expected, atol=check.atol, rtol=check.rtol,
                     what=what)
    if result.ok:
        return Verdict(True)
    order = [m for m in ctx.mistake_messages
             if m in mistakes and not close(mistakes[m], expected,
                                            ctx.mistake_atol, equal_nan=True)]
    candidates = matching_mistakes(got, mistakes, order, ctx.mistake_atol)
    mistake = candidates[0] if candidates else None
    short = {"shape": "wrong shape", "nan": "NaN or infinite values",
             "values": "wrong values"}[result.kind]
    message = result.message
    if mistake is None and result.kind == "values" and \
            close(got, expected, ctx.mistake_atol):
        message += (f" (within {ctx.mistake_atol:g} but not {check.atol:g}"
                    f": a numerical precision problem, e.g. float16 or a "
                    f"different formula?)")
    moved = None
    if mistake is None and result.kind in ("values", "shape"):
        moved = layout.reading(got, expected, check.atol, check.rtol)
        message += f". {moved.text}" if moved else ""
    # The hint is added by ``aggregate``, only if the mistake explains every
    # failing case of the item.
    return Verdict(False, message, short, mistake, candidates,
                   cause=moved.key if moved else "")


def mistake_tensors(case: Case, name: str) -> dict[str, torch.Tensor]:
    """What each catalogue mistake gives for the tensor ``name`` of
    ``case`` (``output``, ``attention``), where it differs from the
    answer."""
    return {mid: tensors[name] for mid, tensors in case.mistakes.items()
            if name in tensors}
