"""The layout of returned attention probabilities (the attention
homework's own kind, ``kinds/probs.py``): named only when rearranging
the student's own tensor gives the reference, beside controls that stay
silent (the right layout, the reference's order unflattened, the right
numbers in an order no layout explains, other values)."""
from __future__ import annotations

import torch

from autograder import homework
from autograder.checks.kinds import register_homework_kinds

# the attention homework's own kind (its profile's [data] kinds)
_PROBS = register_homework_kinds(homework.current())["probs"]
layout_words, probs_layout = _PROBS.layout_words, _PROBS.probs_layout

B, H, S = 2, 3, 5


def _reference() -> torch.Tensor:
    torch.manual_seed(0)
    return torch.randn(B, H, S, S).softmax(-1)


def _named(got: torch.Tensor) -> str | None:
    found = probs_layout(got, _reference().reshape(B * H, S, S), H, 1e-6, 0)
    return None if found is None else found.words


def test_heads_major_folding_is_named_and_its_fix_gives_the_reference():
    full = _reference()
    got = full.transpose(0, 1).reshape(H * B, S, S)
    found = probs_layout(got, full.reshape(B * H, S, S), H, 1e-6, 0)
    assert found is not None and found.words == \
        "[heads * batch, queries, keys]"
    # The fix the feedback prints, run on the student's tensor.
    fixed = eval(found.fix.strip("`"), {"probs": got})
    assert torch.equal(fixed, full.reshape(B * H, S, S))
    words = layout_words(found, tuple(got.shape))
    assert "[batch * heads, queries, keys]" in words and found.fix in words


def test_other_layouts_are_named_by_their_axes():
    full = _reference()
    assert _named(full.permute(0, 2, 1, 3)) == \
        "[batch, queries, heads, keys]"
    assert _named(full.transpose(-2, -1).reshape(B * H, S, S)) == \
        "[batch * heads, keys, queries]"
    assert _named(full.permute(1, 0, 2, 3)) == "[heads, batch, queries, keys]"


def test_controls_stay_silent():
    full = _reference()
    assert _named(full.reshape(B * H, S, S)) is None        # right
    assert _named(full) is None          # unflattened: said elsewhere
    # The right numbers shuffled within each head: no layout gives them.
    shuffled = full.reshape(B * H, S, S)[:, torch.tensor([1, 0, 2, 3, 4])]
    assert _named(shuffled) is None
    # Other values (a wrong softmax axis), laid out right or heads-major.
    wrong = torch.randn(B, H, S, S).softmax(-2)
    assert _named(wrong.reshape(B * H, S, S)) is None
    assert _named(wrong.transpose(0, 1).reshape(B * H, S, S)) is None
    # A wrong number of elements.
    assert _named(torch.ones(B * H, S, S - 1)) is None


def test_one_head_is_described_as_the_item_groups_it():
    """An axis of size 1 may sit anywhere: it is grouped with its left
    neighbour, and moving it alone is no layout (not flattened is said
    elsewhere)."""
    torch.manual_seed(2)
    full = torch.randn(B, 1, S, S).softmax(-1)
    expected = full.reshape(B, S, S)
    found = probs_layout(full.transpose(-2, -1).reshape(B, S, S), expected,
                         1, 1e-6, 0)
    assert found.words == "[batch * heads, keys, queries]"
    single = torch.randn(1, H, 1, 1).softmax(-1)
    assert probs_layout(single.reshape(1, H, 1), single.reshape(H, 1, 1),
                        H, 1e-6, 0) is None
