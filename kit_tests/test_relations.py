"""Numbers named as sizes (autograder/checks/diagnosis/relations.py,
``name_number``): a size, its square root, that root's own root and their
inverses, one named only when few sizes fit."""
from __future__ import annotations

from autograder.checks.diagnosis.relations import name_number

SIZES = {"head_size": 3, "hidden": 12, "seq": 5}


def test_a_scale_rooted_twice_is_named_as_such():
    assert name_number(3 ** 0.25, SIZES) == "sqrt(sqrt(head_size = 3))"
    assert name_number(3 ** -0.25, SIZES, values=False) == \
        "1/sqrt(sqrt(head_size))"
    assert name_number(12 ** 0.5, SIZES) == "sqrt(hidden = 12)"


def test_no_size_or_too_many_sizes_name_nothing():
    assert name_number(1.7, SIZES) is None
    crowded = {"a": 4, "b": 9, "c": 16}
    assert name_number(1 / 6, {"x": 6, "y": 36, "w": 6}) is None
    # A plain root is said before a twice-rooted one: 2 = sqrt(4), not
    # also sqrt(sqrt(16)).
    assert name_number(2.0, crowded) == "sqrt(a = 4)"
    assert name_number(2.0, {"c": 16}) == "sqrt(sqrt(c = 16))"
