"""The expected values in another layout (autograder/checks/layout.py):
named only when undoing the named layout gives the expected tensor, with
the fix; never for other wrong values, nor when several layouts fit."""
from __future__ import annotations

import re
from types import SimpleNamespace

import torch

from autograder.checks import layout
from autograder.checks.base import Context, aggregate
from autograder.checks.entries import Check
from autograder.checks.outputs import diagnose

torch.manual_seed(0)
PROBS = torch.rand(2, 3, 5, 7)          # [batch, heads, queries, keys]


def _undo(got: torch.Tensor, text: str) -> torch.Tensor:
    """Apply the sentence's own fix to ``got``: the claim's proof."""
    laid = [int(n) for n in re.search(r"laid out \[([\d, ]+)\]",
                                      text).group(1).split(", ")]
    swap = re.search(r"`\.transpose\((\d), (\d)\)`", text)
    return got.reshape(laid).transpose(int(swap[1]), int(swap[2]))


def test_heads_last_numbers_viewed_as_heads_first_are_named_with_the_fix():
    got = PROBS.transpose(1, 2).reshape(2, 3, 5, 7)   # the s24 student
    found = layout.reading(got, PROBS, 1e-6)
    text = found.text
    assert "laid out [2, 5, 3, 7]" in text and "order 0, 2, 1, 3" in text
    assert found.key == "layout: the expected dims in the order 0, 2, 1, " \
        "3, then reshaped"
    assert torch.equal(_undo(got, text).reshape(PROBS.shape), PROBS)


def test_heads_folded_into_the_batch_are_split_to_find_the_layout():
    expected = PROBS.reshape(6, 5, 7)                 # [batch*heads, q, k]
    got = PROBS.transpose(1, 2).reshape(6, 5, 7)
    text = layout.reading(got, expected, 1e-6).text
    assert "taken as [2, 3, 5, 7]" in text and "laid out [2, 5, 3, 7]" in text
    assert torch.equal(_undo(got, text).reshape(6, 5, 7), expected)


def test_a_piece_of_a_split_dim_exchanged_with_a_dim_of_its_size():
    """A batch of 2 read as 2 heads (heads folded heads-major): on a case
    where the batch and the heads are both 2, the numbers also read as a
    transpose at the merge, a fix that holds on that case alone: nothing
    claimed. With 3 heads the layout is proven and named."""
    def folded(b: int, heads: int) -> tuple[torch.Tensor, torch.Tensor]:
        expected = torch.rand(b, 6, heads * 2)      # [b, tokens, h * d]
        got = expected.reshape(b, 6, heads, 2).permute(2, 1, 0, 3) \
            .reshape(b, 6, heads * 2)
        return got, expected
    assert layout.reading(*folded(2, 2), 1e-6) is None
    assert layout.reading(*folded(3, 3), 1e-6) is None
    got, expected = folded(2, 3)
    assert "order 2, 1, 0, 3" in layout.reading(got, expected, 1e-6).text


def test_a_plain_transpose_and_a_plain_reshape():
    square = torch.rand(2, 3, 5, 5)
    text = layout.reading(square.transpose(2, 3), square, 1e-6).text
    assert "in the order (0, 1, 3, 2): `.transpose(2, 3)`" in text
    text = layout.reading(PROBS.reshape(6, 35), PROBS, 1e-6).text
    assert text.startswith("Your values are the expected ones, in order, "
                           "reshaped to [6, 35]: return them as [2, 3, 5, 7]")


def test_other_values_and_ambiguous_layouts_claim_nothing():
    assert layout.reading(torch.rand(2, 3, 5, 7), PROBS, 1e-6) is None
    nearly = PROBS.transpose(1, 2).reshape(2, 3, 5, 7).clone()
    nearly[0, 0, 0, 0] += 0.01                        # one number off
    assert layout.reading(nearly, PROBS, 1e-6) is None
    # E[a, b, c] = a + 10 b + 10 c: two layouts give the same numbers.
    a, b, c = torch.meshgrid(*[torch.arange(2.)] * 3, indexing="ij")
    symmetric = a + 10 * b + 10 * c
    assert layout.reading(symmetric.permute(1, 0, 2), symmetric,
                          1e-6) is None


def test_the_output_check_adds_the_layout_only_when_no_mistake_explains_it():
    check = Check("item", "2.1", "probs", 2, "values")
    got = PROBS.transpose(1, 2).reshape(2, 3, 5, 7)
    verdict = diagnose(got, PROBS, {}, Context({}), check, "`probs`")
    assert "differs at" in verdict.message
    assert "`.transpose(1, 2)` before the reshape" in verdict.message
    # The class report groups the item's failures by the proven layout.
    outcome = aggregate(check, [SimpleNamespace(set="public")], [verdict],
                        Context({}))
    assert outcome.diagnosis == [verdict.cause] and "layout" in \
        verdict.cause
    verdict = diagnose(got, PROBS, {"heads_last": got},
                       Context({"heads_last": "m"}), check, "`probs`")
    assert verdict.mistake == "heads_last" and "laid out" not in \
        verdict.message
