"""Every frozen case discriminates: no coincidental sizes.

A case whose head size equals its number of heads cannot tell
``view(b, t, head_dim, num_heads)`` from the right split; one whose sequence
fills the context cannot tell a mask cut to ``num_tokens`` from one that is
not. The rule, over every case of the manifest that holds values: no two of
its sizes are equal, except sizes of 1 (the edge cases) and what the
structure implies; a case that keeps an external example's sizes (the
course's, the book's) is public and says why in ``same_sizes``; and every
value item of the rubric has a public case with no coincidence at all.
"""
from __future__ import annotations

import json
from itertools import combinations
from pathlib import Path

import pytest

from autograder import homework
from autograder.rubric import load_rubric, select_cases
from autograder.values import load_cases

MANIFEST = json.loads(
        (homework.current().test_values / "manifest.json").read_text())


# The one class whose `d_out` is a head's size, not the output's.
STACKED_HEADS = "MultiHeadAttentionWrapper"


def _head_and_width(record: dict) -> tuple[str, str]:
    """The names (in :func:`sizes`) of a head's size and of the width the
    heads split."""
    if record["class"] == STACKED_HEADS:
        return "d_out", "output"
    return "head", "hidden" if "hidden" in record["init"] else "d_out"


def sizes(record: dict) -> dict[str, int]:
    """The named sizes of a manifest case: batch, seq, every integer
    argument of its constructor (input and output widths, heads, context
    length, and whatever a new class takes), and the head size (or, for
    the stacked heads, the output width) where there are heads."""
    batch, seq, _ = record["tensors"]["x"]
    init = record["init"]
    found = {"batch": batch, "seq": seq}
    found.update({key: value for key, value in init.items()
                  if isinstance(value, int) and not isinstance(value, bool)})
    if "num_heads" in init:
        head, width = _head_and_width(record)
        if record["class"] == STACKED_HEADS:
            found[width] = init["num_heads"] * init[head]
        else:
            found[head] = init[width] // init["num_heads"]
    return found


def implied(record: dict, first: str, second: str) -> bool:
    """Equal by construction, not by coincidence."""
    pair = {first, second}
    found = sizes(record)
    head, width = _head_and_width(record)
    if found.get("num_heads") == 1 and pair == {head, width}:
        return True
    if found.get(head) == 1 and pair == {"num_heads", width}:
        return True
    width_in = "input_size" if "input_size" in record["init"] else "d_in"
    return record.get("inputs") == "identity" and pair == {"seq", width_in}


def coincidences(record: dict) -> list[tuple[str, str, int]]:
    """Pairs of sizes (other than 1) equal by coincidence."""
    found = sizes(record)
    return [(a, b, found[a]) for a, b in combinations(found, 2)
            if found[a] == found[b] != 1 and not implied(record, a, b)]


VALUE_CASES = {name: record for name, record in MANIFEST["cases"].items()
               if "output" in record["tensors"]}


def test_sizes_are_read_from_the_manifest():
    # The rule would pass vacuously if sizes() missed the dimensions.
    record = MANIFEST["cases"]["mhsa_course"]
    assert sizes(record) == {"batch": 3, "seq": 5, "input_size": 7,
                             "hidden": 9, "num_heads": 3, "head": 3}
    assert {(a, b) for a, b, _ in coincidences(record)} == {
        ("batch", "num_heads"), ("batch", "head"), ("num_heads", "head")}
    # A new class's constructor sizes count with no change here.
    new = {"class": "NewAttention", "tensors": {"x": [2, 5, 7]},
           "init": {"d_in": 7, "d_out": 24, "context_length": 11,
                    "num_heads": 6, "num_kv_heads": 6, "dropout": 0.5}}
    assert [(a, b) for a, b, _ in coincidences(new)] == [
        ("num_heads", "num_kv_heads")]
    assert len(VALUE_CASES) >= len(MANIFEST["cases"]) - 1   # all but GPT-2


@pytest.mark.parametrize("name", sorted(VALUE_CASES))
def test_no_coincidental_sizes(name):
    record = VALUE_CASES[name]
    found = coincidences(record)
    if record.get("same_sizes"):
        assert record["set"] == "public", (
            f"{name}: only a public example may keep coincidental sizes")
        assert found, f"{name} declares same_sizes but has none"
        return
    assert not found, (
        f"{name}: sizes {found} coincide; change them in "
        f"kit/generate/cases.py so a mistake that swaps these dimensions "
        f"fails here")


def test_every_value_item_has_a_public_case_with_all_sizes_distinct():
    rubric, cases = load_rubric(), load_cases(sets=("public",))
    for task in rubric.tasks:
        for item in task.items:
            chosen = [c for c in select_cases(item.cases, cases)
                      if c.name in VALUE_CASES] if item.cases else []
            if not chosen:
                continue
            distinct = [c.name for c in chosen
                        if not coincidences(VALUE_CASES[c.name])
                        and not VALUE_CASES[c.name].get("same_sizes")]
            assert distinct, (f"item {item.id}: every public case has "
                              f"coincidental sizes")


def test_items_select_public_and_hidden_cases_and_name_no_hidden_one():
    """The rubric ships to students: it selects cases by filters, never by
    a hidden name; each item sees a public case, and a hidden one when its
    task has any."""
    rubric, cases = load_rubric(), load_cases()
    text = Path(rubric.path).read_text()
    hidden = [c.name for c in cases if c.set == "hidden"]
    assert hidden and not [n for n in hidden if n in text]
    for task in rubric.tasks:
        has_hidden = any(c.task == task.id and c.set == "hidden"
                         for c in cases)
        for item in task.items:
            if not item.cases:
                continue
            sets = {c.set for c in select_cases(item.cases, cases)}
            assert "public" in sets, item.id
            assert ("hidden" in sets) == has_hidden, item.id
