"""The kit's second homework (homeworks/ffn: a pre-norm feed-forward block
with its residual and LayerNorm), selected by HOMEWORK: its generated files
are in step with its sources, and the grader gives its reference full
marks, its skeleton 0 and names each of its catalogued mistakes, in a
local batch and from its Gradescope zip, and its release builds and
verifies itself, its notebook's checks work as unzipped, and it names
nothing of the attention homework."""
from __future__ import annotations

import ast
import csv
import json
import os
import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from autograder import homework
from kit_tests.gradescope_layout import unzip_autograder
from kit_tests.homework_env import homework_env

ROOT = Path(__file__).resolve().parents[1]
FFN = ROOT / "homeworks" / "ffn"
# Run in an unzipped release: the notebook's own import lines, then each
# check cell, then each otter test; prints {task: [check passed, test
# passed]}.
NOTEBOOK_CHECKS = """
import json, runpy, sys
from pathlib import Path
import nbformat
nb = nbformat.read(sys.argv[1], as_version=4)
code = [c.source for c in nb.cells if c.cell_type == "code"]
(imports,) = [s for s in code if "import check" in s]
exec("\\n".join(line for line in imports.splitlines()
                 if line.startswith(("from ", "import "))))
found = {}
for cell in (s for s in code if s.startswith("check(")):
    verdict = eval(cell)
    test = Path(sys.argv[1]).parent / "tests" / (
        "task_" + verdict.task_id.replace(".", "_") + ".py")
    case = runpy.run_path(str(test))["test_" + test.stem]
    try:
        case.test_func()
        passed = True
    except AssertionError:
        passed = False
    found[verdict.task_id] = [verdict.passed, passed]
print(json.dumps(found))
"""


def _profile() -> dict:
    return tomllib.loads((FFN / "homework.toml").read_text())


@pytest.mark.e2e   # ~10 s quiet: a fresh process imports torch, builds
def test_its_generated_files_are_in_step_with_its_sources():
    done = subprocess.run([sys.executable, "-m", "kit.generate", "--check"],
                          cwd=ROOT, env=homework_env(FFN),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, (
        f"homeworks/ffn is stale: run `make generate HOMEWORK=homeworks/"
        f"ffn`:\n{done.stdout}{done.stderr[-2000:]}")


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
         *subs], cwd=ROOT, env=homework_env(FFN), capture_output=True,
        text=True, timeout=600)
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
        assert f"Your values equal those of common mistakes: `{mistake}`" \
            in feedback, sub


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


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    """The homework's student.zip and autograder.zip, built once. Each
    build verifies itself: no leak, its own grader gives the skeleton 0
    on every item and the reference full marks."""
    out = tmp_path_factory.mktemp("ffn") / "dist"
    for tool in ("kit.release.student", "kit.release.gradescope"):
        done = subprocess.run(
            [sys.executable, "-m", tool, "--out", str(out)],
            cwd=ROOT, env=homework_env(FFN), capture_output=True, text=True,
            timeout=900)
        assert done.returncode == 0, (tool, done.stdout[-2000:],
                                      done.stderr[-3000:])
    return out


@pytest.fixture(scope="module")
def release(dist, tmp_path_factory) -> Path:
    """student.zip unpacked once: its one folder, as students get it.
    A test that edits a file in it puts the file back."""
    where = tmp_path_factory.mktemp("ffn-release")
    with zipfile.ZipFile(dist / "student.zip") as zf:
        assert {n.split("/")[0] for n in zf.namelist()} == {
            _profile()["release"]["folder"]}
        zf.extractall(where)
    return where / _profile()["release"]["folder"]


@pytest.mark.e2e
def test_its_release_and_gradescope_zip_build_and_grade(dist, tmp_path):
    expected = _submissions(tmp_path / "subs")
    archive = dist / "autograder.zip"
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
    assert f"Your values equal those of common mistakes: `{mistake}`" \
        in found["output"]


def _notebook_verdicts(release: Path) -> dict[str, list[bool]]:
    """task -> [its check cell passed, its otter test passed], run in the
    unzipped ``release`` as its notebook does (the folder on the path, no
    HOMEWORK, no kit)."""
    notebook = release / homework.load(FFN, staff=True).notebook \
        .relative_to(FFN)
    env = {k: v for k, v in os.environ.items()
           if k not in ("HOMEWORK", "AUTOGRADER_VALUES", "AUTOGRADER_ROOT")}
    # no bytecode: the release stays as unzipped for the other tests
    env.update(PYTHONPATH=str(release), PYTHONDONTWRITEBYTECODE="1")
    done = subprocess.run(
        [sys.executable, "-c", NOTEBOOK_CHECKS, str(notebook)],
        cwd=notebook.parent, env=env, capture_output=True, text=True,
        timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.e2e
def test_its_notebook_checks_work_as_unzipped(release):
    tasks = _notebook_tasks()
    skeleton = _notebook_verdicts(release)
    assert set(skeleton) == tasks
    assert all(v == [False, False] for v in skeleton.values()), skeleton
    module = release / _profile()["module"]["file"]
    shipped = module.read_bytes()
    module.write_text((FFN / _profile()["module"]["reference"]).read_text())
    try:
        reference = _notebook_verdicts(release)
    finally:
        module.write_bytes(shipped)
    assert reference == {task: [True, True] for task in tasks}


def _notebook_tasks() -> set[str]:
    """The rubric's task ids as the notebook checks them ("1.1")."""
    from autograder.local import task_points
    from autograder.rubric import load_rubric
    return set(task_points(load_rubric(homework.load(FFN).rubric)))


def _attention_names() -> set[str]:
    """What names the checkout's own (attention) homework: its reference's
    public classes and functions, its package, module, title and release
    folder."""
    first = homework.load(ROOT, staff=True)
    tree = ast.parse(first.reference.read_text(encoding="utf-8"))
    return {node.name for node in tree.body
            if isinstance(node, (ast.ClassDef, ast.FunctionDef))
            and not node.name.startswith("_")} | {
        first.package, first.module_stem, first.title,
        first.release_folder}


# The grader's code may name the attention homework's classes as examples
# in its docstrings (test_code_is_homework_neutral keeps its code free of
# them).
GUARDED_ELSEWHERE = re.compile(r"autograder/.*\.py")


@pytest.mark.e2e
def test_its_release_names_nothing_of_the_attention_homework(release):
    names = _attention_names()
    assert {"transformer_lm", "the attention homework"} <= names
    word = re.compile(r"(?<![A-Za-z0-9_])(" + "|".join(
        map(re.escape, sorted(names, key=len, reverse=True)))
        + r")(?![A-Za-z0-9_])")
    found, scanned = [], 0
    for path in sorted(p for p in release.rglob("*") if p.is_file()):
        rel = path.relative_to(release).as_posix()
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue   # the values: binary
        if GUARDED_ELSEWHERE.fullmatch(rel):
            continue
        scanned += 1
        found += [f"{rel}:{text.count(chr(10), 0, m.start()) + 1}: "
                  f"{m.group(1)}" for m in word.finditer(text)]
    assert scanned > 10 and "README.md" in {
        p.name for p in release.iterdir()}
    assert not found, (
        "the feed-forward release names the attention homework:\n  "
        + "\n  ".join(found) + "\nfix: take the word from the selected "
        "homework's profile or rubric, or say it without the name")
