"""The term around the grades (autograder/term/): the course folder read
whole and refused whole (file, line and fix), lateness, totals that stay
pending rather than 0, grades.csv's appended columns, final.md, the
gradebook exports and a kill mid-write. No grading here: a graded folder
is written by hand (kit_tests/test_term_e2e.py grades a real term)."""
from __future__ import annotations

import csv
import os
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from autograder.rubric import load_rubric
from autograder.report import results as report
from autograder.term import outputs
from autograder.term.course import Roster, load_course
from autograder.term.files import StaffFileError
from autograder.term.policy import Policy
from autograder.term.totals import final
from autograder.text import csvsafe

ROOT = Path(__file__).resolve().parents[1]
RUBRIC = load_rubric()
QUESTIONS = {"Q1": 2.0, "Q2": 3.0, "Q3": 0.0}
PST = timezone(timedelta(hours=-8))
DUE = datetime(2026, 11, 20, 23, 59, tzinfo=PST)
POLICY = """\
[deadline]
due = 2026-11-20T23:59:00-08:00
grace_minutes = 15

[late]
percent_per_day = 10
cap_percent = 30

[extensions]
"bob" = 2026-11-23T23:59:00-08:00
"""


def _course(folder: Path, **files: str):
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name.replace("_csv", ".csv").replace("_toml", ".toml")
         ).write_text(text)
    return load_course(folder, RUBRIC, Roster(["ada", "bob", "cy"], {
        "ada": ["ada@example.edu", "1815"]}), QUESTIONS)


def test_lateness_counts_started_days_after_the_grace_and_caps():
    policy = Policy(DUE, timedelta(minutes=15), 10.0, 30.0)
    assert policy.lateness(DUE + timedelta(minutes=14)) == (0, 0.0)
    assert policy.lateness(DUE + timedelta(minutes=16)) == (1, 10.0)
    assert policy.lateness(DUE + timedelta(days=1, seconds=1)) == (2, 20.0)
    assert policy.lateness(DUE + timedelta(days=9)) == (9, 30.0)
    # another zone, the same instant: on time
    assert policy.lateness(datetime(2026, 11, 21, 7, 59,
                                    tzinfo=timezone.utc)) == (0, 0.0)


@pytest.mark.parametrize("name, text, where, says", [
    ("policy_toml", "[deadline]\ndue = 2026-11-20T23:59:00\n", ":2",
     "no time zone"),
    ("policy_toml", "[deadline]\ndue = 2026-11-20T23:59:00Z\n[late]\n"
     "cap_percent = 10\ncap = 3\n", ":5", "unknown key 'cap'"),
    ("scores_csv", "student,question,points,comment\nada,Q1,1,ok\n"
     "nobody,Q1,1,\n", ":3", "unknown student 'nobody'"),
    ("scores_csv", "student,question,points,comment\nada,Q9,1,\n", ":2",
     "unknown question 'Q9'"),
    ("scores_csv", "student,question,points,comment\nada,Q2,4,\n", ":2",
     "4 points on Q2, worth 3"),
    ("scores_csv", "student,question,points,comment\nada,Q3,0,\n", ":2",
     "Q3 has no points"),
    ("scores_csv", "student,question,points,comment\nada,Q1,1,\n"
     "ada@example.edu,Q1,2,\n", ":3", "already marked on Q1"),
    ("adjustments_csv", "student,item,points,reason\nbob,2.2,1,regrade\n"
     "bob,2.2,1,again\n", ":3", "a second row for bob and 2.2"),
    ("adjustments_csv", "student,item,points,reason\nbob,2.2,9,x\n", ":2",
     "worth"),
    ("adjustments_csv", "student,item,points,reason\nbob,total,1,\n", ":2",
     "no reason"),
    ("submitted_csv", "student,submitted_at\ncy,2026-11-20 10:00\n", ":2",
     "no time zone"),
    ("scores_csv", "student,points\nada,1\n", ":1", "the header"),
])
def test_a_bad_staff_file_is_refused_whole_with_line_and_fix(
        tmp_path, name, text, where, says):
    good = "student,question,points,comment\ncy,Q1,2,fine\n"
    files = {"scores_csv": good, name: text}
    with pytest.raises(StaffFileError) as error:
        _course(tmp_path / "course", **files)
    message = str(error.value)
    file = name.replace("_csv", ".csv").replace("_toml", ".toml")
    assert f"{tmp_path / 'course' / file}{where}: " in message, message
    assert says in message and "refused whole" in message, message


