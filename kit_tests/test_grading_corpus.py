"""The grader on the whole catalogue of submission variants (kit/variants/).

Every entry of every group is graded once, by the real grader in one warm
sandbox, and must get what its entry states: the rubric ids it loses
(exactly), each task's score computed from the rubric, the catalogue
mistake its feedback names, the words it must (never) use. Correct styles
must pass every item and take no deduction (a wrong deduction is the worst
bug a grader can have); a mistake must cost its own items and be named;
hostile code must cost only what it touches. Group ``mistakes`` (one entry
per mistake of kit/variants/mistakes.toml) is graded when its file exists.

The quick suite (``make test``) grades the correct styles (a wrong
deduction is the worst bug a grader can have) and the entries its
untabled tests read; every other entry is end to end (``make test-all``,
CI): grading the whole catalogue takes minutes of CPU.
"""
from __future__ import annotations

import pytest

from autograder.report import results as report
from autograder.config import load_mistake_messages
from autograder.grade import GradeResult
from autograder.rubric import load_rubric
from kit import variants
from kit.corpus.grading_batch import grade_batch

VARIANTS = variants.load_all()
RUBRIC = load_rubric()
MISTAKE_ITEMS = variants.mistake_items()   # once: it reads the catalogue
EXPECTED = {key: variants.expect(v, RUBRIC, MISTAKE_ITEMS)
            for key, v in VARIANTS.items()}
BUGS = {key: v.fields["known_bug"] for key, v in VARIANTS.items()
        if v.fields.get("known_bug")}


# The entries a test of this module reads that is not parametrized by one.
USES = {"test_printed_output_is_capped": ["hostile/prints",
                                          "hostile/prints_50mb"],
        "test_deductions_never_go_below_zero": ["diagnoses/skeleton"],
        "test_hidden_details_only_in_hidden_lines": [
            "examples/mask_diagonal"],
        "test_no_work_earns_no_value_or_property_item": ["fidelity/no_work"],
        "test_the_catalogue_covers_every_kind_of_variant": []}
# Graded in the quick suite: the correct styles and what USES names.
QUICK = ({key for key in VARIANTS if key.startswith("styles/")}
         | {key for keys in USES.values() for key in keys})


def entries(keep=lambda key: True) -> list:
    """Keys of the catalogue passing ``keep``; a known grader bug is a
    skip with its reason, an entry outside QUICK is end to end."""
    return [pytest.param(key, marks=pytest.mark.skip(reason=BUGS[key]))
            if key in BUGS else
            key if key in QUICK else pytest.param(key, marks=pytest.mark.e2e)
            for key in VARIANTS if keep(key)]


def _selected(session) -> set[str]:
    """The entries the selected tests of this module read (all of them if
    a test reads every graded entry), so that ``-k`` grades only those."""
    keys: set[str] = set()
    for item in session.items:
        if item.module.__name__ != __name__:
            continue
        callspec = getattr(item, "callspec", None)
        if callspec is not None and "key" in callspec.params:
            keys.add(callspec.params["key"])
        elif item.originalname in USES:
            keys.update(USES[item.originalname])
        else:
            return set(VARIANTS)
    return keys


@pytest.fixture(scope="module")
def graded(request) -> dict[str, GradeResult]:
    """Every entry the selected tests read (but the known bugs) graded
    once, in one warm sandbox."""
    wanted = _selected(request.session)
    keys = [k for k in VARIANTS if k not in BUGS and k in wanted]
    return grade_batch({k: VARIANTS[k].source() for k in keys},
                       {k: VARIANTS[k].fields["timeout"] for k in keys
                        if "timeout" in VARIANTS[k].fields})


def lost(grade: GradeResult) -> set[str]:
    """Ids of the items failed, deductions taken and bonuses not earned."""
    return {c.check.id for t in grade.tasks
            for c in (*t.items, *t.deductions, *t.bonuses)
            if not c.outcome.passed}


