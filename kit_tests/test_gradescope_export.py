"""Gradescope's "Export Submissions" archive in, grades out:
the zip as it comes (or its folder, as `make grade SUBMISSIONS=DIR`
globs it) is graded folder by folder; grades.csv gets the submission ids,
names, emails and SIDs; gradescope_scores.csv is ready to upload back."""
from __future__ import annotations

import csv
import html
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from kit.corpus.examples import example_sources

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "solutions" / "transformer_lm" / "modeling_attention.py"
METADATA = """\
submission_111:
  :submitters:
  - :name: Ada Lovelace
    :sid: '1815'
    :email: ada@example.edu
  :created_at: 2026-11-20 10:00:00.000000000 -08:00
  :score: 0.0
submission_222:
  :submitters:
  - :name: Alan Turing
    :sid: '1912'
    :email: alan@example.edu
  - :name: Grace Hopper
    :sid: '1906'
    :email: grace@example.edu
  :created_at: 2026-11-21 10:00:00.000000000 -08:00
submission_333:
  :submitters:
  - :name: Edsger Dijkstra
    :sid: '1930'
    :email: edsger@example.edu
"""


def _export_folder(root: Path) -> Path:
    folder = root / "assignment_42_export"
    (folder / "submission_111").mkdir(parents=True)
    shutil.copy2(REFERENCE, folder / "submission_111" /
                 "modeling_attention.py")
    (folder / "submission_222" / "transformer_lm").mkdir(parents=True)
    (folder / "submission_222" / "transformer_lm" /
     "modeling_attention.py").write_text(example_sources()["no_scale"])
    (folder / "submission_metadata.yml").write_text(METADATA)
    return folder            # submission_333: listed, no files


def _grade(out: Path, *paths: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "autograder", "grade", "--out", str(out),
         "--jobs", "2", *map(str, paths)], capture_output=True, text=True,
        cwd=ROOT, timeout=600)


def _csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


@pytest.fixture(scope="module")
def graded_zip(tmp_path_factory):
    base = tmp_path_factory.mktemp("export")
    folder = _export_folder(base / "src")
    archive = base / "export.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for path in sorted(folder.rglob("*")):
            zf.write(path, path.relative_to(folder.parent))
    done = _grade(base / "out", archive)
    assert done.returncode == 0, done.stdout + done.stderr
    return base, done.stdout


def test_grades_csv_names_every_submission(graded_zip):
    base, stdout = graded_zip
    rows = {r["submission"]: r for r in _csv(base / "out" / "grades.csv")}
    assert set(rows) == {"submission_111", "submission_222"}
    ada, pair = rows["submission_111"], rows["submission_222"]
    assert (ada["submission_id"], ada["name"], ada["email"], ada["sid"]) \
        == ("111", "Ada Lovelace", "ada@example.edu", "1815")
    assert pair["name"] == "Alan Turing; Grace Hopper"
    assert ada["path"] == str(base / "export.zip" / "submission_111")
    assert float(ada["score"]) > float(pair["score"]) > 0
    assert "submission_333" in stdout          # listed, without files
    # The export's line and the upload files' line count the same people.
    assert "2 submissions, 4 students" in stdout and "(4 students," in stdout


def test_upload_csv_has_one_row_per_student(graded_zip):
    base, _ = graded_zip
    grades = {r["submission_id"]: r["score"]
              for r in _csv(base / "out" / "grades.csv")}
    upload = _csv(base / "out" / "gradescope_scores.csv")
    # Edsger is listed without files: a row without a grade, never a 0
    assert [r["Email"] for r in upload] == [
        "ada@example.edu", "alan@example.edu", "edsger@example.edu",
        "grace@example.edu"]
    assert upload[2]["Score"] == "" and upload[2]["Submission ID"] == "333"
    upload = [row for row in upload if row["Score"]]
    assert list(upload[0]) == ["Name", "SID", "Email", "Score",
                               "Submission ID", "Max Points",
                               "Bonus Policy"]
    assert {row["Max Points"] for row in upload} == {"16"}
    for row in upload:
        assert row["Score"] == grades[row["Submission ID"]]


def test_class_report_shows_the_names(graded_zip):
    base, _ = graded_zip
    report = (base / "out" / "report.html").read_text()
    assert "Grace Hopper" in report and "<th data-col='3'" in report


