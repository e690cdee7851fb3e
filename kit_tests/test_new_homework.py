"""kit/new_homework.py: a third homework of another shape, written from
the kit's template into a folder outside the checkout (layer
normalisation with its own self.weight and self.bias, a softmax
classifier's log-probabilities through the exact log, its own notation
with num_classes), then generated, released, zipped for Gradescope and
graded with no kit code touched: the reference full marks, the skeleton
0, one catalogued mistake loses exactly its item."""
from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from kit import new_homework
from kit_tests.gradescope_layout import unzip_autograder

ROOT = Path(__file__).resolve().parents[1]
MODULE = "classifier/modeling_classifier.py"
REFERENCE = "solutions/" + MODULE


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("HOMEWORK", "AUTOGRADER_ROOT", "AUTOGRADER_VALUES")}
    env["PYTHONPATH"] = str(ROOT)
    return env


def _kit(folder: Path, cwd: Path, *args: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "kit", "--homework", str(folder), *args],
        cwd=cwd, env=_env(), capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, (args, done.stdout[-2000:],
                                  done.stderr[-3000:])


def test_the_template_writes_a_whole_profile_and_refuses_a_used_folder(
        tmp_path):
    from autograder import homework
    folder = new_homework.write(tmp_path / "norm")
    found = homework.load(folder, staff=True)   # every named file exists
    assert found.name == "norm" and found.package == "classifier"
    assert found.release_folder == "norm-homework"
    notation = tomllib.loads(found.shape_notation.read_text())
    assert "num_classes" in [row["key"] for row in notation["size"]]
    assert (folder / "autograder" / "imports.toml").read_bytes() == \
        (ROOT / "autograder" / "imports.toml").read_bytes()
    assert "__NAME__" not in "".join(
        p.read_text() for p in folder.rglob("*") if p.is_file())
    with pytest.raises(new_homework.NewHomeworkError, match="not empty"):
        new_homework.write(folder)
    with pytest.raises(new_homework.NewHomeworkError, match="--name"):
        new_homework.write(tmp_path / "other", "Bad Name")


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, Path]:
    """The homework written outside the checkout and generated; then its
    release and Gradescope zip built (each verifies itself: no leak, the
    skeleton 0, the reference full marks) in a work folder's dist/norm/."""
    top = tmp_path_factory.mktemp("course")
    folder = new_homework.write(top / "norm")
    work = top / "work"
    work.mkdir()
    _kit(folder, work, "generate")
    _kit(folder, work, "generate", "--check")
    _kit(folder, work, "release")
    _kit(folder, work, "autograder")
    return folder, work / "dist" / "norm"


def _submissions(folder: Path, into: Path) -> dict[str, Path]:
    """reference, skeleton and the catalogue's no_log mistake, made by
    its edits."""
    reference = (folder / REFERENCE).read_text()
    catalogue = tomllib.loads(
        (folder / "kit" / "variants" / "mistakes.toml").read_text())
    mistake = reference
    for before, after in catalogue["no_log"]["edits"]:
        assert mistake.count(before) == 1
        mistake = mistake.replace(before, after)
    sources = {"reference": reference, "skeleton": (
        folder / MODULE).read_text(), "no_log": mistake}
    for name, source in sources.items():
        (into / name).mkdir(parents=True)
        (into / name / Path(MODULE).name).write_text(source)
    return {name: into / name for name in sources}


@pytest.mark.e2e
def test_the_third_homework_grades_reference_skeleton_and_a_mistake(
        built, tmp_path):
    folder, _ = built
    subs = _submissions(folder, tmp_path / "subs")
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "autograder", "grade", "--out", str(out),
         *map(str, subs.values())], cwd=tmp_path,
        env={**_env(), "HOMEWORK": str(folder)}, capture_output=True,
        text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {r["submission"]: r for r in csv.DictReader(
        (out / "grades.csv").open())}
    assert rows["reference"]["score"] == rows["reference"]["max_score"] \
        == "5"
    assert float(rows["skeleton"]["score"]) == 0
    lost = {test["name"].split(" / ")[-1].split(" ")[0]:
            test["max_score"] - test["score"] for test in json.loads(
                (out / "submissions" / "no_log" / "results.json")
                .read_text())["tests"] if test["max_score"]}
    assert lost == {"1.1": 0, "2.1": 3}    # its item alone
    feedback = (out / "submissions" / "no_log" / "feedback.md").read_text()
    assert "Your values equal those of common mistakes: `no_log`" in feedback


@pytest.mark.e2e
def test_the_third_homeworks_gradescope_zip_gives_the_reference_full_marks(
        built, tmp_path):
    folder, dist = built
    assert (dist / "student.zip").is_file()
    root = unzip_autograder(dist / "autograder.zip", tmp_path / "gs")
    (root / "submission" / Path(MODULE).name).write_text(
        (folder / REFERENCE).read_text())
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "HOMEWORK", "AUTOGRADER_VALUES")}
    env.update(AUTOGRADER_ROOT=str(root), AUTOGRADER_PYTHON=sys.executable)
    subprocess.run([str(root / "run_autograder")], cwd=root, env=env,
                   capture_output=True, text=True, timeout=900)
    result = json.loads((root / "results" / "results.json").read_text())
    assert result["score"] == 5, result.get("output", "")[:2000]
