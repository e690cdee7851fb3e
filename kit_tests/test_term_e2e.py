"""A TA's term end to end, through `python -m autograder grade` and
`term`: a Gradescope export with an on-time, a late (a group of two), an
extended and a missing submission, question scores, two adjustments.
grades.csv and the Gradescope, Canvas and Moodle files carry the totals
the policy implies and parse as their systems document them; a rerun
(resumed, nothing graded again) keeps every decision; a staff file with
a mistake is refused before anything is graded. The homework's questions
carry points here through a profile whose questions.toml declares them
(the kit's own questions are feedback only)."""
from __future__ import annotations

import csv
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from kit.corpus.examples import example_sources
from kit_tests import test_term
from kit_tests.homework_env import homework_env

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "solutions" / "transformer_lm" / "modeling_attention.py"
POINTS = {"Q1": 2, "Q2": 3}
# The autograder's maximum (the rubric's) and the questions' points.
MAXIMUM = f"{test_term.RUBRIC.max_score + sum(POINTS.values()):g}"
METADATA = """\
submission_111:
  :submitters:
  - :name: Ada Lovelace
    :sid: '01815'
    :email: ada@example.edu
  :created_at: 2026-11-20 10:00:00.000000000 -08:00
submission_222:
  :submitters:
  - :name: Alan Turing
    :sid: '1912'
    :email: alan@example.edu
  - :name: Grace Hopper
    :sid: '1906'
    :email: grace@example.edu
  :created_at: 2026-11-22 10:00:00.000000000 -08:00
submission_444:
  :submitters:
  - :name: Edsger Dijkstra
    :sid: '1930'
    :email: edsger@example.edu
  :created_at: 2026-11-22 10:00:00.000000000 -08:00
submission_333:
  :submitters:
  - :name: Barbara Liskov
    :sid: '1939'
    :email: barbara@example.edu
"""
# test_term's policy (due 2026-11-20T23:59-08:00, 15 minutes' grace, 10%
# a day, at most 30%), Edsger's extension instead of bob's
POLICY = test_term.POLICY.replace('"bob"', '"edsger@example.edu"')
SCORES = """\
student,question,points,comment
ada@example.edu,Q1,2,"clear, with the variance argument"
ada@example.edu,Q2,3,
1912,Q1,1,half of it
submission_222,Q2,2.5,
1930,Q1,2,
"""
ADJUSTMENTS = """\
student,item,points,reason
01815,2.2,-1,2.2 copied from the lecture notes (acknowledged)
grace@example.edu,total,0.5,regrade request accepted
"""


def _profile(base: Path) -> Path:
    """A homework profile whose questions carry points: the checkout's
    files, but autograder/questions.toml with ``POINTS``."""
    farm = base / "profile"
    (farm / "autograder").mkdir(parents=True)
    for entry in ROOT.iterdir():
        if entry.name not in ("autograder", ".git"):
            (farm / entry.name).symlink_to(entry)
    for entry in (ROOT / "autograder").iterdir():
        if entry.name != "questions.toml":
            (farm / "autograder" / entry.name).symlink_to(entry)
    text = (ROOT / "autograder" / "questions.toml").read_text()
    scored = ", ".join(f"{q} = {p}" for q, p in POINTS.items())
    (farm / "autograder" / "questions.toml").write_text(
        f"{text}points = {{{scored}}}\n")
    return farm


def _export(base: Path) -> Path:
    folder = base / "export"
    for sub, source in (("submission_111", REFERENCE.read_text()),
                        ("submission_222", example_sources()["no_scale"]),
                        ("submission_444", REFERENCE.read_text())):
        (folder / sub).mkdir(parents=True)
        (folder / sub / "modeling_attention.py").write_text(source)
    (folder / "submission_metadata.yml").write_text(METADATA)
    archive = base / "export.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for path in sorted(folder.rglob("*")):
            zf.write(path, path.relative_to(folder))
    return archive


def _run(env, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autograder", *args],
                          capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=900)


def _csv(path: Path) -> list[list[str]]:
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.reader(handle))


def _dicts(path: Path) -> dict[str, dict[str, str]]:
    rows = _csv(path)
    return {r[0]: dict(zip(rows[0], r)) for r in rows[1:]}


@pytest.fixture(scope="module")
def term(tmp_path_factory):
    base = tmp_path_factory.mktemp("term")
    env = homework_env(_profile(base))
    course = base / "course"
    course.mkdir()
    (course / "policy.toml").write_text(POLICY)
    (course / "scores.csv").write_text(SCORES)
    (course / "adjustments.csv").write_text(ADJUSTMENTS)
    archive = _export(base)
    out = base / "out"
    done = _run(env, "grade", "--out", str(out), "--jobs", "2",
                "--course", str(course), str(archive))
    assert done.returncode == 0, done.stdout + done.stderr
    return base, env, course, archive, out, done.stdout


def _expected(grades: dict[str, dict[str, str]]) -> dict[str, object]:
    ada = float(grades["submission_111"]["score"]) + 2 + 3 - 1
    pair = (float(grades["submission_222"]["score"]) + 1 + 2.5) * 0.8 + 0.5
    return {"submission_111": ada, "submission_222": pair,
            "submission_444": ""}        # Q2 not scored: pending