def test_the_unzipped_folder_as_make_globs_it(tmp_path):
    folder = _export_folder(tmp_path / "src")
    done = _grade(tmp_path / "out", *sorted(folder.iterdir()))
    assert done.returncode == 0, done.stdout + done.stderr
    rows = _csv(tmp_path / "out" / "grades.csv")
    # the metadata file is no stray submission
    assert sorted(r["submission"] for r in rows) == ["submission_111",
                                                     "submission_222"]
    assert sorted(r["path"] for r in rows) == [
        str(folder / "submission_111"), str(folder / "submission_222")]


def test_an_unsafe_entry_of_an_export_is_left_out(tmp_path):
    # One entry's name is that entry's problem, never written
    # outside the extraction folder; here no submission folder is left.
    archive = tmp_path / "export.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("submission_metadata.yml", METADATA)
        zf.writestr("../escaped.py", "x = 1\n")
    done = _grade(tmp_path / "out", archive)
    assert done.returncode == 2 and "unsafe path" in done.stderr
    assert not (tmp_path.parent / "escaped.py").exists()


def _zip_export(export: Path, archive: Path) -> Path:
    """``export``'s files zipped as Gradescope ships them (no top folder)."""
    with zipfile.ZipFile(archive, "w") as zf:
        for path in sorted(export.rglob("*")):
            zf.write(path, path.relative_to(export))
    return archive


def test_a_renamed_file_scores_as_it_does_in_a_folder(tmp_path):
    # Gradescope keeps the name a student uploaded (hw3.py): the export's
    # submission folder is read as a folder of submissions reads it.
    export = tmp_path / "export"
    (export / "submission_111").mkdir(parents=True)
    shutil.copy2(REFERENCE, export / "submission_111" / "hw3.py")
    (export / "submission_metadata.yml").write_text(
        METADATA.split("submission_222:")[0])
    archive = _zip_export(export, tmp_path / "export.zip")
    plain = tmp_path / "plain"
    plain.mkdir()
    shutil.copy2(REFERENCE, plain / "ada.py")
    exported = _grade(tmp_path / "out", archive)
    folder = _grade(tmp_path / "out-folder", plain / "ada.py")
    assert exported.returncode == folder.returncode == 0, exported.stderr
    by_export = _csv(tmp_path / "out" / "grades.csv")[0]["score"]
    by_folder = _csv(tmp_path / "out-folder" / "grades.csv")[0]["score"]
    assert float(by_export) == float(by_folder) > 0


def test_feedback_never_shows_the_graders_own_paths(tmp_path):
    # A submission with nothing to grade is named by what was handed in,
    # not by the grader's temporary extraction folder.
    export = tmp_path / "export"
    (export / "submission_111").mkdir(parents=True)
    (export / "submission_111" / "notes.txt").write_text("no code\n")
    (export / "submission_metadata.yml").write_text(
        METADATA.split("submission_222:")[0])
    archive = _zip_export(export, tmp_path / "export.zip")
    done = _grade(tmp_path / "out", archive)
    assert done.returncode == 0, done.stderr
    pages = list((tmp_path / "out" / "submissions").rglob("feedback.*"))
    assert pages
    for page in pages:
        text = page.read_text()
        assert "submission_111" in text
        assert "autograder-" not in text and str(tmp_path) not in text


@pytest.mark.e2e   # a second grading run of the export (make test-all)
def test_grade_anonymise_names_no_student_of_the_export(tmp_path):
    folder = _export_folder(tmp_path / "src")
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "autograder", "grade", "--out", str(out),
         "--jobs", "2", "--anonymise", str(folder)], capture_output=True,
        text=True, cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "anonymised view:" in done.stdout
    known = ["submission_111", "submission_222", "Ada", "Lovelace",
             "Alan", "Turing", "Grace", "Hopper", "ada@example.edu",
             "alan@example.edu", "grace@example.edu", "1815", "1912",
             "1906", str(tmp_path)]
    view = out / "anonymised"
    files = [p for p in view.rglob("*") if p.is_file()]
    assert len(files) > 3
    for path in files:
        text = (str(path.relative_to(view)) + "\n" + path.read_text())
        assert not [k for k in known for form in {k, html.escape(k)}
                    if re.search(rf"(?<![A-Za-z0-9]){re.escape(form)}"
                                 rf"(?![A-Za-z0-9])", text, re.I)], path
    # The control: the plain report names them.
    report = (out / "report.html").read_text()
    assert "Grace Hopper" in report and "submission_111" in report
    key = _csv(out / "pseudonyms.csv")
    assert {r["submission"] for r in key} == {"submission_111",
                                              "submission_222"}
    assert key[0]["pseudonym"] in (view / "report.html").read_text()
