"""The feed-forward homework's frozen cases: sizes, seeds and sets.

The kit's one :class:`kit.generate.case_definition.Case`:
``init`` is the constructor's arguments, ``batch`` and ``seq`` the input's
sizes.
Every case discriminates (batch, seq, input_size and hidden distinct,
except sizes of 1 at the edges), so a mistake that swaps two dimensions
cannot pass by coincidence. To add a case, append it here and run
``HOMEWORK=homeworks/ffn make test-values``.
"""
from __future__ import annotations

from kit.generate.case_definition import Case


def _ff(name: str, set_: str, input_size: int, hidden: int, batch: int,
        seq: int, seed: int, description: str) -> Case:
    return Case(name, set_, "FeedForward",
                {"input_size": input_size, "hidden": hidden},
                batch, seq, seed, "eval", description,
                arguments={"input": "input_size", "width": "hidden"})


CASES: list[Case] = [
    _ff("ff_small", "public", 6, 16, 2, 5, 31, "small case"),
    _ff("ff_wide", "public", 8, 32, 3, 4, 32, "hidden 4 x input_size"),
    _ff("ff_single_token", "hidden", 5, 12, 1, 1, 131, "batch 1, one token"),
    _ff("ff_long", "hidden", 12, 48, 2, 33, 132, "33 tokens"),
    _ff("ff_large", "hidden", 64, 96, 3, 17, 133, "larger sizes"),
]
