"""2.3b on probabilities of another shape: the head split that shape says
(``_split_value_mix``) must reproduce the frozen ``value_mix`` for the
right split, and refuse shapes no split of ``hidden`` makes."""
from __future__ import annotations

import torch

from autograder import homework
from autograder.checks.kinds import register_homework_kinds
from autograder.rubric import load_rubric
from autograder.values import load_cases

# the attention homework's own dropout kinds (its profile's [data] kinds)
_split_value_mix = register_homework_kinds(
    homework.current())["dropout"]._split_value_mix
CASES = [c for c in load_cases(sets=("public",))
         if c.task == "multi_head_self_attention" and c.mode == "train"]
# The layers the rubric's dropout_train item names.
PARAMS = next(c.params for c in load_rubric().checks()
              if c.kind == "dropout_train")
LAYERS = (PARAMS.value_layer, PARAMS.mix_layer)


def test_the_right_split_gives_the_frozen_value_mix():
    assert CASES
    for case in CASES:
        b, s, _ = case.tensors["x"].shape
        heads = case.init["num_heads"]
        found = _split_value_mix(case, torch.Size([b * heads, s, s]),
                                 *LAYERS)
        assert torch.allclose(found, case.tensors["value_mix"].double(),
                              atol=1e-6), case.name


def test_a_shape_no_split_makes_is_refused():
    for case in CASES:
        b, s, _ = case.tensors["x"].shape
        hidden = case.init["hidden"]
        heads = case.init["num_heads"]
        assert hidden % 5   # five heads do not divide hidden
        bad = [[b * 5, s, s], [b, heads * s, s], [b * heads, s, s + 1],
               [0, s, s], [b * heads + 1, s, s], [b * heads, s]]
        for shape in bad:
            assert _split_value_mix(case, torch.Size(shape),
                                    *LAYERS) is None, shape
        # head_size heads of num_heads (the swapped split) is a split
        swapped = _split_value_mix(
            case, torch.Size([b * (hidden // heads), s, s]), *LAYERS)
        assert swapped is not None and swapped.shape[1] == hidden // heads


def test_layers_the_case_lacks_make_no_split():
    case = CASES[0]
    b, s, _ = case.tensors["x"].shape
    shape = torch.Size([b * case.init["num_heads"], s, s])
    assert _split_value_mix(case, shape, "values", LAYERS[1]) is None
    assert _split_value_mix(case, shape, LAYERS[0], "out_proj") is None