def test_every_problem_is_listed_at_once(tmp_path):
    with pytest.raises(StaffFileError) as error:
        _course(tmp_path / "c", scores_csv="student,question,points\n"
                "x,Q1,1\nada,Q1,9\n", policy_toml="[deadline]\ndue = "
                "2026-11-20\n")
    assert len(error.value.problems) == 3, error.value.problems


def _graded(out: Path, rows: list[list[object]]) -> None:
    tasks = [t.id for t in RUBRIC.tasks]
    csvsafe.write_rows(out / "grades.csv", [
        ["submission", "score", "max_score", *tasks, "path"],
        *([name, score, RUBRIC.max_score, *([0] * len(tasks)), f"/x/{name}"]
          for name, score in rows)])
    for name, _ in rows:
        (out / "submissions" / name).mkdir(parents=True)


def test_totals_keep_columns_append_the_term_and_stay_pending(tmp_path):
    course = _course(
        tmp_path / "course", policy_toml=POLICY,
        scores_csv="student,question,points,comment\nada,Q1,2,clear\n"
                   "ada,Q2,1.5,half\nbob,Q1,1,\nbob,Q2,3,\n",
        adjustments_csv="student,item,points,reason\n"
                        "1815,2.2,1,regrade request accepted\n"
                        "bob,total,-2,late-policy breach\n",
        submitted_csv="student,submitted_at\n"
                      "ada,2026-11-22T10:00:00-08:00\n"
                      "bob,2026-11-22T10:00:00-08:00\n")
    out = tmp_path / "out"
    _graded(out, [("ada", 14), ("bob", 16), ("cy", "")])
    before = csvsafe.read_rows(out / "grades.csv")
    finals = outputs.apply(out, course, RUBRIC.max_score,
                           RUBRIC.bonus_policy)
    header, *rows = csvsafe.read_rows(out / "grades.csv")
    assert header[:len(before[0])] == before[0]
    assert header[len(before[0]):] == outputs.term_columns(course)
    got = {r[0]: dict(zip(header, r)) for r in rows}
    # ada: 14 + 2 + 1.5 + 1 (item) = 18.5, 2 days late: -20% = 3.7
    assert got["ada"]["late_days"] == "2"
    assert float(got["ada"]["late_penalty"]) == pytest.approx(3.7)
    assert float(got["ada"]["total"]) == pytest.approx(14.8)
    # The autograder's maximum (the rubric's) and the questions' 2 + 3
    maximum = f"{RUBRIC.max_score + 5:g}"
    assert got["ada"]["total_max"] == maximum
    # bob: extended, on time: 16 + 1 + 3 - 2
    assert (got["bob"]["late_days"], got["bob"]["total"]) == ("0", "18")
    # cy: grader error, no scores, no time: pending, never 0
    assert got["cy"]["total"] == "" and got["cy"]["Q1"] == ""
    assert got["cy"]["pending"] == "grader error; Q1; Q2; submission time"
    assert finals["cy"].total is None
    page = (out / "submissions" / "ada" / "final.md").read_text()
    assert f"**Total: 14.8 / {maximum}**" in page
    assert "regrade request" in page
    assert "2 day(s) late" in page and "| Q2 | 1.5 / 3 | half |" in page
    assert "pending" in (out / "submissions" / "cy" / "final.md").read_text()


def test_capped_bonus_never_passes_the_maximum(tmp_path):
    course = _course(tmp_path / "c", scores_csv=(
        "student,question,points\nada,Q1,2\nada,Q2,3\n"))
    assert final("ada", 17, course, 16, "capped").total == 21
    assert final("ada", 17, course, 16, "extra_credit").total == 22


def test_no_course_leaves_grades_csv_as_it_was(tmp_path):
    course = load_course(tmp_path / "none", RUBRIC, Roster(["ada"]),
                         {"Q1": 0.0})
    out = tmp_path / "out"
    _graded(out, [("ada", 3)])
    before = (out / "grades.csv").read_text()
    assert not course.active
    assert outputs.apply(out, course, 16, "capped") == {}
    assert (out / "grades.csv").read_text() == before


