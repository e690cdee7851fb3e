"""The grader on a corpus of submissions with known scores.

Correct styles must earn full marks (a wrong deduction is the worst bug a
grader can have); each catalogue mistake must lose exactly its points and
be named in the feedback; hostile code must cost only what it touches.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from autograder import report
from autograder.grade import (GradeResult, grade_source,
                              load_mistake_messages, sandbox_runner)
from autograder.rubric import load_rubric
from autograder.values import load_cases

CORPUS = Path(__file__).resolve().parent / "submissions"
HOSTILE_TIMEOUT = 1.5   # seconds per probe for the hostile entries

# The corpus covers Parts 1-2 (its files define SelfAttention and
# MultiHeadSelfAttention only, so Part 3 tasks score 0 here; Part 3 has its
# own corpus in test_grading_part3.py). A wrong scale, axis or mask costs
# the items that check it, not the dropout point: 2.3b judges dropout
# against the submission's own eval probabilities (leaving out what those
# leave NaN), and a wrong split, merge or mix (a wrong value path) costs
# 2.1-2.3a only.
PARTS_1_2 = ("self_attention", "multi_head_self_attention")

# name -> (total, self_attention, multi_head_self_attention)
EXPECTED = {
    "reference": (11, 5, 6),
    "loop_heads": (11, 5, 6),
    "einsum": (11, 5, 6),
    "bmm_flat_heads": (11, 5, 6),
    "comments_placement": (11, 5, 6),
    "functional_dropout": (11, 5, 6),
    # nanoGPT's names in comments ((B, nh, T, hs), C for hidden), einsum, a
    # 0-dim scale tensor, tril mask; a whole file (Part 3 too), 8 statements.
    "nanogpt_style": (16, 4, 6),
    "sa_five_statements": (10, 4, 6),
    "sa_no_scale": (7, 1, 6),
    "sa_scale_not_sqrt": (7, 1, 6),
    "mhsa_no_scale": (6, 5, 1),
    "scale_hidden": (6, 5, 1),
    "softmax_wrong_axis": (6, 5, 1),
    "mask_diagonal": (9, 5, 4),
    "mask_past": (9, 5, 4),
    "split_no_transpose": (6, 5, 1),
    "merge_no_transpose": (10, 5, 5),
    "no_mix": (10, 5, 5),
    "probs_not_flattened": (7, 5, 2),
    "dropout_on_output": (10, 5, 5),
    "dropout_after_att": (10, 5, 5),
    "pep8_violation": (10, 5, 5),
    # The bonus needs 1.2 and no deduction of Task 1 (rubric.toml).
    "missing_shape_comment": (9, 3, 6),
    "wrong_shape_comment": (10, 5, 5),
    "skeleton": (0, 0, 0),
    "syntax_error": (0, 0, 0),
    "raises_in_forward": (5, 5, 0),
    "hostile_patches_torch": (1, 1, 0),
    "hostile_infinite_loop": (7, 1, 6),
    "hostile_exit_at_import": (0, 0, 0),
    "hostile_prints": (11, 5, 6),
    "hostile_memory_hog": (5, 5, 0),
}

# name -> catalogue mistake the feedback must name
MISTAKES = {
    "sa_no_scale": "no_scale", "sa_scale_not_sqrt": "scale_not_sqrt",
    "mhsa_no_scale": "no_scale", "scale_hidden": "scale_hidden",
    "softmax_wrong_axis": "softmax_wrong_axis",
    "mask_diagonal": "mask_diagonal", "mask_past": "mask_past",
    "split_no_transpose": "split_no_transpose",
    "merge_no_transpose": "merge_no_transpose", "no_mix": "no_mix",
}

# name -> text the feedback must contain (structural diagnoses)
DIAGNOSES = {
    "probs_not_flattened": "probabilities not flattened",
    "dropout_on_output": "probabilities not dropped out",
    "dropout_after_att": "att doesn't follow from the returned",
    "skeleton": "not implemented yet",
    "syntax_error": "SyntaxError",
    "hostile_infinite_loop": "time limit",
    "hostile_exit_at_import": "exited",
    "hostile_memory_hog": "memory",
    "pep8_violation": "E225",
    "missing_shape_comment": "has no shape comment",
    "wrong_shape_comment": "comment claims",
}

CORRECT = [n for n, (total, _, _) in EXPECTED.items() if total >= 10
           and n not in DIAGNOSES and n not in MISTAKES
           and not n.startswith("hostile")]


def test_corpus_is_complete():
    on_disk = {p.stem for p in CORPUS.glob("*.py")}
    assert on_disk == set(EXPECTED)


@pytest.fixture(scope="module")
def graded() -> dict[str, GradeResult]:
    """Every corpus entry graded once, with one shared warm sandbox."""
    from autograder.sandbox import Sandbox
    rubric, cases = load_rubric(), load_cases()
    with Sandbox() as sandbox:
        runner = sandbox_runner(sandbox)

        def one(name: str) -> tuple[str, GradeResult]:
            source = (CORPUS / f"{name}.py").read_text()
            timeout = HOSTILE_TIMEOUT if name.startswith("hostile") else None
            return name, grade_source(source, f"{name}.py", rubric, cases,
                                      runner, name=name, timeout=timeout)

        with ThreadPoolExecutor(2) as pool:
            return dict(pool.map(one, EXPECTED))


@pytest.mark.parametrize("name", list(EXPECTED))
def test_score(graded, name):
    grade = graded[name]
    assert not grade.internal_error, grade.internal_error
    total, sa, mhsa = EXPECTED[name]
    by_task = {t.task.id: t.score for t in grade.tasks}
    assert (grade.score, by_task["self_attention"],
            by_task["multi_head_self_attention"]) == (total, sa, mhsa), \
        report.feedback_markdown(grade)


@pytest.mark.parametrize("name", CORRECT)
def test_correct_styles_pass_every_item(graded, name):
    grade = graded[name]
    failed = [c.check.id for t in grade.tasks if t.task.id in PARTS_1_2
              for c in (*t.items, *t.deductions) if not c.outcome.passed]
    assert failed == [], report.feedback_markdown(grade)


@pytest.mark.parametrize("name", list(MISTAKES))
def test_feedback_names_the_mistake(graded, name):
    grade = graded[name]
    mistake = MISTAKES[name]
    assert mistake in grade.mistakes()
    text = report.feedback_markdown(grade)
    assert f"`{mistake}`" in text
    assert load_mistake_messages()[mistake] in text


@pytest.mark.parametrize("name", list(DIAGNOSES))
def test_feedback_diagnoses(graded, name):
    assert DIAGNOSES[name] in report.feedback_markdown(graded[name])


def test_hostile_prints_are_capped(graded):
    grade = graded["hostile_prints"]
    assert grade.stdout and len(grade.stdout) < 5000


def test_style_deduction_stays_in_its_task(graded):
    grade = graded["pep8_violation"]
    tasks = {t.task.id: t for t in grade.tasks}
    assert [d.applied for d in tasks["self_attention"].deductions] == [0, 0]
    assert [d.applied for d in
            tasks["multi_head_self_attention"].deductions] == [-1, 0]


def test_bonus_needs_a_deduction_free_task(graded):
    # The one bonus rule (rubric.toml): three statements, 1.2 passed, and
    # neither 1.pep8 nor 1.shapes taken. The feedback says which failed.
    task = graded["missing_shape_comment"].tasks[0]
    assert [b.applied for b in task.bonuses] == [0]
    assert "the bonus needs no 1.shapes deduction" in \
        task.bonuses[0].outcome.lines[0]


def test_deductions_never_go_below_zero(graded):
    grade = graded["skeleton"]
    for task in grade.tasks:
        assert task.score == 0
        assert all(d.applied == 0 for d in task.deductions)


def test_hidden_details_only_in_hidden_lines(graded):
    grade = graded["mask_diagonal"]
    item = grade.tasks[1].items[1]        # 2.2, causal
    visible = "\n".join(item.outcome.lines)
    assert "mhsa_long_causal" not in visible      # hidden case name
    assert "40 tokens, causal" in visible         # its description is fine
    assert any("mhsa_long_causal" in line
               for line in item.outcome.hidden_lines)


def test_an_item_blocked_by_a_later_task_says_why():
    # Finished through 2.2, 2.3 still the skeleton's: 2.1's probabilities
    # come back from forward(), which stops at 2.3. The feedback says so.
    root = Path(__file__).resolve().parents[1]
    reference = (root / "solutions/transformer_lm/modeling_attention.py"
                 ).read_text()
    skeleton = (root / "transformer_lm/modeling_attention.py").read_text()
    cut = "        # Task 2.3"
    source = reference[:reference.index(cut)] + skeleton[skeleton.index(cut):]
    grade = grade_source(source, "half.py", load_rubric(), load_cases(),
                         sandbox_runner(), name="half")
    text = report.feedback_markdown(grade)
    scores = {t.task.id: t.score for t in grade.tasks}
    assert scores["self_attention"] == 5
    assert scores["multi_head_self_attention"] == 0
    assert "item 2.1 is checked through the call, which also runs Task 2.3" \
        in text
    assert "item 2.3a is checked" not in text
