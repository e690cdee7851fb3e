"""Evidence that a module's weights over positions are computed from its
input through named projections, for the kinds that judge such weights
(a homework's causal and dropout kinds): a case's seeded generator, the
probes that zero, scale, clear or shift a projection
(``projection_probes``), and the judgements on their outputs
(``weights_unshown``: zeroing either projection moves the
output, shifting the keys does not; ``nonlinear``: outputs off a line
as the input moves on one). Pure functions of a case and the results;
no kind is registered here.
"""
from __future__ import annotations

import hashlib
from typing import Callable

import torch

from autograder import probes as P
from autograder.checks.base import ATTRIBUTE_NAME
from autograder.checks.outputs import returned_tensors
from autograder.sandbox.protocol import Probe, ProbeResult
from autograder.values import Case

from .attention_weights import exposing_probes


def case_generator(case: Case, purpose: str) -> torch.Generator:
    """A generator seeded from ``case`` (its name, input and frozen
    output) and ``purpose``: the changed tokens, the shift of the keys
    and the order of the causal probes. The same draws on every run (the
    feedback is stable) and for every check, yet no fixed map of the
    input: code that sees a changed input cannot tell what it replaced,
    and a hidden case's draws depend on values students do not have."""
    digest = hashlib.sha256(f"{purpose}:{case.name}:".encode())
    for key in ("x", "output"):
        value = case.tensors.get(key)
        if value is not None:
            digest.update(value.detach().cpu().contiguous().numpy()
                          .tobytes())
    return torch.Generator().manual_seed(
        int.from_bytes(digest.digest()[:7], "big"))


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


# A change that zeroing a projection makes must exceed this fraction of
# the output's scale (attention's weights move by tenths); a shift of the
# keys must move the output by at most SHIFT of it (float rounding).
MOVE = 1e-3
SHIFT = 1e-5


def keys_shifted(case: Case, name: str, times: int = 1
                 ) -> tuple[torch.Tensor, dict[str, torch.Tensor]] | None:
    """An input whose first feature is 1 at every position, and the
    case's weights with a random vector added to the first column of
    every ``name`` projection (the key's): every key then moves by the
    same vector u, so every query's scores move by one constant (q . u),
    which a softmax over the keys does not see. None if the case has
    none. (With the query's name: every query moves, which scores written
    the other way round, k q^T, do not see.) ``times``: the same vector
    added that many times (the same draw)."""
    generator = case_generator(case, f"shift:{name}")
    shifted = {}
    for path, value in sorted(case.weights.items()):
        if path.endswith(".weight") and name in path.split(".")[:-1] and \
                value.dim() == 2:
            weight = value.clone()
            weight[:, 0] += times * 0.5 * torch.randn(
                weight.shape[0], generator=generator,
                dtype=torch.float64).to(weight.dtype)
            shifted[path] = weight
    if not shifted:
        return None
    x = case.tensors["x"].clone()
    x[..., 0] = 1.0
    return x, {**case.weights, **shifted}


def other_projections(case: Case, projections: list[str]) -> list[str]:
    """The case's linear layers other than ``projections``, by attribute
    name (sorted): the scores may take their keys (or queries) from one
    of them (keys projected with the value layer)."""
    names = {path.split(".")[-2] for path, value in case.weights.items()
             if path.endswith(".weight") and value.dim() == 2 and
             "." in path}
    return sorted(names - set(projections))


def projection_scaled(case: Case, name: str, factor: float,
                      weights: dict[str, torch.Tensor] | None = None
                      ) -> dict[str, torch.Tensor]:
    """``weights`` (default: the case's) with the weight matrix of every
    ``name`` layer multiplied by ``factor``, biases kept."""
    weights = case.weights if weights is None else weights
    return {**weights, **{
        path: value * factor for path, value in weights.items()
        if path.endswith(".weight") and name in path.split(".")[:-1]}}


def projection_cleared(case: Case, name: str) -> dict[str, torch.Tensor]:
    """The case's weights with every ``name`` layer's weight and bias
    zeroed: that projection gives 0 (queries of 0: every score 0)."""
    return {**case.weights, **{
        path: torch.zeros_like(value) for path, value in case.weights.items()
        if name in path.split(".")[:-1]}}


