"""Numbers named as sizes (autograder/checks/diagnosis/relations.py,
``name_number``): a size, its square root, that root's own root and their
inverses, one named only when few sizes fit."""
from __future__ import annotations

import torch

from autograder.checks.compare import row_factors
from autograder.checks.diagnosis.relations import (
    name_number, reshaped, row_scaled)

SIZES = {"head_size": 3, "hidden": 12, "seq": 5}


def test_a_scale_rooted_twice_is_named_as_such():
    assert name_number(3 ** 0.25, SIZES) == "sqrt(sqrt(head_size = 3))"
    assert name_number(3 ** -0.25, SIZES, values=False) == \
        "1/sqrt(sqrt(head_size))"
    assert name_number(12 ** 0.5, SIZES) == "sqrt(hidden = 12)"


def test_no_size_or_too_many_sizes_name_nothing():
    assert name_number(1.7, SIZES) is None
    crowded = {"a": 4, "b": 9, "c": 16}
    assert name_number(1 / 6, {"x": 6, "y": 36, "w": 6}) is None
    # A plain root is said before a twice-rooted one: 2 = sqrt(4), not
    # also sqrt(sqrt(16)).
    assert name_number(2.0, crowded) == "sqrt(a = 4)"
    assert name_number(2.0, {"c": 16}) == "sqrt(sqrt(c = 16))"


def test_a_bias_taken_from_another_projection_is_named():
    import torch
    from autograder.checks.diagnosis.relations import bias
    torch.manual_seed(0)
    weights = {f"{n}.bias": torch.randn(4) for n in "qkv"}
    layers = {"q": "q", "k": "k", "v": "v"}
    expected = torch.randn(2, 3, 4)
    swapped = expected - weights["q.bias"] + weights["k.bias"]
    found = bias("q", swapped, expected, weights, layers)
    assert found.key == "bias of another layer: self.q"
    assert "carries the bias of `self.k` where `self.q`'s belongs" in \
        found.text
    # Any other shift is only a shift; the own bias left out is that.
    other = bias("q", expected + 0.5, expected, weights, layers)
    assert other.key == "constant shift"
    assert bias("q", expected - weights["q.bias"], expected, weights,
                layers).key == "bias missing: self.q"


def test_a_shift_over_another_dimension_and_rows_not_normalised():
    import torch
    from autograder.checks.diagnosis.relations import row_scaled, shifted
    torch.manual_seed(1)
    scaled = torch.randn(2, 4, 4)
    steps = {"scaled": scaled, "weights": scaled.softmax(-1)}
    found = shifted("weights", scaled - scaled.amax(dim=1, keepdim=True),
                    steps)
    assert found.key == "shift over dimension 1" and found.step == "scaled"
    assert "minus their maximum over dimension 1" in found.text
    # The last dimension's own maximum is no bug (the softmax keeps it):
    # not this relation.
    assert shifted("weights", scaled - scaled.amax(dim=-1, keepdim=True),
                   steps) is None
    weights = steps["weights"]
    e = weights * torch.arange(1.0, 5.0).view(1, 4, 1)
    found = row_scaled("weights", e / e.sum(), weights)
    assert found.key == "weights: rows not normalised"
    assert "each row must be divided by its own sum" in found.text
    assert row_scaled("weights", weights, weights) is None
    assert row_scaled("scaled", e / e.sum(), weights) is None


def test_rows_scaled_each_by_their_own_factor_are_named_and_others_not():
    weights = torch.tensor([[0.5, 0.5, 0.0], [0.2, 0.3, 0.5]])
    factor = torch.tensor([[2.0], [3.0]])
    assert torch.equal(row_factors(weights * factor, weights, weights > 0),
                       factor)
    # A value where the expected one is zero: no factor explains it.
    leaked = weights * factor + torch.tensor([[0, 0, 0.1], [0, 0, 0]])
    assert row_factors(leaked, weights, weights > 0) is None
    found = row_scaled("weights", weights * factor, weights)
    assert found is not None and "rows sum to 2 to 3, not 1" in found.text
    # Normalised rows (the same weights), or another step: silent.
    assert row_scaled("weights", weights, weights) is None
    assert row_scaled("scores", weights * factor, weights) is None


def test_a_transpose_written_as_a_reshape_is_named_from_the_records():
    k = torch.arange(2 * 5 * 3, dtype=torch.float32).reshape(2, 5, 3)
    steps = {"k": k}
    found = reshaped([(4, k), (5, k.reshape(2, 3, 5))], 5, steps, 3)
    assert found is not None
    relation, step, fixed = found
    assert step == "k" and torch.equal(fixed, k.mT)
    assert "the keys k of line 4 reshaped to [2, 3, 5]" in relation.text
    # The transpose itself, or a record that gives no step: no claim.
    assert reshaped([(4, k), (5, k.mT)], 5, steps, 3) is None
    assert reshaped([(4, k + 1), (5, (k + 1).reshape(2, 3, 5))], 5, steps,
                    3) is None


def _masked(scores: torch.Tensor, hide: torch.Tensor) -> torch.Tensor:
    return scores.masked_fill(hide, float("-inf"))


def test_a_shifted_mask_names_a_larger_masks_corner_only_by_agreement():
    # A mask shifted by one (j >= i + 2) is the bottom-left cut of a
    # mask one size larger, whatever the code: that size is said only
    # where every failing case shows it, never one case's coincidence.
    from autograder.checks.diagnosis.attach import Finding, agree
    from autograder.checks.diagnosis.relations import mask_region
    torch.manual_seed(0)
    scores = torch.randn(1, 1, 5, 5)
    want = torch.ones(5, 5, dtype=torch.bool).triu(1)
    got = _masked(scores, torch.ones(5, 5, dtype=torch.bool).triu(2))
    expected = _masked(scores, want)
    one = mask_region("masked", got, expected, sizes={"head_size": 6})
    assert "the 6 x 6 mask (head_size = 6) cut at its last 5 rows" in \
        one.text
    assert one.plain is not None and "6 x 6" not in one.plain.text
    assert "hides key j for query i where j >= i + 2" in one.plain.text
    other = mask_region("masked", got, expected, sizes={"input_size": 6})
    both = mask_region("masked", got, expected,
                       sizes={"head_size": 6, "input_size": 6})

    def said(*relations) -> list[str]:
        findings = [Finding.__new__(Finding) for _ in relations]
        for finding, relation in zip(findings, relations):
            finding.relation = relation
        agree(findings)
        return [f.relation.text for f in findings]
    assert all("6 x 6" not in t for t in said(one, other))
    assert all("6 x 6" not in t for t in said(both))
    assert all("(head_size = 6)" in t for t in said(one, both))