@pytest.mark.parametrize("key", entries())
def test_scores_by_task(graded, key):
    grade = graded[key]
    assert not grade.internal_error, grade.internal_error
    scores = {t.task.id: t.score for t in grade.tasks}
    assert scores == EXPECTED[key].scores, report.feedback_markdown(grade)


@pytest.mark.parametrize("key", entries())
def test_items_lost_exactly(graded, key):
    grade = graded[key]
    found = lost(grade)
    expected = EXPECTED[key].lost
    assert found == expected, (
        f"{VARIANTS[key].label}: also lost {sorted(found - expected)}, "
        f"kept {sorted(expected - found)}\n"
        + report.feedback_markdown(grade))


@pytest.mark.parametrize("key", entries(lambda k: EXPECTED[k].mistake))
def test_feedback_names_the_mistake(graded, key):
    grade, mistake = graded[key], EXPECTED[key].mistake
    text = report.feedback_markdown(grade)
    assert mistake in grade.mistakes(), text
    assert f"`{mistake}`" in text
    assert load_mistake_messages()[mistake] in text


@pytest.mark.parametrize("key", entries(lambda k: EXPECTED[k].says
                                        or EXPECTED[k].never))
def test_feedback_words(graded, key):
    text = report.feedback_markdown(graded[key])
    for words in EXPECTED[key].says:
        assert words in text, (words, text)
    for words in EXPECTED[key].never:
        assert words not in text, (words, text)


@pytest.mark.parametrize("key", entries(lambda k: k.startswith("styles/")))
def test_correct_styles_pass_every_item(graded, key):
    grade = graded[key]
    failed = [c.check.id for t in grade.tasks
              for c in (*t.items, *t.deductions) if not c.outcome.passed]
    assert failed == [], report.feedback_markdown(grade)


def test_the_catalogue_covers_every_kind_of_variant():
    groups = {key.split("/")[0] for key in VARIANTS}
    assert {"styles", "diagnoses", "hostile", "fidelity",
            "examples"} <= groups
    # Correct styles lose no item and take no deduction.
    for key in VARIANTS:
        if key.startswith("styles/"):
            assert {i for i in EXPECTED[key].lost
                    if not i.endswith(".bonus")} == set(), key


# --------------------------------------------------------------------------
# What the tables cannot say


@pytest.mark.e2e   # reads every graded entry
def test_an_item_names_a_mistake_only_if_it_explains_every_failure(graded):
    for grade in graded.values():
        for task in grade.tasks:
            for item in task.items:
                assert len(item.outcome.mistakes) <= 1, item.outcome.lines


def test_printed_output_is_capped(graded):
    for key in ("hostile/prints", "hostile/prints_50mb"):
        grade = graded[key]
        assert grade.stdout and len(grade.stdout) < 5000, key


@pytest.mark.e2e   # reads every graded entry
def test_deductions_never_go_below_zero(graded):
    for grade in graded.values():
        assert all(t.score >= 0 for t in grade.tasks), grade.name
    for task in graded["diagnoses/skeleton"].tasks:
        assert task.score == 0
        assert all(d.applied == 0 for d in task.deductions)


def test_hidden_details_only_in_hidden_lines(graded):
    grade = graded["examples/mask_diagonal"]
    task = next(t for t in grade.tasks
                if t.task.id == "multi_head_self_attention")
    item = next(i for i in task.items if i.check.id == "2.2")   # causal
    visible = "\n".join(item.outcome.lines)
    assert "mhsa_long_causal" not in visible      # hidden case name
    assert "40 tokens, causal" not in visible     # nor its description
    assert "hidden cases: " in visible            # only how many passed
    assert any("mhsa_long_causal" in line
               for line in item.outcome.hidden_lines)


def test_no_work_earns_no_value_or_property_item(graded):
    # Zeros everywhere and a stand-in module with GPT-2's attributes and
    # parameter count: only 1.1 (three nn.Linear attributes, built in
    # __init__) may be earned.
    grade = graded["fidelity/no_work"]
    earned = [c.check.id for t in grade.tasks for c in (*t.items, *t.bonuses)
              if c.outcome.points]
    assert earned == ["1.1"], report.feedback_markdown(grade)
