"""The frozen test cases: sizes, seeds and which set each belongs to.

Public cases ship to students; hidden ones stay with the grader and probe the
edges (a single token, one head, head_size 1, long and wide inputs, dropout in
train mode). To add a case, append a ``Case`` here and run
``make test-values``; the seed makes it reproducible.

Every case discriminates: no two of its sizes (batch, seq, input, hidden or
d_out, num_heads, head size, context length) are equal, except sizes of 1
(the edges) and what the structure implies (one head: hidden = head size;
head size 1: hidden = num_heads; identity inputs: seq = d_in), so a mistake
that swaps two dimensions cannot pass by coincidence. The course's and the
book's own examples keep their sizes and say so in ``same_sizes``; every
task also has a public case whose sizes are all distinct
(kit_tests/test_case_table.py enforces both over the manifest).
"""
from __future__ import annotations

from kit.generate.case_definition import Case, tasks


# class (or factory function) -> rubric task id, from the rubric.
TASKS = tasks()

# Per class: role -> the constructor argument holding it (the grader and
# kit/generate/values.py read a size by its role, never by these names).
_PART1 = {"input": "input_size", "width": "hidden"}
_PART3 = {"input": "d_in", "width": "d_out", "context": "context_length"}
ARGUMENTS = {
    "SelfAttention": _PART1,
    "MultiHeadSelfAttention": {**_PART1, "heads": "num_heads"},
    "CausalAttention": _PART3,
    "MultiHeadAttentionWrapper": {**_PART3, "heads": "num_heads"},
    "MultiHeadAttention": {**_PART3, "heads": "num_heads"},
}


def _sa(name, set_, input_size, hidden, batch, seq, seed, description):
    return Case(name, set_, "SelfAttention",
                {"input_size": input_size, "hidden": hidden},
                batch, seq, seed, "eval", description,
                arguments=ARGUMENTS["SelfAttention"])


def _mh(name, set_, input_size, hidden, heads, causal, batch, seq, seed,
        description, dropout=0.0, mode="eval", same_sizes=""):
    # forward(x, return_attention=True) returns the probabilities too; a
    # train-mode case also freezes what checks a dropped-out output.
    return Case(name, set_, "MultiHeadSelfAttention",
                {"input_size": input_size, "hidden": hidden,
                 "num_heads": heads, "causal": causal, "dropout": dropout},
                batch, seq, seed, mode, description, same_sizes=same_sizes,
                call={"return_attention": True},
                extras=("value_mix",) if mode == "train" else (),
                arguments=ARGUMENTS["MultiHeadSelfAttention"])


COURSE = "the 2022 course's sizes: batch 3 = num_heads 3 = head_size 3"


# Cases sharing a seed share their weights and input (the course pair
# mhsa_course / mhsa_course_causal differs only in the causal flag).
CASES: list[Case] = [
    _sa("sa_course", "public", 7, 9, 3, 5, 2022, "course-sized case"),
    _sa("sa_small", "public", 4, 6, 2, 3, 11, "small case"),
    _mh("mhsa_course", "public", 7, 9, 3, False, 3, 5, 2023,
        "course-sized case, not causal", same_sizes=COURSE),
    _mh("mhsa_course_causal", "public", 7, 9, 3, True, 3, 5, 2023,
        "course-sized case, causal", same_sizes=COURSE),
    _mh("mhsa_small", "public", 5, 12, 3, False, 2, 6, 12,
        "small case, all sizes distinct (3 heads of 4)"),
    _mh("mhsa_small_causal", "public", 5, 12, 3, True, 2, 6, 12,
        "small causal case, all sizes distinct (3 heads of 4)"),
    _mh("mhsa_dropout_public", "public", 6, 12, 3, False, 2, 9, 13,
        "dropout 0.5 in train mode", dropout=0.5, mode="train"),

    _sa("sa_single_token", "hidden", 3, 1, 1, 1, 101,
        "batch 1, one token, hidden 1"),
    _sa("sa_long", "hidden", 16, 24, 2, 33, 102, "33 tokens"),
    _sa("sa_large", "hidden", 48, 64, 4, 17, 103, "larger sizes"),
    _mh("mhsa_single_token", "hidden", 5, 6, 2, False, 1, 1, 201,
        "batch 1, one token"),
    _mh("mhsa_single_token_causal", "hidden", 5, 6, 2, True, 1, 1, 201,
        "batch 1, one token, causal"),
    _mh("mhsa_one_head", "hidden", 7, 6, 1, False, 2, 5, 202, "one head"),
    _mh("mhsa_one_head_causal", "hidden", 7, 6, 1, True, 2, 5, 202,
        "one head, causal"),
    _mh("mhsa_head_size_1", "hidden", 6, 4, 4, False, 2, 5, 203,
        "head_size 1"),
    _mh("mhsa_head_size_1_causal", "hidden", 6, 4, 4, True, 2, 5, 203,
        "head_size 1, causal"),
    _mh("mhsa_long_causal", "hidden", 12, 24, 6, True, 2, 40, 204,
        "40 tokens, causal"),
    _mh("mhsa_large", "hidden", 32, 64, 4, False, 3, 19, 205,
        "larger sizes"),
    _mh("mhsa_large_causal", "hidden", 32, 64, 4, True, 3, 19, 205,
        "larger sizes, causal"),
    _mh("mhsa_dropout", "hidden", 8, 12, 3, False, 2, 16, 206,
        "dropout 0.5 in train mode", dropout=0.5, mode="train"),
    _mh("mhsa_dropout_causal", "hidden", 8, 12, 3, True, 2, 16, 207,
        "dropout 0.3 in train mode, causal", dropout=0.3, mode="train"),
]


