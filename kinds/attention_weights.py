"""Attention weights exposed and judged as a softmax of query-key scores.

A call on n tokens whose value layer maps token i to the i-th unit vector
(the weights set through the probe's state, its bias 0; a named output
layer set to the identity) returns the attention weights themselves: the
output at position i, feature ``h * head + c`` is head h's weight of key
``k * head + c``, in the k-th of ``ceil(tokens / head)`` calls (call k's
value layer maps token ``k * head + c`` to unit vector c). Token i is
``alpha (e_i + u + z_i)``: a dense vector ``u`` common to every token,
whose first n features sum to 0 (so the value layer's row ``e_t - u_t``
on them takes it away again), and noise ``z_i`` on the features no
token's unit vector uses, all multiples of 1/8: the value layer's output
is exact in float32 and the input looks like no one-hot one (code that
switches its weights on a one-hot input shows the weights it really
computes). The scores are
computed here from the probe's own query and key weights, so the check
needs no frozen value, and any correct style (einsum, sdpa, loops, bmm)
shows the same weights.

Weights that are a softmax of the scores (of any scale: a missing or
wrong scale is another item's mistake) are ``exp(c * s + a_row)`` on the
keys they do not hide: ``log w_i - log w_j = c (s_i - s_j)`` within each
row, one ``c > 0`` for every row and head, and every row sums to one
value (1, or the values' scale). Fixed weights plus a small term of the
scores (``uniform + 0.1 tanh(s - mean(s))``) match that only to first
order; ``alpha`` makes the scores spread by several units, where the
second order shows.

With several heads, the query and key layers are one row repeated
(``_same_in_every_head``): every head has the same weights, so a module
that groups the features into heads otherwise (interleaved, or heads of
the wrong size: 3.3's mistakes) shows them all the same.
"""
from __future__ import annotations

import hashlib
import math

import torch

from autograder import probes as P
from autograder.sandbox.protocol import Probe
from autograder.values import Case

# The scores of one row spread by at least this (before any scale the
# student applies): the weights then differ by factors of e^SPREAD.
SPREAD = 3.0
MAX_TOKENS = 12
# The padded calls (the exposing tokens first, then padding tokens up to the
# context length) for contexts up to this length: a mask cut from the
# buffer's wrong corner is right at the full length only.
MAX_PADDED = 64
FLOOR = 1e-7     # weights below it are too small to read a log from
LOG_ATOL = 1e-3  # float32 softmax: log-weights exact to ~1e-6
SUM_RTOL = 1e-4
SLOPE_MIN = 0.05  # c * (spread of the scores) above it: the scores matter


def _layer(state: dict[str, torch.Tensor], name: str
           ) -> tuple[torch.Tensor, torch.Tensor | None] | None:
    weight = state.get(f"{name}.weight")
    if weight is None or weight.dim() != 2:
        return None
    return weight.double(), state.get(f"{name}.bias")


def _project(state: dict[str, torch.Tensor], name: str, x: torch.Tensor
             ) -> torch.Tensor | None:
    found = _layer(state, name)
    if found is None or found[0].shape[1] != x.shape[-1]:
        return None
    weight, bias = found
    out = x.double() @ weight.T
    return out + bias.double() if bias is not None else out


def _heads(case: Case) -> int:
    heads = case.size("heads", 1)
    return heads if isinstance(heads, int) and heads > 0 else 1