def projection_probes(case: Case, timeout: float,
                      projections: list[str], value_layer: str = "",
                      output_layer: str = "") -> list[Probe]:
    """Eval calls with each of ``projections`` (the query, then the key
    projection, as the rubric names them) zeroed, then a call on an input
    with a constant first feature and the same call with every key moved
    by one vector, then every query (``keys_shifted``); then, for each of
    the case's other layers (``other_projections``), the call with it
    zeroed and doubled, and on that input with its every output moved by
    one vector, once and twice. What ``weights_unshown`` reads,
    by the label that ends each probe's id (``projection_outputs``).
    With ``value_layer`` (and ``output_layer``, set to the identity),
    first the calls whose outputs are the attention weights
    (``attention_weights.exposing_probes``, ``exposed-<k>``)."""
    def probe(label: str, state: dict[str, torch.Tensor],
              x: torch.Tensor | None = None) -> Probe:
        return P.case_probe(case, timeout=timeout, suffix=f":{label}",
                            state=state, x=x)

    found = exposing_probes(case, timeout, projections, value_layer,
                            output_layer) if value_layer else []
    found += [probe(f"{name}-zeroed", state) for name in projections
              if (state := projection_zeroed(case, name)) is not None]
    shifts = [keys_shifted(case, name) for name in projections[::-1]]
    if not all(shift is not None for shift in shifts):
        return found
    x = shifts[0][0]
    found.append(probe("constant-feature", case.weights, x))
    found += [probe(f"{name}-shifted", shift[1], x)
              for name, shift in zip(projections[::-1], shifts)]
    cleared = projection_cleared(case, projections[0])
    for name in other_projections(case, projections):
        found += [probe(f"{name}-zeroed", projection_scaled(case, name, 0)),
                  probe(f"{name}-doubled", projection_scaled(case, name, 2)),
                  probe(f"{name}-shifted", keys_shifted(case, name)[1], x),
                  probe(f"{name}-shifted-twice",
                        keys_shifted(case, name, 2)[1], x)]
        found += [probe(f"{name}-times-{factor}-no-queries",
                        projection_scaled(case, name, factor, cleared))
                  for factor in (0, 1, 2)]
    return found


def projection_outputs(results: list[ProbeResult], probes: list[Probe]
                       ) -> dict[str, torch.Tensor | None]:
    """``projection_probes``' first outputs by label (None where the call
    failed or returned no tensor)."""
    found = {}
    for result, probe in zip(results, probes):
        got = returned_tensors(result, probe, None)[0] if result.ok else None
        found[probe.id.rsplit(":", 1)[1]] = got[0] if got else None
    return found


def _scale(t: torch.Tensor) -> float:
    finite = t.double()[torch.isfinite(t)]
    return 1.0 + (float(finite.abs().max()) if finite.numel() else 0.0)


def _score_roles(base: torch.Tensor, found: dict[str, torch.Tensor | None],
                 atol: float, projections: list[str], threshold: float
                 ) -> list[tuple[str, bool]] | None:
    """The layer that plays each of ``projections``' parts in the scores,
    with whether it stands in for the one named: the named one wherever
    zeroing it moves the output at all; where the key projection's does
    not (the scores take their keys from another layer, e.g. the value
    projection), the one of ``other_projections`` that the output follows
    nonlinearly (its scale, 0, 1, 2 times, off a line: it feeds more than
    the values or a linear map after them) only through the queries (with
    the query projection giving 0, every score 0, on a line: what it
    feeds is the scores, not a nonlinear map of the values). None if a
    part has no such layer."""
    def output(label: str) -> torch.Tensor | None:
        got = found.get(label)
        return got if got is not None and got.shape == base.shape else None

    def off_line(points: list[torch.Tensor | None]) -> bool | None:
        """Whether three outputs lie off a line (None: one is missing)."""
        if any(point is None for point in points):
            return None
        return nonlinear(points, threshold)

    def stands_in(other: str) -> bool:
        # Off a line in its scale, on one once the queries give 0.
        return off_line([output(f"{other}-zeroed"), base,
                         output(f"{other}-doubled")]) is True and \
            off_line([output(f"{other}-times-{factor}-no-queries")
                      for factor in (0, 1, 2)]) is False

    roles = []
    for index, name in enumerate(projections):
        zeroed = output(f"{name}-zeroed")
        if zeroed is None:
            return None
        if bool(differs(base, zeroed, atol).any()):
            roles.append((name, False))
            continue
        others = [label.removesuffix("-doubled") for label in found
                  if label.endswith("-doubled")]
        stand_in = next((other for other in others if stands_in(other)),
                        None) if index == len(projections) - 1 else None
        if stand_in is None:
            return None
        roles.append((stand_in, True))
    return roles


# Said of an eval output with no finite value (a mask multiplied by
# infinity: 0 times infinity is NaN): no property shows, no cause proven.
NOT_FINITE = "your eval output is NaN or infinite at every position"
# What ``weights_unshown`` says of the student's own calls when the
# evidence fails short of proof that the weights ignore the queries and
# keys (principle 4: the measured fact, no cause).
UNSHOWN_CALL = ("a call with the query or the key projection zeroed "
                "returned no output of the input's shape")
