"""The kit's second homework (homeworks/ffn: a pre-norm feed-forward block
with its residual and LayerNorm), selected by HOMEWORK: its generated files
are in step with its sources, and the grader gives its reference full
marks, its skeleton 0 and names each of its catalogued mistakes, in a
local batch and from its Gradescope zip, and its release builds and
verifies itself."""
from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from kit_tests.gradescope_layout import unzip_autograder

ROOT = Path(__file__).resolve().parents[1]
FFN = ROOT / "homeworks" / "ffn"
# The homework's own generators, each asked whether its file is stale
# (the repository's documents' facts blocks describe the checkout's own
# homework, not this one).
STALENESS = """
import sys
from kit.generate import mistakes, notebook, skeleton
from kit.generate.values import StaleValues, check_fresh
found = [skeleton.stale(skeleton.REFERENCE), notebook.stale(),
         mistakes.stale()]
try:
    check_fresh()
except StaleValues as exc:
    found.append(str(exc))
found = [line for line in found if line]
print("\\n".join(found))
sys.exit(1 if found else 0)
"""


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "AUTOGRADER_ROOT"}
    env.update(HOMEWORK=str(FFN), PYTHONPATH=str(ROOT))
    return env


def _profile() -> dict:
    return tomllib.loads((FFN / "homework.toml").read_text())


@pytest.mark.e2e   # ~10 s quiet: a fresh process imports torch, builds
def test_its_generated_files_are_in_step_with_its_sources():
    done = subprocess.run([sys.executable, "-c", STALENESS], cwd=ROOT,
                          env=_env(), capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, (
        f"homeworks/ffn is stale: run `make skeleton build-notebook "
        f"mistakes test-values HOMEWORK=homeworks/ffn` (not `make "
        f"generate`, whose facts are the checkout's own homework's):\n"
        f"{done.stdout}{done.stderr[-2000:]}")


def _submissions(folder: Path) -> dict[str, str | None]:
    """name -> the mistake it should be named with (None: the reference),
    one submission per catalogue entry, made by the entry's edits."""
    profile = _profile()
    reference = (FFN / profile["module"]["reference"]).read_text()
    name = Path(profile["module"]["file"]).name
    catalogue = tomllib.loads((FFN / profile["data"]["catalogue"]
                               / "mistakes.toml").read_text())
    expected: dict[str, str | None] = {"reference": None}
    sources = {"reference": reference,
               "skeleton": (FFN / profile["module"]["file"]).read_text()}
    for mid, entry in catalogue.items():
        source = reference
        for before, after in entry["edits"]:
            assert source.count(before) == 1, (mid, before)
            source = source.replace(before, after)
        sources[mid], expected[mid] = source, mid
    for sub, source in sources.items():
        (folder / sub).mkdir(parents=True)
        (folder / sub / name).write_text(source)
    return expected


@pytest.mark.e2e
def test_the_grader_scores_its_reference_skeleton_and_mistakes(tmp_path):
    expected = _submissions(tmp_path / "subs")
    out = tmp_path / "out"
    subs = sorted(str(p) for p in (tmp_path / "subs").iterdir())
    done = subprocess.run(
        [sys.executable, "-m", "autograder", "grade", "--out", str(out),
         *subs], cwd=ROOT, env=_env(), capture_output=True, text=True,
        timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {row["submission"]: row for row in
            csv.DictReader((out / "grades.csv").open())}
    full = rows["reference"]["max_score"]
    assert rows["reference"]["score"] == full and float(full) > 0
    assert float(rows["skeleton"]["score"]) == 0
    for sub, mistake in expected.items():
        if mistake is None:
            continue
        assert float(rows[sub]["score"]) < float(full), sub
        feedback = (out / "submissions" / sub / "feedback.md").read_text()
        assert f"Recognised common mistakes: `{mistake}`" in feedback, sub


def _gradescope_result(archive: Path, root: Path, source: str) -> dict:
    """results.json of the zip's run_autograder on one submission, as
    Gradescope runs it: no HOMEWORK, no kit on the path."""
    unzip_autograder(archive, root)
    name = Path(_profile()["module"]["file"]).name
    (root / "submission" / name).write_text(source)
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "HOMEWORK", "AUTOGRADER_VALUES")}
    env.update(AUTOGRADER_ROOT=str(root), AUTOGRADER_PYTHON=sys.executable)
    subprocess.run([str(root / "run_autograder")], cwd=root, env=env,
                   capture_output=True, text=True, timeout=900)
    return json.loads((root / "results" / "results.json").read_text())


@pytest.mark.e2e
def test_its_release_and_gradescope_zip_build_and_grade(tmp_path):
    # The release's build verifies itself: no leak, its own grader gives
    # the skeleton 0 on every item and the reference full marks.
    for tool in ("kit.release.student", "kit.release.gradescope"):
        done = subprocess.run(
            [sys.executable, "-m", tool, "--out", str(tmp_path / "dist")],
            cwd=ROOT, env=_env(), capture_output=True, text=True,
            timeout=900)
        assert done.returncode == 0, (tool, done.stdout[-2000:],
                                      done.stderr[-3000:])
    release_folder = _profile()["release"]["folder"]
    with zipfile.ZipFile(tmp_path / "dist" / "student.zip") as zf:
        assert {n.split("/")[0] for n in zf.namelist()} == {release_folder}
    expected = _submissions(tmp_path / "subs")
    archive = tmp_path / "dist" / "autograder.zip"
    name = Path(_profile()["module"]["file"]).name
    reference = _gradescope_result(
        archive, tmp_path / "ref", (tmp_path / "subs" / "reference" / name)
        .read_text())
    full = sum(t.get("max_score", 0) for t in reference["tests"])
    assert reference["score"] == full > 0, reference.get("output", "")[:2000]
    mistake = next(m for m in expected.values() if m is not None)
    found = _gradescope_result(
        archive, tmp_path / "mistake",
        (tmp_path / "subs" / mistake / name).read_text())
    assert found["score"] < full
    assert f"Recognised common mistakes: `{mistake}`" in found["output"]