def scores(state: dict[str, torch.Tensor], roles: list[str], x: torch.Tensor,
           heads: int) -> torch.Tensor | None:
    """Every head's unscaled scores ``q k^T`` [heads, n, n] of ``x``
    [n, features], q and k from the layers ``roles`` names in ``state``."""
    q, k = (_project(state, name, x) for name in roles[:2])
    if q is None or k is None or q.shape != k.shape or \
            q.shape[1] % heads:
        return None
    n, width = q.shape
    q = q.view(n, heads, width // heads).transpose(0, 1)
    k = k.view(n, heads, width // heads).transpose(0, 1)
    return q @ k.transpose(1, 2)


def _tokens(case: Case) -> int:
    """How many tokens the exposing calls hold (0: no input
    size)."""
    features, context = case.size("input"), case.size("context")
    if not isinstance(features, int):
        return 0
    return min(features, context if isinstance(context, int) else features,
               MAX_TOKENS)


def _same_in_every_head(case: Case, roles: list[str]
                        ) -> dict[str, torch.Tensor] | None:
    """The case's weights with the query and key layers (``roles``) made
    of one row repeated (their biases 0): every output feature of a
    layer is the same, so every head has the same weights however the
    features are grouped into heads (a split the fused module gets wrong
    is 3.3's mistake, not its dropout's). The rows are drawn per case:
    the queries' positive and apart, the keys' spread."""
    weights = dict(case.weights)
    digest = hashlib.sha256(f"same-heads:{case.name}".encode()).digest()
    generator = torch.Generator().manual_seed(
        int.from_bytes(digest[:7], "big"))
    for role, low in zip(roles[:2], (1.0, None)):
        found = _layer(case.weights, role)
        if found is None:
            return None
        width, features = found[0].shape
        draw = torch.rand(features, generator=generator, dtype=torch.float64)
        row = low + draw if low is not None else torch.randn(
            features, generator=generator, dtype=torch.float64)
        old = case.weights[f"{role}.weight"]
        weights[f"{role}.weight"] = row.expand(width, features).to(
            old.dtype).clone()
        if found[1] is not None:
            weights[f"{role}.bias"] = torch.zeros_like(found[1])
    return weights


def _tokens_input(case: Case, n: int, pad: int
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """The unscaled input [n + pad, features] (module docstring: token i
    ``e_i + u + z_i``, a padding token ``u + z``: its value is no matter,
    a causal module's first n queries never see it) and ``u``, drawn per
    case: multiples of 1/8, none 0, ``u``'s first n summing to 0."""
    features = case.size("input")
    digest = hashlib.sha256(f"exposing:{case.name}".encode()).digest()
    generator = torch.Generator().manual_seed(
        int.from_bytes(digest[:7], "big"))

    def eighths(*shape: int) -> torch.Tensor:
        size = torch.randint(1, 8, shape, generator=generator)
        sign = torch.randint(0, 2, shape, generator=generator) * 2 - 1
        return (size * sign).double() / 8

    while True:     # (a few draws: the last must be a nonzero eighth)
        u = eighths(features)
        last = -float(u[:n - 1].sum())
        if last != 0 and abs(last) < 1:
            u[n - 1] = last
            break
    x = torch.eye(n + pad, features, dtype=torch.float64)
    x[n:] = 0.0
    x += u
    x[:, n:] = eighths(n + pad, features - n)    # (no zero there either)
    return x, u


def _setup(case: Case, weights: dict[str, torch.Tensor], roles: list[str],
           value_layer: str, pad: int = 0
           ) -> tuple[torch.Tensor, int, int, float, torch.Tensor] | None:
    """The input [n + pad, features] (``_tokens_input`` scaled by alpha so
    that the scores of ``weights`` spread by SPREAD), the number of heads,
    each head's value size, alpha and ``u``; None if the case cannot be
    probed so."""
    value = _layer(weights, value_layer)
    n = _tokens(case)
    if not n or value is None or len(roles) < 2:
        return None
    heads = _heads(case)
    if n < 2 or value[0].shape[0] % heads:
        return None
    base, u = _tokens_input(case, n, pad)
    for power in range(-4, 13):
        alpha = 2.0 ** power
        found = scores(weights, roles, alpha * base[:n], heads)
        if found is None:
            return None
        head = _layer(weights, roles[0])[0].shape[0] // heads
        spread = (found.amax(-1) - found.amin(-1)).max() / math.sqrt(head)
        if float(spread) >= SPREAD:
            break
    return alpha * base, heads, value[0].shape[0] // heads, alpha, u


def exposing_states(case: Case, roles: list[str], value_layer: str,
                    output_layer: str = "", padded: bool = False
                    ) -> tuple[torch.Tensor, list[dict]] | None:
    """The input [1, n, features] and one state per call
    (``ceil(n / head)`` calls) whose outputs are the attention weights
    (module docstring); None if the case cannot be probed so (a layer
    other than these in the way, too few tokens). ``padded``: the same
    calls with padding tokens (``u + z``) after the n ones, up to the case's
    context length (None where that adds none); a causal module's first
    n outputs are the same weights, whatever its mask was cut to."""
    layers = {path.rsplit(".", 1)[0] for path, value in case.weights.items()
              if path.endswith(".weight") and value.dim() == 2}
    if layers - {*roles[:2], value_layer, output_layer}:
        return None     # another layer (an output projection) in the way
    pad = _padding(case, _tokens(case)) if padded else 0
    if padded and not pad:
        return None
    fixed = _same_in_every_head(case, roles) if _heads(case) > 1 \
        else dict(case.weights)
    setup = fixed and _setup(case, fixed, roles, value_layer, pad)
    if not setup:
        return None
    x, heads, head, alpha, u = setup
    n = _tokens(case)
    weight, bias = case.weights[f"{value_layer}.weight"], \
        case.weights.get(f"{value_layer}.bias")
    if bias is not None:
        fixed[f"{value_layer}.bias"] = torch.zeros_like(bias)
    if output_layer:
        out = _layer(case.weights, output_layer)
        if out is None or out[0].shape[0] != out[0].shape[1]:
            return None
        w = case.weights[f"{output_layer}.weight"]
        fixed[f"{output_layer}.weight"] = torch.eye(w.shape[0], dtype=w.dtype)
        if out[1] is not None:
            fixed[f"{output_layer}.bias"] = torch.zeros_like(out[1])
    states = []
    for call in range(math.ceil(n / head)):
        value = torch.zeros_like(weight)
        for h in range(heads):
            for c in range(head):
                token = call * head + c
                if token < n:
                    # e_token, less u's share on the first n features
                    # (they sum to 1 on every token)
                    value[h * head + c, :n] = -float(u[token]) / alpha
                    value[h * head + c, token] += 1.0 / alpha
        states.append({**fixed, f"{value_layer}.weight": value})
    return x.to(weight.dtype).unsqueeze(0), states


def _padding(case: Case, n: int) -> int:
    """How many padding tokens take n tokens to the case's context
    length (0: none, or a context too long to pad to)."""
    context = case.size("context")
    if not isinstance(context, int) or not n < context <= MAX_PADDED:
        return 0
    return context - n


def exposing_probes(case: Case, timeout: float, roles: list[str],
                    value_layer: str, output_layer: str = ""
                    ) -> list[Probe]:
    """Eval calls whose outputs are the attention weights (labelled
    ``exposed-<k>``, and ``padded-<k>`` the same calls padded to the
    context length); none if the case cannot be probed so."""
    probes = []
    for label, padded in (("exposed", False), ("padded", True)):
        found = exposing_states(case, roles, value_layer, output_layer,
                                padded)
        if found is not None:
            x, states = found
            probes += [P.case_probe(case, timeout=timeout, state=state, x=x,
                                    suffix=f":{label}-{k}")
                       for k, state in enumerate(states)]
    return probes


# How a call's output [tokens, heads * head] holds each head's weights
# [heads, n, head] (the first n tokens): the heads merged right (heads
# before head_dim), without the transpose back ([heads, tokens, head]
# reshaped), or interleaved (head_dim before heads): the last two are
# 3.3's mistakes, which must not cost 3.3d too.
MERGES = {
    "heads_last": lambda out, n, heads, head: out[:n].reshape(
        n, heads, head).transpose(0, 1),
    "heads_first": lambda out, n, heads, head: out.reshape(
        heads, -1, head)[:, :n],
    "interleaved": lambda out, n, heads, head: out[:n].reshape(
        n, head, heads).permute(2, 0, 1),
}


def exposed_weights(case: Case, projections: list[str], roles: list[str],
                    value_layer: str, outputs: list[torch.Tensor | None],
                    output_layer: str = "", padded: bool = False,
                    merge: str = "heads_last"
                    ) -> list[tuple[torch.Tensor, torch.Tensor,
                                    torch.Tensor]] | None:
    """Per call of ``exposing_probes(case, ..., projections, ...)``: the
    weights it shows [heads, n, n] (NaN where not shown), the scores
    there [heads, n, n] (computed from that call's state, with ``roles``
    the layers the scores use: the value layer may be one of them), and
    which keys it shows; None if an output is missing or of another
    shape. ``merge``: how the output is read as the heads merged
    (``MERGES``: 3.3's mistakes read too; every head has the same
    weights)."""
    found = exposing_states(case, projections, value_layer, output_layer,
                            padded)
    if found is None or len(outputs) != len(found[1]):
        return None
    x, states = found
    length = x.shape[1]
    n = _tokens(case)   # the exposing tokens, first in a padded call
    x = x[:, :n]
    heads = _heads(case)
    head = states[0][f"{value_layer}.weight"].shape[0] // heads
    calls = []
    for call, (state, out) in enumerate(zip(states, outputs)):
        s = scores(state, roles, x[0], heads)
        if out is None or s is None or tuple(out.shape) != (1, length,
                                                            heads * head):
            return None
        weights = torch.full((heads, n, n), math.nan, dtype=torch.float64)
        shown = torch.zeros(n, dtype=torch.bool)
        keys = list(range(call * head, min(n, (call + 1) * head)))
        shown[keys] = True
        view = MERGES[merge](out[0].double(), n, heads, head)
        weights[:, :, keys] = view[:, :, :len(keys)]
        calls.append((weights, s, shown))
    if all(torch.equal(s, calls[0][1]) for _, s, _ in calls):
        # The scores do not depend on the value layer: one matrix.
        whole = calls[0][0].clone()
        for weights, _, shown in calls[1:]:
            whole[:, :, shown] = weights[:, :, shown]
        return [(whole, calls[0][1], torch.ones(n, dtype=torch.bool))]
    return calls


def _most_rows_spread(w: torch.Tensor) -> bool:
    """Whether at least half the rows of ``w`` [r, n] (every key shown)
    give weight to two keys or more: a row with one key shows no score,
    and one real row among one-key rows (the identity) is no attention
    computed for the sequence."""
    return 2 * int(((w > FLOOR).sum(-1) >= 2).sum()) >= w.shape[0] > 0


def _fits(weights: torch.Tensor, s: torch.Tensor, shown: torch.Tensor
          ) -> bool:
    """Whether every row of ``weights`` [..., n, n] (the keys ``shown``)
    is ``exp(c * s + a_row)`` on the keys it does not hide, per triangle
    (keys up to the query, keys after it: a mask multiplied in gives the
    hidden ones one constant score, slope 0), one slope per triangle for
    every row, one of them > 0; and, with every key shown, every row sums
    to one common value, or is the softmax over every key (the hidden
    ones too, zeroed after it). Rows with a non-finite weight are skipped
    (a row all hidden is NaN, or zeros); at least one row must have two
    keys."""
    n = weights.shape[-1]
    rows = torch.isfinite(weights[..., shown]).all(-1)
    if not bool(rows.any()) or (bool(shown.all()) and
                                not _most_rows_spread(weights[rows])):
        return False
    w, s = weights[rows], s[rows]          # [r, n]
    key = torch.arange(n).expand(*rows.shape, n)[rows]     # [r, n]
    row = torch.arange(n).view(*[1] * (rows.dim() - 1), n, 1).expand(
        *rows.shape, 1)[rows]                               # [r, 1]
    support = (w > FLOOR) & shown
    any_slope, slopes = False, []
    for part in (key <= row, key > row):
        keys = support & part
        usable = keys.sum(-1) >= 2
        if not bool(usable.any()):
            continue
        lw = torch.where(keys, w.clamp_min(FLOOR).log(), 0.0)[usable]
        sv = torch.where(keys, s, 0.0)[usable]
        k = keys[usable]
        count = k.sum(-1, keepdim=True)
        y = torch.where(k, lw - lw.sum(-1, keepdim=True) / count, 0.0)
        z = torch.where(k, sv - sv.sum(-1, keepdim=True) / count, 0.0)
        zz = float((z * z).sum())
        c = float((y * z).sum()) / zz if zz > 0 else 0.0
        if float((y - c * z).abs().max()) > LOG_ATOL:
            return False
        if c > 0 and c * float(z.abs().max()) > SLOPE_MIN:
            any_slope = True
            slopes.append(c)
    if not any_slope:
        return False
    if not bool(shown.all()):
        return True
    # A row that attends to no key at all (a fused kernel's fully masked
    # row is zeros, not NaN) is a row all hidden: no sum to compare.
    sums = torch.where(w > 0, w, 0.0).sum(-1)
    kept = sums > FLOOR
    sums = sums[kept]
    if bool(sums.numel()) and float((sums - sums[0]).abs().max()) <= \
            SUM_RTOL * float(sums[0]):
        return True
    # Or the softmax taken over every key, hidden ones too, and the
    # hidden ones zeroed after it (3.1's mistake, not the weights'): each
    # row's weights are exp(c s) over the sum of exp(c s) on all keys.
    full = torch.softmax(slopes[0] * s[kept], dim=-1)
    on = support[kept]
    return bool(on.any()) and float(
        ((w[kept] - full).abs()[on] / full[on]).max()) <= SUM_RTOL * 10


def _fits_placed(weights: torch.Tensor, s: torch.Tensor) -> bool:
    """Whether every row of ``weights`` [..., n, n] (every key shown) holds
    a softmax of its query's scores over its first m keys (m: the keys it
    gives weight), shifted whole to other keys (a row padded on the wrong
    side, 3.1's mistake): the m weights are one block of keys, and in key
    order ``exp(c * s + a_row)`` of those scores in key order (the keys'
    order kept: a row sorted or reversed is no attention), one ``c > 0``
    for every row, every row summing to one value."""
    rows = torch.isfinite(weights).all(-1)
    w, s = weights[rows], s[rows]                       # [r, n]
    if not _most_rows_spread(w):
        return False
    ys, zs = [], []
    for row_w, row_s in zip(w, s):
        at = (row_w > FLOOR).nonzero().flatten()
        m = at.numel()
        if m < 2:
            continue
        if int(at[-1] - at[0]) != m - 1:
            return False        # not one block of keys
        y = row_w[at].log()
        z = row_s[:m]
        ys.append(y - y.mean())
        zs.append(z - z.mean())
    if not ys:
        return False
    y, z = torch.cat(ys), torch.cat(zs)
    zz = float((z * z).sum())
    c = float((y * z).sum()) / zz if zz > 0 else 0.0
    if c <= 0 or c * float(z.abs().max()) <= SLOPE_MIN or \
            float((y - c * z).abs().max()) > LOG_ATOL:
        return False
    sums = torch.where(w > 0, w, 0.0).sum(-1)
    sums = sums[sums > FLOOR]
    return bool(sums.numel()) and float((sums - sums[0]).abs().max()) <= \
        SUM_RTOL * float(sums[0])


def softmax_of_scores(calls: list[tuple[torch.Tensor, torch.Tensor,
                                        torch.Tensor]] | None) -> bool:
    """Whether the weights ``exposed_weights`` read are a softmax of the
    scores (``_fits``), over the keys of each query or, the softmax taken
    over the queries (3.1's mistake), of each key; the scores ``q k^T``
    or, the roles swapped (3.1's mistake too), ``k q^T``; or each row a
    softmax of its own scores placed at other keys (``_fits_placed``)."""
    if not calls:
        return False
    whole = all(bool(shown.all()) for _, _, shown in calls)
    for by_key in ((False, True) if whole else (False,)):
        for swapped in (False, True):
            if all(_fits(w.transpose(-1, -2) if by_key else w,
                         s.transpose(-1, -2) if swapped else s, shown)
                   for w, s, shown in calls):
                return True
    return whole and all(_fits_placed(w, s) for w, s, _ in calls)


def softmax_shown(case: Case, projections: list[str], value_layer: str,
                  found: dict[str, torch.Tensor | None],
                  output_layer: str = ""):
    """What ``causal.weights_unshown`` asks of the weights:
    given the layers that play the query's and the key's parts, whether
    the ``exposed-<k>`` outputs in ``found``, or the ``padded-<k>`` ones,
    read as the heads merged any way of ``MERGES``, are a softmax of
    their scores;
    None (nothing asked) where the case cannot be probed so."""
    calls = {}
    for label, padded in (("exposed", False), ("padded", True)):
        labels = sorted((one for one in found
                         if one.startswith(f"{label}-")),
                        key=lambda one: int(one.rsplit("-", 1)[1]))
        if labels:
            calls[padded] = [found[one] for one in labels]
    if not value_layer or False not in calls:
        return None
    merges = list(MERGES) if _heads(case) > 1 else ["heads_last"]
    return lambda roles: any(softmax_of_scores(exposed_weights(
        case, projections, roles, value_layer, outputs, output_layer,
        padded, merge)) for padded, outputs in calls.items()
        for merge in merges)
