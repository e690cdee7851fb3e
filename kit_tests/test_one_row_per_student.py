"""One row per student, always: only what staff name alone on the command
line can be a Gradescope export (a submission zip holding
``submission_metadata.yml`` and ``submission_<n>/`` folders once replaced
the batch's rows with the attacker's fakes); names that collide once
cleaned get distinct names and a warning, the clean name going to the file
that already had it (``bob!.py`` once took ``bob``'s row); the metadata is
read with bounds (an alias bomb once killed the batch)."""
from __future__ import annotations

import csv
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from autograder.rubric import load_rubric
from autograder.staff import gradescope_export as gse
from autograder.submission.locate import submission_names
from kit_tests.reference_source import FULL_REFERENCE

ROOT = Path(__file__).resolve().parents[1]
FAKE_METADATA = """\
submission_1:
  :submitters:
  - :name: alice
submission_2:
  :submitters:
  - :name: carol
"""
BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{c}: &{c} [{', '.join(['*' + p] * 10)}]\n"
    for p, c in zip("abcdefgh", "bcdefghi")) + """\
submission_1:
  :submitters:
  - :name: *i
"""


def _fake_export(path: Path) -> None:
    """A student's zip shaped as an export: fakes under others' names."""
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("submission_metadata.yml", FAKE_METADATA)
        for n in (1, 2):
            zf.writestr(f"submission_{n}/modeling_attention.py", "x = 1\n")
        zf.writestr("modeling_attention.py", FULL_REFERENCE)


def test_a_lone_export_is_one_and_a_lookalike_among_others_is_not(tmp_path):
    fake = tmp_path / "mallory.zip"
    _fake_export(fake)
    honest = tmp_path / "alice.py"
    honest.write_text(FULL_REFERENCE)
    assert gse.find_export([fake]) == fake            # named alone by staff
    assert gse.find_export([honest, fake]) is None    # one submission
    assert gse.lookalikes([honest, fake]) == [fake]
    folder = tmp_path / "export"
    (folder / "submission_1").mkdir(parents=True)
    (folder / gse.METADATA).write_text(FAKE_METADATA)
    glob = sorted(folder.iterdir())
    assert gse.find_export(glob) == folder            # DIR/* as make globs
    with pytest.raises(gse.ExportError, match="grade a Gradescope export "
                       "alone"):
        gse.find_export([*glob, honest])


def test_names_that_collide_once_cleaned_are_distinct_and_warned():
    for order in ([Path("bob!.py"), Path("bob.py")],
                  [Path("bob.py"), Path("bob!.py")]):
        names, warnings = submission_names(order)
        by_file = dict(zip((p.name for p in order), names))
        assert by_file == {"bob.py": "bob", "bob!.py": "bob-2"}
        assert len(warnings) == 1 and "bob!.py" in warnings[0]
        assert "graded as bob-2" in warnings[0]
    # Control: distinct names change nothing and warn nothing.
    assert submission_names([Path("ann.py"), Path("bob.py")]) == (
        ["ann", "bob"], [])


def test_the_metadata_is_read_with_bounds(tmp_path):
    bomb = tmp_path / gse.METADATA
    bomb.write_text(BOMB)
    with pytest.raises(gse.ExportError, match="aliases"):
        gse.read_metadata(bomb)
    # Control: an export as Gradescope writes it, and a non-scalar name.
    plain = tmp_path / "plain.yml"
    plain.write_text(FAKE_METADATA.replace(":name: carol",
                                           ":name: [carol, carol]"))
    found = gse.read_metadata(plain)
    assert found["submission_1"][0].name == "alice"
    assert found["submission_2"][0].name == ""


@pytest.mark.e2e   # the CLI in its own process (make test-all)
def test_a_fake_export_in_a_batch_changes_no_other_row(tmp_path):
    subs = tmp_path / "subs"
    subs.mkdir()
    for name in ("alice", "carol", "bob"):
        (subs / f"{name}.py").write_text(FULL_REFERENCE)
    (subs / "bob!.py").write_text("x = 1\n")
    _fake_export(subs / "mallory.zip")
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "autograder", "grade", "--out", str(out),
         "--jobs", "2", "--public-only", *sorted(map(str, subs.iterdir()))],
        capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    with open(out / "grades.csv", newline="") as handle:
        table = list(csv.DictReader(handle))
    rows = {r["submission"]: float(r["score"]) for r in table}
    # each row names the file it came from, the renamed one too
    assert {r["submission"]: r["path"] for r in table}["bob-2"] == str(
        subs / "bob!.py")
    full = load_rubric().max_score + load_rubric().max_bonus
    assert set(rows) == {"alice", "carol", "bob", "bob-2", "mallory"}
    assert rows["alice"] == rows["carol"] == rows["bob"] == full
    assert rows["bob-2"] == 0
    assert "graded as one submission" in done.stderr
    assert "graded as bob-2" in done.stderr


def test_an_exports_paths_name_its_folders_and_stay_text(tmp_path):
    """grades.csv's path column names each folder in the export as given,
    the export's annotation keeps it text (a folder ``1e5`` is no number)
    after the names it inserts, and the class report reads the file."""
    from autograder.report import results
    folder = tmp_path / "x"
    (folder / "submission_1").mkdir(parents=True)
    (folder / gse.METADATA).write_text(FAKE_METADATA)
    opened = gse.open_export(folder, tmp_path)
    assert opened.given == [str(folder / "submission_1")]
    results.write_grades_csv(
        [{"name": "submission_1", "score": 2.0, "max_score": 2.0,
          "tasks": {}, "note": ""}], [],
        tmp_path / "grades.csv", {"submission_1": "1e5"})
    gse.annotate(tmp_path, gse.Export(folder, [], opened.submitters))
    with open(tmp_path / "grades.csv", newline="") as handle:
        rows = list(csv.reader(handle))
    assert rows == [["submission", "submission_id", "name", "email", "sid",
                     "score", "max_score", "path"],
                    ["submission_1", "1", "alice", "", "", "2", "2", "1e5"]]
    # the class report's table shows the export's columns, not the path
    from autograder.staff import class_report
    batch = class_report.read_batch(tmp_path)
    assert [s.name for s in batch.submissions] == ["submission_1"]
    assert batch.csv_extra == ["submission_id", "name", "email", "sid"]