# --------------------------------------------------------------------------
# Part 3 (the book's chapter 3). Init arguments by keyword, as the book's
# constructors take them. The book's example (seed 123, the six-token input
# "Your journey starts with one step" stacked twice) is public; the hidden
# cases probe one token, sequences shorter than the context (the mask must
# be cut to num_tokens), qkv_bias on and off and more heads.
#
# Special cases:
# - weights="dropout_probe", inputs="identity", mode="train": x[i] is the
#   identity (seq = d_in) and every head's values are [I; I] (no qkv bias;
#   for the fused module d_out = num_heads * 2 * d_in and out_proj is the
#   identity), so each head's output is [A | A] with A its attention
#   weights. In train mode, dropout applied to the weights gives two equal
#   halves, each entry 0 or attention / (1 - p); dropout applied to the
#   output drops the halves independently. ``output`` is the eval output,
#   ``attention`` the eval weights.
# - weights="concat:<wrapper case>": a fused module whose W_query/W_key/
#   W_value are the wrapper case's heads stacked (head i = rows i*d .. ),
#   out_proj the identity with bias 0: its output equals the wrapper's.
# - gpt2_small_attention: no weights (2.36M parameters are not frozen);
#   ``x`` [2, 5, 768], ``num_parameters`` and ``<param>.shape`` per
#   parameter.


def _p3(name, set_, cls, init, batch, seq, seed, description, mode="eval",
        inputs="randn", weights="init", same_sizes="", sizes_only=False,
        width=0):
    return Case(name, set_, cls, init, batch, seq, seed, mode, description,
                inputs, weights, same_sizes, sizes_only=sizes_only,
                arguments=ARGUMENTS.get(cls, {}),
                features=768 if sizes_only else 0)   # GPT-2's width


BOOK = "the book's example: six tokens of a context of 6, d_out 2, batch 2"


def _ca(d_in, d_out, context, dropout=0.0, qkv_bias=False):
    return {"d_in": d_in, "d_out": d_out, "context_length": context,
            "dropout": dropout, "qkv_bias": qkv_bias}


def _heads(d_in, d_out, context, heads, dropout=0.0, qkv_bias=False):
    return {"d_in": d_in, "d_out": d_out, "context_length": context,
            "dropout": dropout, "num_heads": heads, "qkv_bias": qkv_bias}


CA, MHW, MHA = ("CausalAttention", "MultiHeadAttentionWrapper",
                "MultiHeadAttention")