def test_the_table_shows_no_score_beside_a_grader_error():
    rows = [{"name": "broken", "score": 0.0, "max_score": 16.0,
             "tasks": {"t": 0.0}, "note": report.GRADER_ERROR},
            {"name": "fine", "score": 0.0, "max_score": 16.0,
             "tasks": {"t": 0.0}, "note": ""}]
    table = report.summary_table(rows, ["t"]).splitlines()
    assert "-/16" in table[2] and "0/16" not in table[2]
    assert "0/16" in table[3]


def test_a_kill_mid_write_leaves_the_grades_and_the_course_whole(tmp_path):
    course = tmp_path / "course"
    course.mkdir()
    (course / "scores.csv").write_text("student,question,points\nada,Q1,2\n")
    staff = (course / "scores.csv").read_bytes()
    out = tmp_path / "out"
    _graded(out, [("ada", 3)])
    before = (out / "grades.csv").read_bytes()
    script = (
        "from pathlib import Path; from autograder.rubric import load_rubric;"
        "from autograder.term import outputs;"
        "from autograder.term.course import Roster, load_course;"
        f"c = load_course(Path({str(course)!r}), load_rubric(), "
        f"Roster(['ada']), {{'Q1': 2.0}});"
        f"outputs.apply(Path({str(out)!r}), c, 16, 'capped')")
    env = {**os.environ, "PYTHONPATH": str(ROOT),
           "AUTOGRADER_TEST_KILL_AT_WRITE": "grades.csv:1"}
    done = subprocess.run([sys.executable, "-c", script], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == -9, done.stderr
    assert (out / "grades.csv").read_bytes() == before
    assert (course / "scores.csv").read_bytes() == staff
    env.pop("AUTOGRADER_TEST_KILL_AT_WRITE")
    subprocess.run([sys.executable, "-c", script], env=env, check=True,
                   timeout=120)
    row = csvsafe.read_dicts(out / "grades.csv")[1][0]
    assert row["total"] == "5" and row["Q1"] == "2"


def test_exports_parse_in_their_documented_formats(tmp_path):
    from autograder.staff import lms_exports
    from autograder.staff.gradescope_export import Export, Submitter
    out = tmp_path / "out"
    _graded(out, [("submission_1", 17), ("submission_2", "")])
    export = Export(tmp_path, [], {
        "submission_1": [Submitter("Ada L", "0815", "ada@x.edu")],
        "submission_2": [Submitter("=cmd", "2", "b@x.edu")],
        "submission_3": [Submitter("Cy", "3", "cy@x.edu")]})
    line = lms_exports.write_all(out, export, 16, "capped", "hw", {})
    assert "3 students" in line and "2 without a grade" in line
    # Ada's 17 of 16: Moodle refuses such a file unless its site allows it.
    assert "warning: 1 of the grades above the maximum (16): Moodle's " \
        "import refuses the whole of moodle_grades.csv" in line

    def rows(name):
        with open(out / name, newline="") as handle:
            return list(csv.reader(handle))
    gradescope = rows("gradescope_scores.csv")
    assert gradescope[0][:5] == ["Name", "SID", "Email", "Score",
                                 "Submission ID"]
    assert gradescope[1][:4] == ["'=cmd", "2", "b@x.edu", ""]
    assert gradescope[2][:4] == ["Ada L", "0815", "ada@x.edu", "17"]
    assert gradescope[2][5:] == ["16", "capped: a total never passes the "
                                       "maximum"]
    canvas = rows("canvas_grades.csv")
    assert canvas[0][:5] == ["Student", "ID", "SIS User ID", "SIS Login ID",
                             "Section"]
    assert "out of 16" in canvas[0][5] and "bonus capped" in canvas[0][5]
    assert canvas[1] == ["Points Possible", "", "", "", "", "16"]
    assert ["Ada L", "", "0815", "", "", "17"] in canvas
    moodle = rows("moodle_grades.csv")
    assert moodle[0] == ["Full name", "Email address", "ID number", "Grade",
                         "Feedback"]
    cy = next(r for r in moodle if r[0] == "Cy")
    assert cy[3] == "" and "no files" in cy[4]
    assert "a new Canvas assignment" in line and "canvas_column" in line
    # The course names its Canvas assignment: that column is filled.
    line = lms_exports.write_all(out, export, 16, "capped", "hw", {},
                                 "Homework 3 (87568490)")
    assert rows("canvas_grades.csv")[0][5] == "Homework 3 (87568490)"
    assert "Canvas column 'Homework 3 (87568490)'" in line
    assert "warning" not in lms_exports.write_all(out, export, 17, "capped",
                                                  "hw", {})


@pytest.mark.parametrize("value, kept", [
    ('"Homework 3 (87568490)"', "Homework 3 (87568490)"),
    ('"  Quiz 1 (12)  "', "Quiz 1 (12)"), (None, "")])
def test_the_policy_names_the_canvas_column(tmp_path, value, kept):
    from autograder.term.policy import load_policy
    text = POLICY + (f"\n[exports]\ncanvas_column = {value}\n"
                     if value else "")
    (tmp_path / "policy.toml").write_text(text)
    assert load_policy(tmp_path / "policy.toml").canvas_column == kept


@pytest.mark.parametrize("value", ['""" two\nlines"""', "3", '"  "',
                                   '"' + "x" * 300 + '"'])
def test_a_bad_canvas_column_names_its_line_and_the_fix(tmp_path, value):
    from autograder.term.files import StaffFileError
    from autograder.term.policy import load_policy
    (tmp_path / "policy.toml").write_text(
        POLICY + f"\n[exports]\ncanvas_column = {value}\n")
    with pytest.raises(StaffFileError) as caught:
        load_policy(tmp_path / "policy.toml")
    assert "canvas_column" in str(caught.value) and \
        "Homework 3 (87568490)" in str(caught.value)


def _results(score: float) -> dict:
    return {"score": score, "tests": [{"name": "1.1", "score": score,
                                       "max_score": 16.0}]}


def test_gradescope_applies_the_students_own_due_date(tmp_path):
    from autograder.term import results_policy
    from autograder.term.policy import load_policy
    (tmp_path / "policy.toml").write_text(POLICY)
    policy = load_policy(tmp_path / "policy.toml")
    meta = tmp_path / "submission_metadata.json"
    meta.write_text(
        '{"created_at": "2026-11-22T10:00:00.000000-08:00", "assignment": '
        '{"due_date": "2026-11-20T23:59:00.000000-08:00"}, "users": [{"name":'
        ' "A", "assignment": {"due_date": "2026-11-20T23:59:00-08:00"}}]}')
    late = results_policy.adjust(_results(15), meta, policy, 16,
                                 "extra_credit")
    assert late["score"] == 12 and late["tests"][-1]["score"] == -3
    assert "2 day(s) late" in late["tests"][-1]["output"]
    # a group: one member's extension (Gradescope's own) is the group's
    meta.write_text(meta.read_text().replace(
        '"users": [', '"users": [{"assignment": {"due_date": '
        '"2026-11-23T00:00:00Z"}}, '))
    on_time = results_policy.adjust(_results(15), meta, policy, 16,
                                    "extra_credit")
    assert on_time["score"] == 15 and "On time" in \
        on_time["tests"][-1]["output"]
    meta.unlink()     # no time: no penalty, and it says so
    unknown = results_policy.adjust(_results(15), meta, policy, 16,
                                    "extra_credit")
    assert unknown["score"] == 15
    assert "could not be read" in unknown["tests"][-1]["output"]


def test_gradescope_caps_a_bonus_as_a_test_of_its_own():
    from autograder.term import results_policy
    capped = results_policy.adjust(_results(17), Path("/nonexistent"),
                                   None, 16, "capped")
    assert capped["score"] == 16
    assert capped["tests"][-1]["name"].startswith("Bonus above")
    kept = results_policy.adjust(_results(17), Path("/nonexistent"),
                                 None, 16, "extra_credit")
    assert kept["score"] == 17 and len(kept["tests"]) == 1


def test_the_autograder_zip_ships_the_policy_without_extensions(tmp_path):
    from kit.release.gradescope import ship_policy
    from autograder.term.policy import load_policy
    (tmp_path / "course").mkdir()
    (tmp_path / "course" / "policy.toml").write_text(POLICY)
    ship_policy(tmp_path, tmp_path / "zip")
    shipped = tmp_path / "zip" / "course" / "policy.toml"
    assert "bob" not in shipped.read_text()
    again = load_policy(shipped)
    assert (again.due, again.grace, again.percent_per_day,
            again.cap_percent) == (DUE, timedelta(minutes=15), 10, 30)
    assert not again.extensions


def test_without_a_deadline_the_late_columns_are_blank(tmp_path):
    course = _course(tmp_path / "c", scores_csv=(
        "student,question,points\nada,Q1,2\nada,Q2,3\n"))
    out = tmp_path / "out"
    _graded(out, [("ada", 10)])
    outputs.apply(out, course, 16, "extra_credit")
    row = csvsafe.read_dicts(out / "grades.csv")[1][0]
    assert (row["submitted_at"], row["late_days"], row["late_penalty"]) \
        == ("", "", "")
    assert row["total"] == "15" and row["pending"] == ""
    assert "late" not in (out / "submissions" / "ada" / "final.md"
                          ).read_text()


def test_no_upload_file_outlives_the_export_it_came_from(tmp_path):
    # OUT graded from an export, then from a local folder: the old upload
    # files would be plausible wrong grades
    from autograder import graded_folder
    stale = ["export.json", "gradescope_scores.csv", "canvas_grades.csv",
             "moodle_grades.csv"]
    for name in stale:
        (tmp_path / name).write_text("old\n")
    (tmp_path / "grades.csv").write_text("submission,score\n")
    graded_folder._write_exports(tmp_path, None, None, {}, [])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["grades.csv"]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_for_a_staff_file_is_refused_at_once(tmp_path):
    folder = tmp_path / "course"
    folder.mkdir()
    os.mkfifo(folder / "scores.csv")   # nothing will ever write to it
    with pytest.raises(StaffFileError) as error:
        _course(folder)
    assert "scores.csv" in str(error.value) and "FIFO" in str(error.value)
    # The control: a link to a real file is read (a course repository's).
    (folder / "scores.csv").unlink()
    real = tmp_path / "scores.csv"
    real.write_text("student,question,points,comment\nada,Q1,2,ok\n")
    (folder / "scores.csv").symlink_to(real)
    _course(folder)


def _item_scores(out: Path, name: str, items: dict[str, float]) -> None:
    report.write_json({"tests": [{"number": k, "score": v}
                                 for k, v in items.items()]},
                      out / "submissions" / name / "results.json")


def test_an_adjustment_past_its_items_range_is_refused_whole(tmp_path):
    # A regrade gives the points the item did not: +1 on a full item (or
    # a deduction waived twice over) would pass its maximum, and is
    # refused with its line before any total is written.
    # (the rubric's own points, whatever a course gives its items)
    worth = {c.id: abs(c.points) for c in RUBRIC.checks()}
    course = _course(
        tmp_path / "course",
        adjustments_csv="student,item,points,reason\n"
                        "ada,2.2,1,regrade\nbob,2.pep8,1,waived\n"
                        f"cy,1.2,{worth['1.2']:g},regrade\n")
    out = tmp_path / "out"
    _graded(out, [("ada", 15), ("bob", 15), ("cy", 14)])
    _item_scores(out, "ada", {"2.2": worth["2.2"]})   # full: no room
    _item_scores(out, "bob", {"2.pep8": -1.0})  # a deduction taken: room
    _item_scores(out, "cy", {"1.2": worth["1.2"] - 1})   # room 1
    with pytest.raises(StaffFileError) as refused:
        outputs.apply(out, course, RUBRIC.max_score, RUBRIC.bonus_policy)
    problems = refused.value.problems
    assert len(problems) == 2, problems
    assert problems[0].endswith(
        f"adjustments.csv:2: +1 on item 2.2: ada has {worth['2.2']:g}, its "
        f"limit already: remove the row (or adjust total)")
    assert problems[1].endswith(
        f"adjustments.csv:4: +{worth['1.2']:g} on item 1.2 takes cy's "
        f"{worth['1.2'] - 1:g} to {2 * worth['1.2'] - 1:g}, outside 0 to "
        f"{worth['1.2']:g}: write +1 at most (or adjust total)")
    assert not (out / "submissions" / "bob" / outputs.FINAL_NAME).exists()