def test_grades_csv_carries_the_terms_totals(term):
    base, _, _, _, out, stdout = term
    grades = _dicts(out / "grades.csv")
    header = _csv(out / "grades.csv")[0]
    assert header[:4] == ["submission", "submission_id", "name", "email"]
    assert header[header.index("path") + 1:] == [
        "submitted_at", "late_days", "late_penalty", "Q1", "Q2",
        "adjustments", "total", "total_max", "pending"]
    expected = _expected(grades)
    ada, pair, edsger = (grades[n] for n in sorted(expected))
    assert float(ada["score"]) == 17 and float(pair["score"]) < 16
    assert (ada["late_days"], pair["late_days"], edsger["late_days"]) \
        == ("0", "2", "0")                 # Edsger's extension
    for name, total in expected.items():
        assert grades[name]["total"] == ("" if total == "" else
                                         f"{total:g}"), grades[name]
        assert grades[name]["total_max"] == MAXIMUM
    assert edsger["pending"] == "Q2" and edsger["Q2"] == ""
    assert "2 totals" in stdout and \
        "1 pending: submission_444 (Q2)" in stdout   # whom, for what
    final = (out / "submissions" / "submission_111" / "final.md").read_text()
    assert "lecture notes" in final and "variance argument" in final
    # sent to the student, it says whom it is for (the export's names)
    assert final.split("\n")[2] == \
        "Submitted by Ada Lovelace (ada@example.edu)."
    pair_final = (out / "submissions" / "submission_222" / "final.md"
                  ).read_text()
    assert "Submitted by Alan Turing (alan@example.edu), Grace Hopper " \
        "(grace@example.edu)." in pair_final
    # the class report's table shows the term's columns (grades.csv's)
    report = (out / "report.html").read_text()
    assert "title='sort'>total</th>" in report
    assert "title='sort'>pending</th>" in report


def test_every_export_parses_and_carries_the_totals(term):
    _, _, _, _, out, _ = term
    expected = _expected(_dicts(out / "grades.csv"))
    by_sid = {"01815": expected["submission_111"],
              "1912": expected["submission_222"],
              "1906": expected["submission_222"],
              "1930": "", "1939": ""}
    gradescope = _csv(out / "gradescope_scores.csv")
    assert gradescope[0] == ["Name", "SID", "Email", "Score",
                             "Submission ID", "Max Points", "Bonus Policy"]
    assert {r[1]: r[3] for r in gradescope[1:]} == {
        sid: "" if v == "" else f"{v:g}" for sid, v in by_sid.items()}
    assert {r[5] for r in gradescope[1:]} == {MAXIMUM}
    assert all("extra credit" in r[6] for r in gradescope[1:])
    canvas = _csv(out / "canvas_grades.csv")
    assert canvas[0][:5] == ["Student", "ID", "SIS User ID",
                             "SIS Login ID", "Section"]
    assert len(canvas[0]) == 6 and "bonus extra credit" in canvas[0][5]
    assert canvas[1][0] == "Points Possible" and \
        canvas[1][5] == MAXIMUM
    assert {r[2]: r[5] for r in canvas[2:]} == {
        sid: "" if v == "" else f"{v:g}" for sid, v in by_sid.items()}
    moodle = _csv(out / "moodle_grades.csv")
    assert moodle[0] == ["Full name", "Email address", "ID number",
                         "Grade", "Feedback"]
    barbara = next(r for r in moodle if r[1] == "barbara@example.edu")
    assert barbara[3] == "" and "no files" in barbara[4]
    ada = next(r for r in moodle if r[1] == "ada@example.edu")
    assert float(ada[3]) == expected["submission_111"]
    assert "out of 21" in ada[4] and "extra credit" in ada[4]


def test_a_rerun_keeps_every_decision_and_term_applies_edits(term):
    base, env, course, archive, out, _ = term
    before = (out / "grades.csv").read_text()
    again = _run(env, "grade", "--out", str(out), "--jobs", "2",
                 "--course", str(course), str(archive))
    assert again.returncode == 0, again.stderr
    assert "resumed: 3 of 3" in again.stdout
    assert "0 graded and 3 kept into" in again.stdout
    assert (out / "grades.csv").read_text() == before
    # a TA scores Edsger's Q2: `term` applies it without grading
    with open(course / "scores.csv", "a") as handle:
        handle.write("edsger@example.edu,Q2,3,\n")
    done = _run(env, "term", str(out), "--course", str(course))
    assert done.returncode == 0, done.stderr
    edsger = _dicts(out / "grades.csv")["submission_444"]
    assert edsger["pending"] == "" and \
        float(edsger["total"]) == float(edsger["score"]) + 5
    assert _csv(out / "grades.csv")[0].count("total") == 1


def test_a_mistake_in_a_staff_file_grades_nothing(term):
    base, env, course, archive, _, _ = term
    bad = base / "bad-course"
    shutil.copytree(course, bad)
    with open(bad / "adjustments.csv", "a") as handle:
        handle.write("nobody@example.edu,total,1,typo\n")
    out = base / "refused"
    done = _run(env, "grade", "--out", str(out), "--course", str(bad),
                str(archive))
    assert done.returncode == 2
    assert f"{bad / 'adjustments.csv'}:4: unknown student" in done.stderr
    assert not (out / "grades.csv").exists()


def test_a_regrade_into_a_new_folder_keeps_the_decisions(term):
    base, env, course, archive, out, _ = term
    again = base / "regraded"
    done = _run(env, "grade", "--out", str(again), "--jobs", "2",
                "--course", str(course), "--compare", str(out), str(archive))
    assert done.returncode == 0, done.stderr
    new, old = _dicts(again / "grades.csv"), _dicts(out / "grades.csv")
    assert {n: r["total"] for n, r in new.items()} == \
        {n: r["total"] for n, r in old.items()}
    assert (again / "canvas_grades.csv").read_text() == \
        (out / "canvas_grades.csv").read_text()
