"""One policy for hidden details: before publication a
student sees public results and how many hidden cases passed; which hidden
case failed, its description, shapes, messages and whatever the submission
printed while running it come after publication (Gradescope
``after_published``), in results.json's output as in every test."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from autograder.report import results as report
from autograder.checks.base import Context, Verdict, aggregate
from autograder.config import load_config
from autograder.grade import grade_source, hidden_probe_ids
from autograder.sandbox.protocol import ERROR, ProbeResult


def _case(name: str, set_: str, description: str):
    return SimpleNamespace(name=name, set=set_, description=description)


CHECK = SimpleNamespace(id="1.2", points=3.0)
CTX = Context({})


def test_a_failing_hidden_case_is_only_counted():
    cases = [_case("pub_a", "public", "course-sized"),
             _case("hid_b", "hidden", "batch 1, one token"),
             _case("hid_c", "hidden", "40 tokens, causal")]
    verdicts = [Verdict(True), Verdict(False, "shape [] expected [1, 1, 1]",
                                       "wrong shape"), Verdict(True)]
    outcome = aggregate(CHECK, cases, verdicts, CTX)
    visible = "\n".join(outcome.lines)
    assert "hidden cases: 1 of 2 passed" in visible
    for detail in ("hid_b", "batch 1, one token", "[1, 1, 1]",
                   "wrong shape", "hid_c", "40 tokens"):
        assert detail not in visible
    later = "\n".join(outcome.hidden_lines)
    assert "hid_b" in later and "[1, 1, 1]" in later


def test_a_message_only_hidden_cases_showed_waits_for_publication():
    cases = [_case("hid_b", "hidden", "b"), _case("hid_c", "hidden", "c")]
    same = "forward(x) failed: RuntimeError: size [40, 40] vs [5, 5]"
    outcome = aggregate(CHECK, cases, [Verdict(False, same, "raised"),
                                       Verdict(False, same, "raised")], CTX)
    assert "[40, 40]" not in "\n".join(outcome.lines)
    assert "hidden cases: 0 of 2 passed" in "\n".join(outcome.lines)
    # the unfinished skeleton says nothing about a case: said at once
    todo = "Task 1.2 not implemented yet: compute the scores"
    outcome = aggregate(CHECK, cases, [
        Verdict(False, todo, not_implemented=True),
        Verdict(False, todo, not_implemented=True)], CTX)
    assert todo in "\n".join(outcome.lines)


def _shape(probe) -> list[int]:
    return list(probe.args[0].shape) if probe.args else []


@pytest.fixture(scope="module")
def printed_grade():
    """The reference's verdicts do not matter here: every probe fails and
    prints the name of the probe it ran (as a student's debug print of
    ``x.shape`` would reveal the hidden inputs)."""
    config = load_config()

    def runner(source, filename, probes):
        return [ProbeResult(p.id, ERROR, "ValueError: no", phase="call",
                            exception="ValueError",
                            stdout=f"probe {p.id} x.shape={_shape(p)}\n")
                for p in probes]

    grade = grade_source("x = 1\n", "m.py", config, runner)
    return grade, [c for c in config.cases if c.set == "hidden"]


def test_hidden_probes_are_recognised():
    config = load_config()
    cases = config.cases
    hidden = {c.name for c in cases if c.set == "hidden"}
    from autograder.grade import grading_context, plan_probes
    probes = plan_probes(config, grading_context(config))
    found = hidden_probe_ids(probes, cases)
    assert found and all(p.split(":")[0] in hidden or
                         p.startswith("inspect:") for p in found)
    assert not any(p.split(":")[0] in hidden for p in
                   {p.id for p in probes} - found)


def test_output_printed_during_hidden_cases_waits_for_publication(
        printed_grade):
    grade, hidden = printed_grade
    data = report.results_json(grade)
    visible = data["output"] + json.dumps(
        [t for t in data["tests"] if t["visibility"] != "after_published"])
    for case in hidden:
        assert f"probe {case.name}:" not in visible
        assert case.description not in visible
    assert "probe " in data["output"]             # public printing shown
    assert report.HIDDEN_PRINTED in data["output"]
    later = [t for t in data["tests"]
             if t["visibility"] == "after_published"]
    assert len(later) == 1
    assert any(f"probe {c.name}:" in later[0]["output"] for c in hidden)


def test_staff_feedback_shows_hidden_output_marked(printed_grade):
    grade, hidden = printed_grade
    text = report.feedback_markdown(grade)
    top, _, staff = text.partition("## Hidden cases: details (staff")
    assert staff and any(f"probe {c.name}:" in staff for c in hidden)
    assert not any(f"probe {c.name}:" in top for c in hidden)
