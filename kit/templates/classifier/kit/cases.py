"""The __NAME__ homework's frozen cases: sizes, seeds and sets.

The kit's :class:`kit.generate.case_definition.Case`: ``init`` is the
constructor's arguments, ``arguments`` which of them holds which role
(``input_size`` is x's last size), ``batch`` and ``seq`` the input's
sizes. Every case
discriminates (batch, seq, input_size and num_classes distinct, except
sizes of 1 at the edges). To add a case, append it here and run
``make test-values HOMEWORK=THIS_FOLDER``.
"""
from __future__ import annotations

from kit.generate.case_definition import Case


def _norm(name: str, set_: str, input_size: int, batch: int, seq: int,
          seed: int, description: str) -> Case:
    return Case(name, set_, "Norm", {"input_size": input_size},
                batch, seq, seed, "eval", description,
                arguments={"input": "input_size", "width": "input_size"})


def _cls(name: str, set_: str, input_size: int, num_classes: int,
         batch: int, seq: int, seed: int, description: str) -> Case:
    return Case(name, set_, "Classifier",
                {"input_size": input_size, "num_classes": num_classes},
                batch, seq, seed, "eval", description,
                arguments={"input": "input_size", "width": "num_classes"})


CASES: list[Case] = [
    _norm("norm_small", "public", 6, 2, 5, 41, "small case"),
    _norm("norm_wide", "public", 16, 3, 4, 42, "16 features"),
    _norm("norm_single_token", "hidden", 5, 1, 1, 141, "batch 1, one token"),
    _norm("norm_long", "hidden", 12, 2, 33, 142, "33 tokens"),
    _cls("cls_small", "public", 6, 4, 2, 5, 51, "small case"),
    _cls("cls_many", "public", 8, 10, 3, 4, 52, "ten classes"),
    _cls("cls_single_token", "hidden", 5, 3, 1, 1, 151,
         "batch 1, one token"),
    _cls("cls_long", "hidden", 12, 7, 2, 33, 152, "33 tokens"),
]
