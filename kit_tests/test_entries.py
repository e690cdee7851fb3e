"""What a kind reads of the rubric (autograder/checks/entries.py): a
case filter selects by the case's fields and its constructor arguments,
a list meaning any of its items; an argument the case lacks matches
nothing."""
from __future__ import annotations

import pytest

from autograder.checks.entries import select_cases
from autograder.config import load_config


@pytest.fixture(scope="module")
def cases():
    return load_config().cases


def test_a_field_filter_selects_exactly_the_matching_cases(cases):
    hidden = select_cases({"set": "hidden"}, cases)
    assert hidden and all(c.set == "hidden" for c in hidden)
    assert len(hidden) == sum(c.set == "hidden" for c in cases)


def test_a_list_means_any_of_its_items(cases):
    names = [cases[0].name, cases[-1].name]
    assert [c.name for c in select_cases({"name": names}, cases)] == \
        [c.name for c in cases if c.name in names]


def test_filters_are_all_required(cases):
    first = cases[0]
    both = select_cases({"name": first.name, "set": first.set}, cases)
    assert [c.name for c in both] == [first.name]
    other = "hidden" if first.set != "hidden" else "public"
    assert select_cases({"name": first.name, "set": other}, cases) == []


def test_a_constructor_argument_filter_reads_init(cases):
    case = next(c for c in cases if c.init)
    key, value = next(iter(case.init.items()))
    chosen = select_cases({key: value}, cases)
    assert case in chosen
    assert all(c.init.get(key) == value for c in chosen)
    assert select_cases({"no_such_argument": value}, cases) == []