# The classes whose width argument (d_out) is one head's, not the
# output's: a new edition (kit/generate/edition.py) draws their sizes so.
STACKED_HEADS = (MHW,)
PART3: list[Case] = [
    _p3("ca_book", "public", CA, _ca(3, 2, 6), 2, 6, 123,
        "the book's example: six tokens, d_in 3, d_out 2", inputs="book",
        same_sizes=BOOK),
    _p3("ca_small", "public", CA, _ca(4, 3, 7), 2, 5, 304,
        "5 tokens of a context of 7, all sizes distinct"),
    _p3("ca_dropout_probe_public", "public", CA, _ca(6, 12, 8, 0.5), 2, 6,
        301, "dropout 0.5 on the weights, x = I, values [I; I]",
        mode="train", inputs="identity", weights="dropout_probe"),
    _p3("mhw_book", "public", MHW, _heads(3, 2, 6, 2), 2, 6, 123,
        "the book's example: two heads of d_out 2", inputs="book",
        same_sizes=BOOK),
    _p3("mhw_small", "public", MHW, _heads(7, 3, 9, 4), 2, 5, 305,
        "four heads of d_out 3, 5 tokens of 9, all sizes distinct"),
    _p3("mha_book", "public", MHA, _heads(3, 2, 6, 2), 2, 6, 123,
        "the book's example: d_out 2, two heads of head_dim 1",
        inputs="book", same_sizes=BOOK),
    _p3("mha_small", "public", MHA, _heads(7, 12, 9, 4), 2, 5, 306,
        "four heads of head_dim 3, 5 tokens of 9, all sizes distinct"),
    _p3("mha_equiv_book", "public", MHA, _heads(3, 4, 6, 2), 2, 6, 123,
        "the heads of mhw_book fused, out_proj the identity",
        inputs="book", weights="concat:mhw_book", same_sizes=BOOK),
    _p3("mha_equiv_small", "public", MHA, _heads(7, 12, 9, 4), 2, 5, 305,
        "the heads of mhw_small fused (head_dim 3, 4 heads), out_proj the "
        "identity", weights="concat:mhw_small"),
    _p3("mha_dropout_probe_public", "public", MHA,
        _heads(4, 24, 6, 3, 0.5), 2, 4, 302,
        "dropout 0.5 on the weights, x = I, every head's values [I; I]",
        mode="train", inputs="identity", weights="dropout_probe"),
    _p3("gpt2_small", "public", "gpt2_small_attention", {}, 2, 5, 303,
        "GPT-2 small: 768 dims, 12 heads, context 1024, dropout 0.1, "
        "qkv bias", same_sizes="GPT-2's own sizes: d_in = d_out = 768 "
        "(sizes only, no values)", sizes_only=True, width=768),

    _p3("ca_single_token", "hidden", CA, _ca(4, 3, 5), 1, 1, 311,
        "batch 1, one token"),
    _p3("ca_short", "hidden", CA, _ca(8, 4, 16), 3, 10, 312,
        "10 tokens of a context of 16, no bias"),
    _p3("ca_bias_long", "hidden", CA, _ca(6, 5, 40, qkv_bias=True), 2, 33,
        313, "33 tokens of a context of 40, qkv bias"),
    _p3("ca_dropout_probe", "hidden", CA, _ca(10, 20, 12, 0.3), 2, 10, 314,
        "dropout 0.3 on the weights, x = I, values [I; I]", mode="train",
        inputs="identity", weights="dropout_probe"),
    _p3("mhw_single_token", "hidden", MHW, _heads(5, 3, 4, 2), 1, 1, 321,
        "batch 1, one token"),
    _p3("mhw_one_head", "hidden", MHW, _heads(6, 4, 9, 1), 2, 7, 322,
        "one head"),
    _p3("mhw_bias_heads", "hidden", MHW,
        _heads(6, 5, 24, 4, qkv_bias=True), 2, 17, 323,
        "four heads, qkv bias, 17 tokens of 24"),
    _p3("mha_single_token", "hidden", MHA, _heads(5, 6, 7, 2), 1, 1, 331,
        "batch 1, one token"),
    _p3("mha_one_head", "hidden", MHA, _heads(7, 6, 10, 1), 2, 5, 332,
        "one head"),
    _p3("mha_head_dim_1", "hidden", MHA, _heads(6, 4, 8, 4), 2, 5, 333,
        "head_dim 1"),
    _p3("mha_bias_long", "hidden", MHA,
        _heads(12, 24, 64, 6, qkv_bias=True), 2, 40, 334,
        "six heads, qkv bias, 40 tokens of 64"),
    _p3("mha_large", "hidden", MHA, _heads(32, 64, 40, 4), 3, 19, 335,
        "larger sizes, 19 tokens of 40"),
    _p3("mha_equiv_bias", "hidden", MHA,
        _heads(6, 20, 24, 4, qkv_bias=True), 2, 17, 323,
        "the heads of mhw_bias_heads fused, out_proj the identity",
        weights="concat:mhw_bias_heads"),
    _p3("mha_dropout_probe", "hidden", MHA, _heads(5, 30, 6, 3, 0.3),
        2, 5, 336, "dropout 0.3 on the weights, x = I, every head's values "
        "[I; I]", mode="train", inputs="identity", weights="dropout_probe"),
]
CASES += PART3