UNSHOWN_SOFTMAX = ("with the value projection set to show the attention "
                   "weights, the output is not a softmax of the query-key "
                   "scores")
UNSHOWN_MOVE = ("zeroing the query or the key projection moves the output "
                "by less than {move:g} of its scale")
UNSHOWN_SHIFT = ("moving every key by one vector (which a softmax over "
                 "the keys does not see) moves the output")


def weights_unshown(base: torch.Tensor,
                    found: dict[str, torch.Tensor | None],
                    atol: float, projections: list[str],
                    softmax: bool = False, threshold: float = 1e-4,
                    weights_shown: Callable[[list[str]], bool]
                    | None = None) -> str | None:
    """None when the weights are attention's, a softmax of query-key
    scores, as ``projection_probes``' outputs (``found``, by label) show,
    through the layers the scores use (``_score_roles``: the projections
    named, or where the output ignores the key projection, another layer
    that feeds the scores): the output moves (by more than
    ``MOVE`` of its scale) when each is zeroed, and does not move (beyond
    ``SHIFT`` of it) when every key moves by one vector, which shifts
    each query's scores by one constant (or, q and k swapped, when every
    query does); through a layer that also gives the values, it moves
    then in proportion to the shift (the values' part: the same change
    for the vector added twice). Fixed weights (uniform, with any map of
    the values) do not move; weights from the keys or the queries alone
    move for one projection only, and no other layer stands in (the
    values enter linearly, or a map of them stays nonlinear once the
    queries give 0); a term of q . k added to fixed weights
    (``0.01 * tanh(q . k)``) moves with the shift.

    ``softmax=False`` (the dropout kinds' evidence, where a wrong mask or
    softmax axis is another item's mistake): only that the output moves
    beyond ``atol`` when each of those layers is zeroed.

    ``weights_shown`` (given the layers that play the query's and the
    key's parts): whether the weights a call exposes are a softmax of
    their scores (``attention_weights.softmax_of_scores``), required in
    both modes: fixed weights plus a term of the scores that ignores a
    shift of them (``uniform + 0.1 tanh(s - mean(s))``) pass the rest.

    Otherwise "" when the failure proves the weights ignore the queries
    and keys (a zeroed projection leaves the output where it was and no
    other layer stands in), else the fact measured on the student's
    calls, which proves no cause (e.g. values taken from the key
    projection: the output moves with every projection, but the weights
    cannot be shown)."""
    roles = _score_roles(base, found, atol, projections, threshold)
    if roles is None:
        missing = any(found.get(f"{name}-zeroed") is None or
                      found[f"{name}-zeroed"].shape != base.shape
                      for name in projections)
        return UNSHOWN_CALL if missing else ""
    if weights_shown is not None and \
            not weights_shown([name for name, _ in roles]):
        return UNSHOWN_SOFTMAX
    zeroed = [found[f"{name}-zeroed"] for name, _ in roles]
    if not softmax:
        return None if all(bool(differs(base, z, atol).any())
                           for z in zeroed) else ""
    constant = found.get("constant-feature")
    shifted = [(found.get(f"{name}-shifted"),
                found.get(f"{name}-shifted-twice") if other else constant)
               for name, other in roles]
    if constant is None or any(
            a is None or b is None or a.shape != constant.shape or
            b.shape != constant.shape for a, b in shifted):
        return UNSHOWN_CALL
    if not all(bool(differs(base, z, max(atol, MOVE * _scale(base))).any())
               for z in zeroed):
        return UNSHOWN_MOVE.format(move=MOVE)
    # Every key moved, or (scores written k q^T: the roles swapped, 3.1's
    # mistake) every query: one of them must leave the output alone; a
    # layer that gives the values too moves it by one step per shift
    # (``twice - once == once - constant``).
    limit = max(atol, SHIFT * _scale(constant))
    same = any(not bool(differs(once - constant, twice - once, limit).any())
               if other else not bool(differs(constant, once, limit).any())
               for (once, twice), (_, other) in zip(shifted, roles))
    return None if same else UNSHOWN_SHIFT


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


def differs(a: torch.Tensor, b: torch.Tensor, atol: float) -> torch.Tensor:
    """Where ``a`` and ``b`` differ by more than ``atol`` (NaN equal to
    NaN: a position NaN in both calls did not change)."""
    a, b = a.double(), b.double()
    both_nan = torch.isnan(a) & torch.isnan(b)
    same = ((a - b).abs() <= atol) | both_nan | (a == b)
    return ~same
