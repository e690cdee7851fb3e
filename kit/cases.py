"""The frozen test cases: sizes, seeds and which set each belongs to.

Public cases ship to students; hidden ones stay with the grader and probe the
edges (a single token, one head, head_size 1, long and wide inputs, dropout in
train mode). To add a case, append a ``Case`` here and run
``make test-values``; the seed makes it reproducible.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Case:
    """One frozen case: a module configuration, an input size and a seed."""

    name: str
    set: str                 # "public" or "hidden"
    cls: str                 # "SelfAttention" or "MultiHeadSelfAttention"
    init: dict = field(hash=False)
    batch: int = 3
    seq: int = 5
    seed: int = 0
    mode: str = "eval"       # "train": dropout case (outputs are eval values)
    description: str = ""

    @property
    def task(self) -> str:
        return {"SelfAttention": "self_attention",
                "MultiHeadSelfAttention": "multi_head_self_attention"}[self.cls]


def _sa(name, set_, input_size, hidden, batch, seq, seed, description):
    return Case(name, set_, "SelfAttention",
                {"input_size": input_size, "hidden": hidden},
                batch, seq, seed, "eval", description)


def _mh(name, set_, input_size, hidden, heads, causal, batch, seq, seed,
        description, dropout=0.0, mode="eval"):
    return Case(name, set_, "MultiHeadSelfAttention",
                {"input_size": input_size, "hidden": hidden,
                 "num_heads": heads, "causal": causal, "dropout": dropout},
                batch, seq, seed, mode, description)


# Cases sharing a seed share their weights and input (the course pair
# mhsa_course / mhsa_course_causal differs only in the causal flag).
CASES: list[Case] = [
    _sa("sa_course", "public", 7, 9, 3, 5, 2022, "course-sized case"),
    _sa("sa_small", "public", 4, 6, 2, 3, 11, "small case"),
    _mh("mhsa_course", "public", 7, 9, 3, False, 3, 5, 2023,
        "course-sized case, not causal"),
    _mh("mhsa_course_causal", "public", 7, 9, 3, True, 3, 5, 2023,
        "course-sized case, causal"),
    _mh("mhsa_small_causal", "public", 5, 8, 2, True, 2, 4, 12,
        "small causal case"),
    _mh("mhsa_dropout_public", "public", 6, 8, 2, False, 2, 12, 13,
        "dropout 0.5 in train mode", dropout=0.5, mode="train"),

    _sa("sa_single_token", "hidden", 3, 1, 1, 1, 101,
        "batch 1, one token, hidden 1"),
    _sa("sa_long", "hidden", 16, 24, 2, 33, 102, "33 tokens"),
    _sa("sa_large", "hidden", 48, 64, 4, 17, 103, "larger sizes"),
    _mh("mhsa_single_token", "hidden", 5, 4, 2, False, 1, 1, 201,
        "batch 1, one token"),
    _mh("mhsa_single_token_causal", "hidden", 5, 4, 2, True, 1, 1, 201,
        "batch 1, one token, causal"),
    _mh("mhsa_one_head", "hidden", 7, 6, 1, False, 2, 6, 202, "one head"),
    _mh("mhsa_one_head_causal", "hidden", 7, 6, 1, True, 2, 6, 202,
        "one head, causal"),
    _mh("mhsa_head_size_1", "hidden", 6, 4, 4, False, 2, 5, 203,
        "head_size 1"),
    _mh("mhsa_head_size_1_causal", "hidden", 6, 4, 4, True, 2, 5, 203,
        "head_size 1, causal"),
    _mh("mhsa_long_causal", "hidden", 12, 24, 6, True, 2, 40, 204,
        "40 tokens, causal"),
    _mh("mhsa_large", "hidden", 32, 64, 8, False, 3, 19, 205,
        "larger sizes"),
    _mh("mhsa_large_causal", "hidden", 32, 64, 8, True, 3, 19, 205,
        "larger sizes, causal"),
    _mh("mhsa_dropout", "hidden", 8, 12, 3, False, 2, 16, 206,
        "dropout 0.5 in train mode", dropout=0.5, mode="train"),
    _mh("mhsa_dropout_causal", "hidden", 8, 12, 3, True, 2, 16, 207,
        "dropout 0.3 in train mode, causal", dropout=0.3, mode="train"),
]
