"""Where train-mode dropout went, proven by a replay of the reference's
dropout mask under the case's seed (the attention homework's
kinds/dropout_replay.py): the replay draws what the worker's seeded
call draws, a place is named only when its prediction is the student's
values, never on a tie, and
the graded catalogue entries (kit/variants/diagnoses.toml: dropout on the
output, the values, the context, unscaled; a control with no place) are
graded by test_grading_corpus.py."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from autograder import homework
from autograder.checks.kinds import register_homework_kinds

# the attention homework's own evidence (its profile's [data] kinds)
R = register_homework_kinds(homework.current())["dropout_replay"]

SEED, P = 13, 0.5


def _seeded(values: torch.Tensor) -> torch.Tensor:
    """What the worker's call draws: the default generator seeded, then
    the module's one dropout call."""
    torch.default_generator.manual_seed(SEED)
    return F.dropout(values, P, training=True)


def test_the_replay_draws_what_a_seeded_dropout_call_draws():
    values = torch.rand(2, 3, 5, 5) + 0.1
    torch.testing.assert_close(R.dropped(values, SEED, P),
                               _seeded(values).double())
    # A transposed view is drawn in its memory order.
    view = torch.rand(2, 5, 3, 4).transpose(1, 2) + 0.1
    torch.testing.assert_close(R.dropped(view, SEED, P, memory=(0, 2, 1, 3)),
                               _seeded(view).double())


def _sites(weights, values):
    return R.context_sites(weights, values, lambda merged: merged, SEED, P)


def test_a_place_is_named_only_when_its_replay_gives_the_values():
    g = torch.Generator().manual_seed(0)
    weights = torch.rand(2, 3, 4, 4, generator=g, dtype=torch.float64)
    weights = weights / weights.sum(-1, keepdim=True)
    values = torch.randn(2, 4, 6, generator=g, dtype=torch.float64)
    split = R.heads_split(values, 3)
    own = R.heads_merged(weights @ split)
    # Dropout on the values as the layer gives them (then split).
    got = R.heads_merged(weights @ R.heads_split(
        _seeded(values.float()).double(), 3))
    site = R.proven_site(got, _sites(weights, values) +
                         [R.Site("the output", R.dropped(own, SEED, P))])
    assert site is not None and site.words == "the values v"
    assert "applied to the values v gives your train-mode output" in \
        R.sentence(site, P)
    # Unscaled dropout on the weights: the rescale named.
    got = R.heads_merged(_seeded(weights.float()).double() * (1 - P) @ split)
    site = R.proven_site(got, _sites(weights, values))
    assert site is not None and not site.rescaled
    assert "not rescaled by 1/(1 - p)" in R.sentence(site, P)
    # Control: right dropout on the weights, or any other value: nothing.
    right = R.heads_merged(_seeded(weights.float()).double() @ split)
    assert R.proven_site(right, _sites(weights, values)) is None
    assert R.proven_site(own * 1.5, _sites(weights, values)) is None


def test_two_places_that_predict_different_values_name_none():
    a = torch.ones(2, 3, dtype=torch.float64)
    # Places the replay cannot tell apart (the same values): both named,
    # never the first alone (eval5 sub21: dropout on out_proj's output,
    # whose case has out_proj = I, was called dropout on the merged heads).
    twice = [R.Site("one", a), R.Site("other", a.clone())]
    assert R.proven_site(a, twice).words == "one or other"
    assert R.proven_site(a, [R.Site("one", a), R.Site(
        "other", a + 1e-9)]).words == "one or other"    # within tolerance
    assert R.proven_site(a, [R.Site("one", a), R.Site(
        "one", a.clone())]).words == "one"              # one place, 2 views
    clash = [R.Site("one", a), R.Site("other", a * 2)]
    assert R.proven_site(a * 3, clash) is None


def test_no_place_is_named_for_values_no_mask_changes():
    # A module that returns zeros (or no dropout at all): every replay
    # "gives" its train-mode output, which proves nothing.
    g = torch.Generator().manual_seed(1)
    weights = torch.rand(2, 3, 4, 4, generator=g, dtype=torch.float64)
    weights = weights / weights.sum(-1, keepdim=True)
    zeros = torch.zeros(2, 4, 6, dtype=torch.float64)
    assert R.where_dropout(zeros, weights, zeros, zeros, lambda m: m, SEED,
                           P) == ""
    values = torch.randn(2, 4, 6, generator=g, dtype=torch.float64)
    own = R.heads_merged(weights @ R.heads_split(values, 3))
    assert R.where_dropout(own, weights, own, values, lambda m: m, SEED,
                           P) == ""
    # Control: dropout after the weighted sum is still named (here the
    # merged heads are the output: the first of the two).
    got = R.dropped(own, SEED, P)
    assert "gives your train-mode output exactly" in R.where_dropout(
        got, weights, own, values, lambda m: m, SEED, P)


def test_no_site_is_named_where_dropout_on_the_weights_explains_it():
    # Values the identity: the context vectors are the weights, so a
    # replay on the context predicts what dropout on the weights gives;
    # a right module is never told its dropout is elsewhere.
    torch.manual_seed(0)
    weights = torch.rand(1, 1, 4, 4, dtype=torch.float64).softmax(-1)
    values = torch.eye(4, dtype=torch.float64).reshape(1, 4, 4)
    right = R.heads_merged(R.dropped(
        weights, 7, 0.5) @ R.heads_split(values, 1))
    own = R.heads_merged(
        weights @ R.heads_split(values, 1))
    said = R.where_dropout(right, weights, own, values, lambda t: t, 7, 0.5)
    assert said == ""
    context = R.heads_merged(R.dropped(
        weights @ R.heads_split(values, 1), 7, 0.5))
    assert torch.equal(context, right)   # the coincidence it guards
