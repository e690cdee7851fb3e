"""The command line contract: names, outputs, exit statuses."""
from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from autograder.report.layout import submission_dir
from autograder.rubric import load_rubric
from kit import variants

ROOT = Path(__file__).resolve().parents[1]
VALUES = ROOT / "test_values"


def variant_file(folder: Path, key: str, name: str) -> Path:
    """The catalogue's entry ``key`` (group/name) written to
    ``folder/name``."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(variants.find(key).source())
    return path


def expected_row(key: str) -> list[str]:
    """The grades.csv row (after the name) the entry ``key`` must get."""
    rubric = load_rubric()
    scores = variants.expect(variants.find(key), rubric).scores
    return [f"{sum(scores.values()):g}", f"{rubric.max_score:g}",
            *(f"{scores[t.id]:g}" for t in rubric.tasks)]


def run(*args: str, env: dict[str, str] | None = None,
        cwd: Path = ROOT) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run([sys.executable, "-m", "autograder", *args],
                          capture_output=True, text=True, env=full_env,
                          cwd=cwd, timeout=300)


@pytest.fixture(scope="module")
def batch(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """One batch: a .py, a folder, a zip, a repeated name, an empty zip."""
    src = tmp_path_factory.mktemp("subs")
    variant_file(src, "styles/reference", "alice.py")
    variant_file(src / "bob" / "transformer_lm",
                 "examples/merge_no_transpose", "modeling_attention.py")
    with zipfile.ZipFile(src / "carol.zip", "w") as zf:
        zf.writestr("transformer_lm/modeling_attention.py",
                    variants.find("diagnoses/skeleton").source())
    variant_file(src / "again", "examples/syntax_error", "alice.py")
    with zipfile.ZipFile(src / "empty.zip", "w") as zf:
        zf.writestr("README.txt", "oops")
    (src / "dave.txt").write_text("my answers\n")   # not a submission
    out = tmp_path_factory.mktemp("out")
    done = run("grade", "--out", str(out), str(src / "alice.py"),
               str(src / "bob"), str(src / "carol.zip"),
               str(src / "again" / "alice.py"), str(src / "empty.zip"),
               str(src / "dave.txt"))
    return out, done


def test_grade_exits_zero_and_writes_csv(batch):
    out, done = batch
    assert done.returncode == 0, done.stderr
    with open(out / "grades.csv") as handle:
        rows = list(csv.reader(handle))
    rubric = load_rubric()
    tasks = [t.id for t in rubric.tasks]
    base = ["submission", "score", "max_score", *tasks, "path"]
    # (a homework whose questions carry points appends the term's columns:
    # their scores are pending)
    assert rows[0][:len(base)] == base
    from autograder.term.course import question_points
    if not any(question_points().values()):
        assert rows[0] == base
    assert tasks[:2] == ["self_attention", "multi_head_self_attention"]
    at = len(base) - 1
    scores = {r[0]: r[1:at] for r in rows[1:]}
    # the path each was graded from, as given: alice-2 is again/alice.py
    paths = {r[0]: Path(r[at]) for r in rows[1:]}
    assert paths["alice-2"].parts[-2:] == ("again", "alice.py")
    assert paths["alice"].parent == paths["carol"].parent == \
        paths["alice-2"].parent.parent and paths["carol"].name == "carol.zip"
    nothing = ["0", f"{rubric.max_score:g}", *["0"] * len(tasks)]
    assert scores == {"alice": expected_row("styles/reference"),
                      "bob": expected_row("examples/merge_no_transpose"),
                      "carol": expected_row("diagnoses/skeleton"),
                      "alice-2": expected_row("examples/syntax_error"),
                      "empty": nothing, "dave.txt": nothing}
    assert scores["alice"][0] == f"{rubric.max_score + rubric.max_bonus:g}"
    assert "alice-2" in done.stdout and "submission" in done.stdout


def test_grade_writes_results_and_feedback(batch):
    out, _ = batch
    for name in ("alice", "bob", "carol", "alice-2", "empty"):
        folder = submission_dir(out, name)
        data = json.loads((folder / "results.json").read_text())
        assert data["output_format"] == "md" and data["tests"]
        assert (folder / "feedback.md").read_text().startswith("# ")

    def feedback(name: str) -> str:
        return (submission_dir(out, name) / "feedback.md").read_text()
    assert "merge_no_transpose" in feedback("bob")
    assert "not implemented yet" in feedback("carol")
    assert "dave.txt is not a submission" in feedback("dave.txt")
    empty = json.loads((submission_dir(out, "empty") / "results.json"
                        ).read_text())
    assert "no modeling_attention.py" in empty["tests"][0]["output"]


def test_usage_errors_exit_two(tmp_path):
    done = run("grade", "--out", str(tmp_path), str(tmp_path / "nope.py"))
    assert done.returncode == 2 and "no such file" in done.stderr
    bad = tmp_path / "rubric.toml"
    bad.write_text("[[task]]\nid = 'x'\n")
    done = run("grade", "--rubric", str(bad), "--out", str(tmp_path),
               str(variant_file(tmp_path, "styles/reference", "ref.py")))
    assert done.returncode == 2 and "missing key" in done.stderr
    assert run().returncode == 2


def test_help():
    done = run("--help")
    assert done.returncode == 0
    for command in ("grade", "check", "gradescope"):
        assert command in done.stdout
    assert "rubric.toml" in run("grade", "--help").stdout


def test_help_without_a_profile_says_how_to_name_one(tmp_path):
    """An installed grader run outside a homework (no homework.toml where
    $HOMEWORK points) still helps, naming both ways to name the folder;
    a command there is a one-line usage error."""
    env = {"HOMEWORK": str(tmp_path)}
    done = run("--help", env=env)
    assert done.returncode == 0, done.stderr
    assert "homework.toml is missing" in done.stdout
    assert "--homework DIR" in done.stdout and "HOMEWORK=DIR" in \
        done.stdout
    done = run("grade", "--out", str(tmp_path / "o"), "x.py", env=env)
    assert done.returncode == 2 and done.stderr.startswith("error: ")
    assert "Traceback" not in done.stderr


def test_the_grader_command_takes_the_homework_first():
    from kit.cli import grader_argv
    assert grader_argv(["--homework", "hw3", "grade", "--out", "o"]) == \
        ("hw3", ["grade", "--out", "o"])
    assert grader_argv(["--homework=hw3", "check"]) == ("hw3", ["check"])
    # Elsewhere it is the command's own argument, left to the command.
    assert grader_argv(["grade", "--homework", "x"]) == \
        (None, ["grade", "--homework", "x"])


@pytest.fixture
def public_only_values(tmp_path) -> Path:
    """A student release: manifest and public values, no hidden file."""
    folder = tmp_path / "values"
    folder.mkdir()
    for name in ("manifest.json", "public.safetensors"):
        shutil.copy(VALUES / name, folder / name)
    return folder


def test_check_on_public_cases_only(public_only_values, tmp_path):
    variant_file(tmp_path / "transformer_lm", "examples/mask_diagonal",
                 "modeling_attention.py")
    done = run("check", env={"AUTOGRADER_VALUES": str(public_only_values)},
               cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    rubric = load_rubric()
    expected = variants.expect(variants.find("examples/mask_diagonal"),
                               rubric)
    bonus = sum(b.points for t in rubric.tasks for b in t.bonuses
                if b.id not in expected.lost)
    points = sum(expected.scores.values()) - bonus
    assert f"public: {points:g} / {rubric.max_score:g} points " \
        f"(+{bonus:g} bonus); hidden cases: graded after you submit" \
        in done.stdout
    assert "values, PEP 8 and shape comments" in done.stdout
    assert "mask_diagonal" in done.stdout
    # Hidden cases are announced, never described.
    assert "hidden case" not in done.stdout.replace(
        "hidden cases: graded after you submit", "")


def test_check_missing_file_exits_two(tmp_path):
    done = run("check", str(tmp_path / "missing.py"))
    assert done.returncode == 2


def test_gradescope_writes_results(tmp_path):
    root = tmp_path / "autograder"
    variant_file(root / "submission" / "transformer_lm", "styles/reference",
                 "modeling_attention.py")
    done = run("gradescope", env={"AUTOGRADER_ROOT": str(root)})
    assert done.returncode == 0, done.stderr
    data = json.loads((root / "results" / "results.json").read_text())
    rubric = load_rubric()
    assert data["score"] == rubric.max_score + rubric.max_bonus


def test_gradescope_writes_results_even_when_the_grader_breaks(tmp_path):
    root = tmp_path / "autograder"
    variant_file(root / "submission", "styles/reference",
                 "modeling_attention.py")
    done = run("gradescope", env={"AUTOGRADER_ROOT": str(root),
                                  "AUTOGRADER_VALUES": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    data = json.loads((root / "results" / "results.json").read_text())
    assert data["score"] == 0 and "not your fault" in data["output"]
