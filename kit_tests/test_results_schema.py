"""results.json follows Gradescope's format and adds up."""
from __future__ import annotations

import json

import jsonschema
import pytest

from autograder.report import results as report
from autograder.grade import failed_grade
from autograder.rubric import load_rubric
from kit import variants
from kit.corpus.grading_batch import grade_batch

VISIBILITY = ["hidden", "after_due_date", "after_published", "visible"]

SCHEMA = {
    "type": "object",
    "required": ["score", "output", "output_format", "tests"],
    "properties": {
        "score": {"type": "number"},
        "output": {"type": "string"},
        "output_format": {"const": "md"},
        "execution_time": {"type": "number"},
        "stdout_visibility": {"enum": VISIBILITY},
        "extra_data": {"type": "object"},
        "tests": {"type": "array", "minItems": 1, "items": {
            "type": "object",
            "required": ["name", "score", "max_score", "status", "output",
                         "visibility"],
            "properties": {
                "name": {"type": "string", "minLength": 1},
                "score": {"type": "number"},
                "max_score": {"type": "number", "minimum": 0},
                "status": {"enum": ["passed", "failed"]},
                "output": {"type": "string"},
                "output_format": {"const": "md"},
                "visibility": {"enum": VISIBILITY},
                "number": {"type": "string"},
                "tags": {"type": "array", "items": {"type": "string"}},
            },
        }},
    },
}
# name -> entry of the variant catalogue (kit/variants/)
VARIANTS = {"reference": "styles/reference", "skeleton": "diagnoses/skeleton",
            "syntax_error": "examples/syntax_error",
            "mask_diagonal": "examples/mask_diagonal",
            "pep8_violation": "diagnoses/pep8_violation",
            "probs_not_flattened": "diagnoses/probs_not_flattened"}
NAMES = list(VARIANTS)


@pytest.fixture(scope="module")
def results() -> dict[str, dict]:
    rubric = load_rubric()
    graded = grade_batch({name: variants.find(key).source()
                          for name, key in VARIANTS.items()})
    found = {name: json.loads(json.dumps(report.results_json(grade)))
             for name, grade in graded.items()}
    found["internal_error"] = report.results_json(failed_grade(
        "x", "x.py", rubric, internal_error="Traceback: boom"))
    found["not_found"] = report.results_json(failed_grade(
        "x", "x.zip", rubric, error="no modeling_attention.py found"))
    return found


@pytest.mark.parametrize("name", NAMES + ["internal_error", "not_found"])
def test_schema_and_sums(results, name):
    data = results[name]
    jsonschema.validate(data, SCHEMA)
    tests = data["tests"]
    assert data["score"] == pytest.approx(sum(t["score"] for t in tests))
    rubric = load_rubric()
    assert sum(t["max_score"] for t in tests) == rubric.max_score
    # Only the bonus can take a score beyond the maximum; nothing below 0.
    bonus = sum(t["score"] for t in tests if t["name"].startswith("Bonus"))
    assert 0 <= data["score"] <= rubric.max_score + bonus
    assert bonus <= rubric.max_bonus
    for test in tests:
        if test["max_score"] > 0:
            assert 0 <= test["score"] <= test["max_score"]
            assert (test["status"] == "passed") == \
                (test["score"] == test["max_score"])


def test_reference_scores_everything(results):
    rubric = load_rubric()
    assert results["reference"]["score"] == rubric.max_score + \
        rubric.max_bonus


def test_hidden_details_are_after_published(results):
    tests = results["mask_diagonal"]["tests"]
    hidden = [t for t in tests if t["visibility"] == "after_published"]
    assert len(hidden) == 1 and hidden[0]["max_score"] == 0
    assert "mhsa_long_causal" in hidden[0]["output"]
    visible = "\n".join(t["output"] for t in tests if t is not hidden[0])
    assert "mhsa_long_causal" not in visible


def test_internal_error_apologises(results):
    data = results["internal_error"]
    assert data["score"] == 0
    assert "not your fault" in data["output"]
    assert "boom" in data["tests"][0]["output"]


def test_deductions_are_tests_with_negative_scores(results):
    tests = results["pep8_violation"]["tests"]
    deductions = [t for t in tests if t["name"].startswith("Deduction")]
    # One PEP 8 violation in MultiHeadSelfAttention: -1 there, 0 elsewhere.
    assert sorted(t["score"] for t in deductions) == \
        [-1] + [0] * (len(deductions) - 1)
    assert all(t["max_score"] == 0 for t in deductions)
