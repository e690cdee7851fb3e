"""The causal property (Task 3.1c): changing future tokens changes no
earlier output (every position is checked against the change of all the
tokens after it: a mask hiding only the last token fails), and attention
weights computed from the queries and keys.

It needs no expected values: causality is a property of the student's own
outputs, judged in the grading parent; the worker only runs the calls.
``nonlinear`` (weights that depend on the input) is also the evidence of
the dropout kinds.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from autograder import probes as P
from autograder.checks.base import ATTRIBUTE_NAME, CaseCheck, Context, Verdict
from autograder.checks.outputs import returned_tensors
from autograder.checks.compare import fmt_shape
from autograder.sandbox.protocol import Probe, ProbeResult
from autograder.checks.entries import Check
from autograder.checks.registry import register
from autograder.values import Case


def changed_last_token(x: torch.Tensor) -> torch.Tensor:
    """``x`` with its last token replaced by a different, fixed vector."""
    changed = x.clone()
    changed[:, -1] = -2.0 * x[:, -1] + 1.0
    return changed


def changed_after(x: torch.Tensor, position: int) -> torch.Tensor:
    """``x`` with every token after ``position`` replaced by a different,
    fixed vector (``changed_last_token``'s change)."""
    changed = x.clone()
    changed[:, position + 1:] = -2.0 * x[:, position + 1:] + 1.0
    return changed


def valid_projections(names: list[str]) -> None:
    """ValueError unless ``names`` (a rubric's ``projections``: the query
    and the key projections' attribute names) lists attribute names."""
    if not names or not all(isinstance(n, str) and ATTRIBUTE_NAME.fullmatch(n)
                            for n in names):
        raise ValueError(f"projections must list the query and key "
                         f"projections' attribute names, e.g. "
                         f"[\"W_query\", \"W_key\"] (got {names!r})")


def projection_zeroed(case: Case, name: str) -> dict[str, torch.Tensor] | None:
    """The case's weights with the weight matrix of every ``name``
    projection (``W_key``, ``heads.0.W_key``, ...) zeroed, biases kept:
    the scores then no longer depend on the queries (or on the keys), and
    attention computed from them changes. None if the case has none."""
    zeroed = {path: torch.zeros_like(value)
              for path, value in case.weights.items()
              if path.endswith(".weight") and name in path.split(".")[:-1]}
    return {**case.weights, **zeroed} if zeroed else None


def projection_probes(case: Case, timeout: float,
                      projections: list[str]) -> list[Probe]:
    """Eval calls with each of ``projections`` (the query, then the key
    projection, as the rubric names them) zeroed."""
    found = []
    for name in projections:
        state = projection_zeroed(case, name)
        if state is not None:
            probe = P.case_probe(case, timeout=timeout)
            probe.id += f":{name}-zeroed"
            probe.state = state
            found.append(probe)
    return found


def follows_queries_and_keys(base: torch.Tensor,
                             zeroed: list[torch.Tensor | None],
                             atol: float, projections: list[str]) -> bool:
    """Whether the output moves when the query projection is zeroed and
    when the key projection is: weights computed from q k^T do; fixed
    weights (uniform, with any map of the values: tanh, a norm) or weights
    from the keys or the queries alone do not, whatever else depends on
    the input."""
    return len(zeroed) == len(projections) and all(
        z is not None and z.shape == base.shape and
        bool(_differs(base, z, atol).any()) for z in zeroed)


def changed_first_token(x: torch.Tensor) -> torch.Tensor:
    """``x`` with its first token replaced by a different, fixed vector."""
    changed = x.clone()
    changed[:, 0] = -2.0 * x[:, 0] + 1.0
    return changed


def changed_first_token_twice(x: torch.Tensor) -> torch.Tensor:
    """``x`` with its first token moved twice as far as
    :func:`changed_first_token` moves it (the same step, twice)."""
    changed = x.clone()
    changed[:, 0] = x[:, 0] + 2.0 * (-3.0 * x[:, 0] + 1.0)
    return changed


def nonlinear(outputs: list[torch.Tensor], threshold: float) -> bool:
    """Whether outputs for three inputs equally spaced on a line (x, x + d,
    x + 2d) lie off a line (a second difference above ``threshold`` times
    1 + their largest value): attention weights computed from the input
    (a softmax of query-key scores) do; fixed weights (uniform, the
    identity, any constant matrix) make a module affine in its input, and
    so does returning x or its values. The threshold (1e-4) is far above
    float rounding (an affine module's second difference is ~1e-7
    here)."""
    a, b, c = (o.double() for o in outputs)
    if not a.shape == b.shape == c.shape:
        return False
    second = (c - 2 * b + a)
    finite = torch.isfinite(second)
    if not bool(finite.any()):
        return False
    scale = 1.0 + float(torch.stack([a, b, c])[
        torch.isfinite(torch.stack([a, b, c]))].abs().max())
    return float(second[finite].abs().max()) > threshold * scale


def _differs(a: torch.Tensor, b: torch.Tensor, atol: float) -> torch.Tensor:
    """Where ``a`` and ``b`` differ by more than ``atol`` (NaN equal to
    NaN: a position NaN in both calls did not change)."""
    a, b = a.double(), b.double()
    both_nan = torch.isnan(a) & torch.isnan(b)
    same = ((a - b).abs() <= atol) | both_nan | (a == b)
    return ~same


@dataclass(frozen=True)
class CausalPropertyParams:
    """The query and key projections' attribute names (zeroed in turn:
    weights computed from them move), and ``nonlinear``'s threshold: the
    evidence of weights computed from the input (a future token's change
    is judged with the item's atol)."""

    projections: list[str]
    nonlinear_threshold: float = 1e-4

    def __post_init__(self) -> None:
        valid_projections(self.projections)


@register("item", "causal_property", uses_cases=True,
          params=CausalPropertyParams)
class CausalProperty(CaseCheck):
    """Changing a future token changes no earlier output, and the outputs
    mix positions as attention does: changing the first token changes a
    later output (a constant or a per-position function earns nothing),
    and not in proportion to the change (weights computed from the input:
    uniform or other fixed weights earn nothing)."""

    no_evidence = ("later outputs change in proportion to the first token "
                   "(moving it twice by the same step changes them twice "
                   "by the same amount), or do not change when the query "
                   "or the key projection's weights are zeroed, in every "
                   "case: the attention weights do not depend on the "
                   "input through the queries and keys. Compute them from "
                   "the queries and keys, "
                   "softmax(q k^T / sqrt(d_k)) with the future masked, not "
                   "as fixed (e.g. uniform) weights")

    def case_probes(self, check: Check, case: Case) -> list[Probe]:
        """The case's call; the same call with the last token changed,
        with every token after each earlier position changed, and with the
        first token changed (once, and twice as far); and with the query,
        then the key projection zeroed."""
        plain = P.case_probe(case, timeout=check.timeout)
        found = [plain]
        for label, change in (("last", changed_last_token),
                              ("first", changed_first_token),
                              ("first-twice", changed_first_token_twice)):
            probe = P.case_probe(case, timeout=check.timeout)
            probe.id = f"{plain.id}:{label}-token-changed"
            probe.args = [change(case.tensors["x"])]
            found.append(probe)
        found += projection_probes(case, check.timeout,
                                   check.params.projections)
        for position in range(case.tensors["x"].shape[1] - 2):
            probe = P.case_probe(case, timeout=check.timeout)
            probe.id = f"{plain.id}:tokens-after-{position}-changed"
            probe.args = [changed_after(case.tensors["x"], position)]
            found.append(probe)
        return found

    def judge(self, check: Check, case: Case, results: list[ProbeResult],
              probes: list[Probe], ctx: Context) -> Verdict:
        """Every position but the last keeps its output when the last
        token changes; some later position changes with the first."""
        zeroing = len(projection_probes(case, check.timeout,
                                        check.params.projections))
        outputs = [returned_tensors(r, p, None)
                   for r, p in zip(results, probes)]
        for found, problem in outputs[:4] + outputs[4 + zeroing:]:
            if found is None:
                return Verdict(False, problem, "wrong return value")
        before, after, first, twice = (o[0][0] for o in outputs[:4])
        zeroed = [o[0][0] if o[0] is not None else None
                  for o in outputs[4:4 + zeroing]]
        later = [o[0][0] for o in outputs[4 + zeroing:]]
        if before.dim() != 3 or any(o.shape != before.shape for o in (
                after, first, twice, *later)):
            return Verdict(False, f"forward returned shapes "
                           f"{fmt_shape(before.shape)}, "
                           f"{fmt_shape(after.shape)} and "
                           f"{fmt_shape(first.shape)}, expected [b, "
                           f"num_tokens, d_out] every time", "wrong shape")
        if before.shape[1] < 2:
            return Verdict(True, evidence=False)   # one token shows nothing
        diff = _differs(before[:, :-1], after[:, :-1], check.atol)
        if bool(diff.any()):
            position = int(diff.any(dim=2).any(dim=0).nonzero()[0])
            return Verdict(False, f"changing only the last token changed "
                           f"the output at earlier position {position}: "
                           f"earlier tokens can see the future. Mask every "
                           f"position after the query (the upper triangle, "
                           f"cut to num_tokens) before the softmax.",
                           "a future token changed an earlier output")
        for position, changed in enumerate(later):
            diff = _differs(before[:, :position + 1],
                            changed[:, :position + 1], check.atol)
            if bool(diff.any()):
                where = int(diff.any(dim=2).any(dim=0).nonzero()[0])
                return Verdict(
                    False, f"changing the tokens after position {position} "
                    f"(and no other) changed the output at position "
                    f"{where}: earlier tokens can see the future. Mask "
                    f"every position after the query (the whole upper "
                    f"triangle, cut to num_tokens) before the softmax.",
                    "a future token changed an earlier output")
        if not bool(_differs(before[:, 1:], first[:, 1:], check.atol).any()):
            return Verdict(False, "changing the first token changed no "
                           "later output: in causal attention every token "
                           "attends to the first one, so its output "
                           "depends on it. Compute the attention weights "
                           "over the earlier tokens and return their "
                           "weighted sum of the values.",
                           "outputs do not mix positions")
        return Verdict(True, evidence=nonlinear(
            [before[:, 1:], first[:, 1:], twice[:, 1:]],
            check.params.nonlinear_threshold) and follows_queries_and_keys(
                before, zeroed, check.atol, check.params.projections))
