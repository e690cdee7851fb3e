"""No cascade between classes, over the whole variant catalogue.

For every entry of kit/variants/*.toml, each rubric id it loses (items,
deductions, bonuses) must belong to a class its edits touch: a mistake in
one class never costs another class's items. The classes an entry touches
are the top-level definitions whose text differs from the reference's
(an unfinished skeleton's TODO classes differ too); a changed module-level
statement other than an import touches every class. A rubric id's class
is its task's ``class`` in the rubric. ``test_grading_corpus`` proves that
the grader loses exactly what each entry states, so the check here runs on
the entries' statements, without grading.

Known, justified exceptions are data: kit_tests/cascade_exceptions.toml
(entry -> the ids of other classes it loses and why). An exception that no
longer holds (the entry lost nothing else, or something different) fails
too, so the list never goes stale.
"""
from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

from autograder import homework
from autograder.rubric import load_rubric
from kit import variants

EXCEPTIONS_FILE = Path(__file__).with_name("cascade_exceptions.toml")
ALL = "*"   # a module-level change touches every class


def definitions(source: str) -> tuple[dict[str, str], list[str]]:
    """Top-level class/function name -> its source text, and the dumps of
    the other module-level statements but imports (a variant may import
    what its code uses without touching any class)."""
    tree = ast.parse(source)
    lines = source.splitlines()
    # A definition's text runs to the next top-level statement, so that
    # comments after its last statement (shape comments) are its own.
    starts = [n.lineno for n in tree.body] + [len(lines) + 1]
    found, rest = {}, []
    for i, node in enumerate(tree.body):
        if isinstance(node, (ast.ClassDef, ast.FunctionDef,
                             ast.AsyncFunctionDef)):
            first = min([node.lineno, *(d.lineno
                                        for d in node.decorator_list)])
            found[node.name] = "\n".join(
                lines[first - 1:starts[i + 1] - 1]).rstrip()
        elif not isinstance(node, (ast.Import, ast.ImportFrom)):
            rest.append(ast.dump(node))
    return found, rest


def touched(source: str, reference: str) -> set[str]:
    """The names of the reference's top-level definitions that ``source``
    changes or removes; {"*"} when a module-level statement changed (or
    the source does not parse: every class is touched)."""
    try:
        mine, my_rest = definitions(source)
    except SyntaxError:
        return {ALL}
    theirs, their_rest = definitions(reference)
    found = {name for name, text in theirs.items()
             if mine.get(name) != text}
    if my_rest != their_rest:
        found.add(ALL)
    return found


def class_of_ids(rubric) -> dict[str, str]:
    """Rubric id (item, deduction, bonus) -> the class of its task."""
    return {check.id: task.cls for task in rubric.tasks
            for check in (*task.items, *task.deductions, *task.bonuses)}


def other_class_losses(variant: variants.Variant, rubric, reference: str,
                       mistakes: dict[str, list[str]]) -> set[str]:
    """The ids ``variant`` loses that belong to a class it does not
    touch."""
    edited = touched(variant.source(reference), reference)
    if ALL in edited:
        return set()
    owner = class_of_ids(rubric)
    lost = variants.expect(variant, rubric, mistakes).lost
    return {i for i in lost if owner.get(i) not in edited}


def load_exceptions(path: Path = EXCEPTIONS_FILE) -> dict[str, dict]:
    """Entry key -> {"items": [...], "reason": "..."}."""
    table = tomllib.loads(path.read_text())
    for key, entry in table.items():
        assert set(entry) == {"items", "reason"} and entry["reason"], key
    return table


REFERENCE = homework.staff().reference.read_text()
RUBRIC = load_rubric()
MISTAKES = variants.mistake_items()
VARIANTS = variants.load_all()
EXCEPTIONS = load_exceptions()


def test_touched_classes_are_found():
    # An edit inside one class touches that class only; a module-level
    # statement touches all; an added import touches none.
    edit = ("        return context_vec  # [b, num_tokens, d_out]\n",
            "        return x  # [b, num_tokens, d_in]\n")
    one = variants.apply_edits(REFERENCE, [edit], "test")
    assert touched(one, REFERENCE) == {"CausalAttention"}
    assert touched("import math\n" + REFERENCE, REFERENCE) == set()
    assert touched(REFERENCE + "\nX = 1\n", REFERENCE) == {ALL}
    assert touched(REFERENCE, REFERENCE) == set()


def test_a_cross_class_loss_is_found():
    # The check can fail: an entry that claimed to lose 3.2 while editing
    # only CausalAttention is reported.
    variant = variants.find("cascade/heads_name_error")
    fake = variants.Variant(variant.name, variant.group, variant.about,
                            variant.edits, {"loses": ["causal_attention",
                                                      "3.2"]})
    assert other_class_losses(fake, RUBRIC, REFERENCE, MISTAKES) == {"3.2"}


def test_every_exception_names_a_catalogue_entry():
    assert set(EXCEPTIONS) <= set(VARIANTS), \
        sorted(set(EXCEPTIONS) - set(VARIANTS))


@pytest.mark.parametrize("key", sorted(VARIANTS))
def test_no_entry_loses_another_class_item(key):
    variant = VARIANTS[key]
    if variant.fields.get("known_bug"):
        pytest.skip(variant.fields["known_bug"])
    found = other_class_losses(variant, RUBRIC, REFERENCE, MISTAKES)
    allowed = set(EXCEPTIONS.get(key, {}).get("items", []))
    assert found == allowed, (
        f"{variant.label} loses {sorted(found)} of classes its edits do "
        f"not touch (listed exceptions: {sorted(allowed)}): a failure in "
        f"one class must not cost another's items; fix the grader, or list "
        f"a justified exception in {EXCEPTIONS_FILE.name}")
