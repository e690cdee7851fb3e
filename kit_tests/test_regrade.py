"""Regrade with a diff: ``grade --compare PREVIOUS_OUT``
shows exactly the items a changed tolerance flips, per submission, with the
score before and after and why."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from autograder import homework
from autograder.staff import regrade
from kit.corpus.examples import example_sources

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "solutions" / "transformer_lm" / "modeling_attention.py"
RETURN = "        return probs @ v  # [bs, seq, hidden]\n"


def _grade(out: Path, subs: Path, *extra: str):
    return subprocess.run(
        [sys.executable, "-m", "autograder", "grade", "--out", str(out),
         "--jobs", "2", *extra, *sorted(str(p) for p in subs.iterdir())],
        capture_output=True, text=True, cwd=ROOT, timeout=600)


@pytest.fixture(scope="module")
def regraded(tmp_path_factory):
    """The same three submissions graded at atol 1e-6, then at 1e-5: one
    is off by 3e-6 in SelfAttention only."""
    base = tmp_path_factory.mktemp("regrade")
    subs = base / "subs"
    subs.mkdir()
    reference = REFERENCE.read_text()
    assert reference.count(RETURN) == 1
    (subs / "reference.py").write_text(reference)
    (subs / "nudged.py").write_text(reference.replace(
        RETURN, "        return probs @ v + 3e-6  # [bs, seq, hidden]\n"))
    (subs / "no_scale.py").write_text(example_sources()["no_scale"])
    first = _grade(base / "before", subs)
    assert first.returncode == 0, first.stderr
    loose = base / "rubric.toml"
    text = homework.current().rubric.read_text()
    assert "\natol = 1e-6 " in text
    loose.write_text(text.replace("\natol = 1e-6 ", "\natol = 1e-5 ", 1))
    second = _grade(base / "after", subs, "--rubric", str(loose),
                    "--compare", str(base / "before"))
    assert second.returncode == 0, second.stderr
    return base, second.stdout


def test_only_the_flipped_items_are_listed(regraded):
    base, stdout = regraded
    data = json.loads((base / "after" / "regrade.json").read_text())
    changes = {c["name"]: c for c in data["changes"]}
    assert set(changes) == {"nudged"}            # the others did not move
    nudged = changes["nudged"]
    flipped = {i["number"]: i for i in nudged["items"]}
    # 1.2 passes now; the bonus, which requires 1.2, comes with it
    assert set(flipped) == {"1.2", "1.bonus"}
    assert (flipped["1.2"]["before"], flipped["1.2"]["after"]) == (0, 3)
    assert flipped["1.2"]["passed_before"] is False
    assert flipped["1.2"]["passed_after"] is True
    assert nudged["after"] - nudged["before"] == 4
    assert "nudged: " in stdout and "1.2 0->3" in stdout
    assert "1 of 3 submissions changed" in stdout


def test_regrade_page_says_why(regraded):
    base, _ = regraded
    page = (base / "after" / "regrade.md").read_text()
    assert re.search(r"## nudged: \d+ -> \d+ \(\+4\)", page)
    assert "**1.2**" in page and "(failed -> passed)" in page
    assert "reference" not in page.split("submissions changed.")[1]


def test_regrade_page_starts_with_the_class_summary(regraded):
    base, _ = regraded
    page = (base / "after" / "regrade.md").read_text()
    summary, _, rest = page.partition("## nudged:")
    assert "## Summary" in summary
    # one row per changed item: 1 submission changed, upwards, +3 / +1
    # (markdown-escaped: "1\.2")
    assert re.search(r"\| 1\\?\.2 [^|]*\| 1 \| 1 \| 0 \| \+3 \|", summary)
    assert re.search(r"\| 1\\?\.bonus [^|]*\| 1 \| 1 \| 0 \| \+1 \|",
                     summary)
    assert "Scores moved by: +4 (1 submission)." in summary
    assert "**1.2**" in rest


def test_compare_refuses_its_own_output_folder(regraded, tmp_path):
    base, _ = regraded

    def compare(out: Path, previous: Path) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "autograder", "grade", "--out", str(out),
             "--compare", str(previous), str(REFERENCE)],
            capture_output=True, text=True, cwd=ROOT, timeout=120)

    same = compare(base / "after", base / "after")
    assert same.returncode == 2 and "new folder" in same.stderr
    missing = compare(tmp_path / "x", tmp_path / "nothing")
    assert missing.returncode == 2 and "grades.csv" in missing.stderr


def test_make_grade_passes_compare_on():
    # `make grade COMPARE=OLD` is the staff's way in (dry run: nothing runs)
    done = subprocess.run(
        ["make", "-n", "grade", "COMPARE=old-grades", "SUBMISSIONS=subs",
         f"PY={sys.executable}"], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    line = [x for x in done.stdout.splitlines() if "autograder grade" in x]
    assert line and "--compare old-grades" in line[0]
    plain = subprocess.run(
        ["make", "-n", "grade", "SUBMISSIONS=subs", f"PY={sys.executable}"],
        capture_output=True, text=True, cwd=ROOT)
    assert "--compare" not in plain.stdout


def test_regrade_page_opens_with_the_rubric_diff(regraded):
    # The tolerance the fixture loosened, with the one submission it
    # moved, before anything else; the maximum did not move.
    base, stdout = regraded
    page = (base / "after" / "regrade.md").read_text()
    first = page.split("\n## ")[1]
    assert first.startswith("Rubric\n")
    assert "Maximum: 16 (+1 bonus) (unchanged)." in first
    assert re.search(r"\| grading\\?\.atol \| 1e-06 \| 1e-05 \| every item "
                     r"\| 1 \|", first), first
    assert (base / "before" / regrade.RUBRIC_COPY).read_bytes() == \
        homework.current().rubric.read_bytes()
    assert "rubric settings changed: grading.atol (moved 1)" in stdout
    data = json.loads((base / "after" / "regrade.json").read_text())
    assert data["rubric"]["changes"] == [{
        "key": "grading.atol", "before": 1e-6, "after": 1e-5,
        "scope": "every item", "moved": 1}]


def _rubric_folder(path: Path, text: str) -> Path:
    path.mkdir()
    (path / regrade.RUBRIC_COPY).write_text(text)
    return path


def _earned(name: str, number: str, before: float, after: float,
            passed: tuple[bool, bool]) -> regrade.SubmissionChange:
    change = regrade.SubmissionChange(name, 10, 10 + after - before)
    change.items.append(regrade.ItemChange(number, "", before, after,
                                           *passed, ""))
    return change


def test_each_changed_setting_says_how_many_it_moved(tmp_path):
    # 2.2 from 1 to 2 points and its tolerance: the points moved the
    # three that earn 2.2, the tolerance flipped one verdict, the global
    # timeout none; an added item is one row; the maximum moved.
    text = homework.current().rubric.read_text()
    assert text.count('id = "2.2"\n') == 1
    head, tail = text.split('id = "2.2"\n')
    points = tail.index("points = ")
    end = tail.index("\n", points)
    before = int(tail[points + 9:end])
    new = (head + 'id = "2.2"\n' + tail[:points] +
           f"points = {before + 1}\natol = 1e-4" + tail[end:])
    new = new.replace("\ntimeout = 10.0", "\ntimeout = 12.0", 1)
    new += ('\n[[task]]\nid = "extra"\ntitle = "Extra"\nclass = "Extra"\n'
            '\n[[task.item]]\nid = "9.1"\ntitle = "x"\npoints = 2\n'
            'kind = "module_output"\n')
    old_dir = _rubric_folder(tmp_path / "old", text)
    new_dir = _rubric_folder(tmp_path / "new", new)
    changes = [_earned(f"s{i}", "2.2", before, before + 1, (True, True))
               for i in range(3)]
    changes.append(_earned("flip", "2.2", 0, before + 1, (False, True)))
    diff = regrade.rubric_diff(old_dir, new_dir, changes)
    found = {c.key: (c.before, c.after, c.scope, c.moved)
             for c in diff.changes}
    assert found == {
        "2.2.points": (before, before + 1, "item 2.2", 3),
        "2.2.atol": (None, 1e-4, "item 2.2", 1),
        "grading.timeout": (10.0, 12.0, "every item", 1),
        "task extra": (None, "present", "task extra", 0),
        "9.1": (None, "present", "item 9.1", 0)}
    assert diff.max_after == diff.max_before + 1 + 2
    lines = "\n".join(regrade.rubric_lines(diff))
    assert f"Maximum: {diff.max_before:g} (+1 bonus) -> " \
           f"{diff.max_after:g} (+1 bonus)." in lines
    assert re.search(r"\| 9\\?\.1 \| absent \| present \| "
                     r"item 9\\?\.1 \| 0 \|", lines), lines


def test_an_unchanged_rubric_and_a_folder_without_one(tmp_path):
    text = homework.current().rubric.read_text()
    same = regrade.rubric_diff(_rubric_folder(tmp_path / "a", text),
                               _rubric_folder(tmp_path / "b", text), [])
    assert same.changes == [] and same.max_before == same.max_after
    assert "No rubric setting changed." in regrade.rubric_lines(same)
    (tmp_path / "older").mkdir()
    old = regrade.rubric_diff(tmp_path / "older", tmp_path / "b", [])
    assert "older keeps no rubric.toml" in old.unknown
    lines = regrade.rubric_lines(old)
    assert any(line.startswith("Settings not compared: older keeps no")
               for line in lines)
    assert "Maximum: unknown -> 16 (+1 bonus)." in lines
