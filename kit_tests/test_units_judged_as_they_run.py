"""Unit items are earned only by the unit: causality is checked at every
position against a change of all the tokens after it (a mask hiding only
the last token passed 3.1c when only the last token was changed), and
"weights computed from the input" needs weights that follow the queries
and keys (fixed uniform weights with tanh on the values passed 3.1c,
3.1d and 3.3d: their outputs are off a line, yet use no query or key).
Each attack is graded beside its control, the reference, which keeps
every item."""
from __future__ import annotations

import pytest

from autograder.config import load_config
from autograder.grade import grade_source
from autograder.local import in_process_runner
from kit_tests.reference_source import FULL_REFERENCE

CA_MASK = ("        mask_bool = self.mask.bool()[:num_tokens, :num_tokens]\n"
           "        # [num_tokens, num_tokens]\n"
           "        attn_scores = attn_scores.masked_fill(mask_bool, "
           "-torch.inf)\n"
           "        # [b, num_tokens, num_tokens]\n")
HIDES_LAST_ONLY = (
    "        mask_bool = torch.zeros(num_tokens, num_tokens, dtype=torch.bool)"
    "\n        mask_bool[:-1, -1] = True  # [num_tokens, num_tokens]\n"
    "        attn_scores = attn_scores.masked_fill(mask_bool, -torch.inf)\n"
    "        # [b, num_tokens, num_tokens]\n")
CA_WEIGHTS = ("        attn_weights = torch.softmax(attn_scores / "
              "keys.shape[-1] ** 0.5,\n"
              "                                     dim=-1)  # [b, num_tokens,"
              " num_tokens]\n")
UNIFORM = ("        attn_weights = torch.tril(torch.ones(num_tokens, "
           "num_tokens))\n"
           "        attn_weights = attn_weights / attn_weights.sum(-1, "
           "keepdim=True)\n"
           "        attn_weights = attn_weights.expand(b, -1, -1)  # [b, n, n]"
           "\n        values = torch.tanh(values)  # [b, n, d_out]\n")
MHA_WEIGHTS = ("        attn_weights = torch.softmax(attn_scores / "
               "self.head_dim ** 0.5,\n"
               "                                     dim=-1)\n")
MHA_UNIFORM = ("        attn_weights = torch.tril(torch.ones(num_tokens, "
               "num_tokens))\n"
               "        attn_weights = attn_weights / attn_weights.sum(-1, "
               "keepdim=True)\n"
               "        values = torch.tanh(values)\n")


def _edit(old: str, new: str) -> str:
    assert FULL_REFERENCE.count(old) == 1, old
    return FULL_REFERENCE.replace(old, new)


@pytest.fixture(scope="module")
def config():
    return load_config()


def _passed(source: str, config) -> dict[str, bool]:
    grade = grade_source(source, "unit.py", config, in_process_runner)
    assert not grade.internal_error
    return {c.check.id: c.outcome.passed for t in grade.tasks
            for c in (*t.items, *t.deductions)}


def test_the_control_keeps_every_unit_item(config):
    passed = _passed(FULL_REFERENCE, config)
    assert all(passed[i] for i in ("3.1c", "3.1d", "3.3d")), passed


def test_a_mask_hiding_only_the_last_token_is_not_causal(config):
    passed = _passed(_edit(CA_MASK, HIDES_LAST_ONLY), config)
    assert not passed["3.1c"]
    # One mistake, its own item: the other classes keep theirs.
    assert passed["3.3d"] and passed["3.4"]


def test_uniform_weights_with_tanh_on_the_values_earn_no_unit_item(config):
    passed = _passed(_edit(CA_WEIGHTS, UNIFORM), config)
    assert not passed["3.1c"] and not passed["3.1d"]
    passed = _passed(_edit(MHA_WEIGHTS, MHA_UNIFORM), config)
    assert not passed["3.3d"]
    assert passed["3.1c"] and passed["3.1d"]


# The wrapper tells stand-in heads (no W_query) from its real ones, and
# feeds its real heads what makes them raise in their own code.
WRAPPER = ("        return torch.cat([head(x) for head in self.heads], "
           "dim=-1)\n")
TELLS_STAND_INS = (
    "        return torch.cat([head(x if not hasattr(head, 'W_query') "
    "else x[..., :-1])\n                          for head in self.heads], "
    "dim=-1)\n")
FACTORY = ("    return MultiHeadAttention(768, 768, 1024, 0.1, 12, "
           "qkv_bias=True)\n")
# The factory tells the stand-in class apart and builds 7 heads for real
# (which raises in MultiHeadAttention's own code: 768 % 7).
TELLS_BY = {
    "module": "MultiHeadAttention.__module__ != __name__",
    "code": "'autograder' in MultiHeadAttention.__init__.__code__"
            ".co_filename",
}


def _factory(test: str) -> str:
    return (f"    heads = 12 if {test} else 7\n"
            f"    return MultiHeadAttention(768, 768, 1024, 0.1, heads,\n"
            f"                              qkv_bias=True)\n")


def test_a_wrapper_that_tells_stand_in_heads_apart_loses_3_2(config):
    passed = _passed(_edit(WRAPPER, TELLS_STAND_INS), config)
    assert not passed["3.2"]
    assert passed["3.1"] and passed["3.3"]     # its heads keep theirs


@pytest.mark.parametrize("tell", sorted(TELLS_BY))
def test_a_factory_that_tells_the_stand_in_apart_loses_3_4(config, tell):
    passed = _passed(_edit(FACTORY, _factory(TELLS_BY[tell])), config)
    assert not passed["3.4"]
    assert passed["3.3"]
