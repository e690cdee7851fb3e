"""Where a train-mode call put its dropout, proven by a replay: the
reference's dropout draws under the case's seed (the probe seeds the
generator right before the call, and the reference's one dropout call is
the first draw after it) applied at a candidate place of the student's
own eval computation. A place is named only when that counterfactual
gives the student's train-mode values at every position, and no other
candidate does (principle: a cause is said only when proven on the
student's values); otherwise nothing is added.

Read by a homework's dropout kinds (the attention homework's
``kinds/dropout.py``) for a failing case.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

import torch

# How close a replayed prediction must come to the student's values (the
# student computes in float32, the replay in float64).
REL = 1e-4


def keep_mask(seed: int, shape: tuple[int, ...], p: float,
              memory: tuple[int, ...] | None = None) -> torch.Tensor:
    """The keep mask (1 kept, 0 dropped) the first dropout call after
    seeding draws for a tensor of ``shape``; ``memory``: the order its
    elements lie in memory (a transposed view: the permutation of
    ``shape``'s dimensions in memory order), which is the draws' order."""
    order = memory or tuple(range(len(shape)))
    generator = torch.Generator().manual_seed(int(seed))
    drawn = torch.empty([shape[d] for d in order], dtype=torch.float64)
    drawn.bernoulli_(1 - p, generator=generator)
    back = [order.index(d) for d in range(len(shape))]
    return drawn.permute(back)


def dropped(values: torch.Tensor, seed: int, p: float,
            memory: tuple[int, ...] | None = None,
            rescale: bool = True) -> torch.Tensor:
    """``values`` (float64) after the replayed dropout."""
    mask = keep_mask(seed, tuple(values.shape), p, memory)
    return values.double() * mask / ((1 - p) if rescale else 1.0)


@dataclass(frozen=True)
class Site:
    """A place dropout may have been put, and the student's train-mode
    output the replay predicts for it."""

    words: str           # "the values v", ...
    predicted: torch.Tensor
    rescaled: bool = True


def _equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    if tuple(a.shape) != tuple(b.shape):
        return False
    a, b = a.double(), b.double()
    finite = torch.isfinite(b)
    scale = 1.0 + (float(b[finite].abs().max()) if finite.any() else 0.0)
    both = torch.isfinite(a) == finite
    return bool(both.all()) and bool(
        ((a - b).abs()[finite] <= REL * scale).all())


def proven_site(got: torch.Tensor, sites: list[Site]) -> Site | None:
    """The one site whose prediction is ``got``; None if none, or if two
    that predict different values both are (no claim on a coincidence).
    Sites predicting the same values are one site named by all their
    words ("the merged heads or the output": on a case whose output
    projection is the identity the replay cannot tell them apart, and
    naming one would say something the code may contradict)."""
    found = [site for site in sites if _equal(got, site.predicted)]
    if not found or any(not _equal(found[0].predicted, other.predicted)
                        or other.rescaled != found[0].rescaled
                        for other in found[1:]):
        return None
    words = " or ".join(dict.fromkeys(site.words for site in found))
    return replace(found[0], words=words)


def sentence(site: Site, p: float) -> str:
    """What the student reads: the replay, and what it proves."""
    replay = ("Replayed on your own values, the reference's dropout mask "
              "(the same seed)")
    if not site.rescaled:
        return (f"{replay} on your attention weights, without the "
                f"1/(1 - p) = {1 / (1 - p):.4g} rescale, gives your "
                f"train-mode output exactly: the kept weights are not "
                f"rescaled by 1/(1 - p).")
    return (f"{replay} applied to {site.words} gives your train-mode "
            f"output exactly: dropout is applied to {site.words} instead "
            f"of the attention weights. Apply it to the attention weights "
            f"(after the softmax), before the weighted sum of the values.")


def heads_merged(context: torch.Tensor) -> torch.Tensor:
    """[b, h, s, d] -> [b, s, h * d]: the heads side by side."""
    b, h, s, d = context.shape
    return context.transpose(1, 2).reshape(b, s, h * d)


def heads_split(values: torch.Tensor, heads: int) -> torch.Tensor:
    """[b, s, h * d] -> [b, h, s, d]."""
    b, s, width = values.shape
    return values.view(b, s, heads, width // heads).transpose(1, 2)


def context_sites(weights: torch.Tensor, values: torch.Tensor,
                  after: Callable[[torch.Tensor], torch.Tensor], seed: int,
                  p: float) -> list[Site]:
    """The sites of a head-split computation: ``weights`` [b, h, s, s]
    (the student's own, before dropout), ``values`` [b, s, h * d] (a
    linear layer's output), ``after`` what follows the merged heads (the
    mix, or nothing). Dropout on the weights unscaled, on the values (as
    the layer gave them, or split into heads, contiguous), on each head's
    context, and on the merged heads."""
    w, v = weights.double(), values.double()
    heads = w.shape[1]

    def out(weights_: torch.Tensor, values_: torch.Tensor) -> torch.Tensor:
        return after(heads_merged(weights_ @ heads_split(values_, heads)))

    split = heads_split(v, heads).contiguous()
    context = w @ split
    # One head has no merge: its merged heads are its context, one place.
    merged = [] if heads == 1 else [
        Site("the merged heads", after(dropped(heads_merged(context), seed,
                                               p)))]
    return [
        Site("the attention weights", out(dropped(w, seed, p, rescale=False),
                                          v), rescaled=False),
        Site("the values v", out(w, dropped(v, seed, p))),
        Site("the values v", after(heads_merged(w @ dropped(
            split, seed, p)))),
        Site("the context vectors (weights @ v)", after(heads_merged(
            dropped(context, seed, p)))),
        *merged,
    ]


def linear(x: torch.Tensor, weights: dict[str, torch.Tensor],
           layer: str) -> torch.Tensor | None:
    """``layer``'s output on ``x`` from a case's weights (float64), None
    if the case has no such layer."""
    weight = weights.get(f"{layer}.weight")
    if weight is None or x.shape[-1] != weight.shape[-1]:
        return None
    out = x.double() @ weight.double().T
    bias = weights.get(f"{layer}.bias")
    return out if bias is None else out + bias.double()


def where_dropout(got: torch.Tensor, weights: torch.Tensor,
                  own_output: torch.Tensor, values: torch.Tensor | None,
                  after: Callable[[torch.Tensor], torch.Tensor], seed: int,
                  p: float) -> str:
    """The sentence of the proven site of a train-mode output ``got``
    (its own eval ``weights`` [b, h, s, s] and ``own_output``, the
    ``values`` its eval computation mixes), or "" when none is proven."""
    if _equal(got, own_output):
        # No dropout anywhere (or values no mask changes, e.g. zeros): any
        # site's replay gives them, which proves nothing.
        return ""
    if values is not None and weights.dim() == 4 and _equal(got, after(
            heads_merged(dropped(weights, seed, p) @ heads_split(
                values.double(), weights.shape[1])))):
        # Dropout where it belongs predicts these values too (a probe
        # whose output is its weights): the replay proves no other site.
        return ""
    sites = [] if values is None or weights.dim() != 4 else context_sites(
        weights, values, after, seed, p)
    sites.append(Site("the output", dropped(own_output, seed, p)))
    # A replay that leaves the eval values as they are is no evidence.
    site = proven_site(got, [s for s in sites
                             if not _equal(s.predicted, own_output)])
    return "" if site is None else sentence(site, p)
