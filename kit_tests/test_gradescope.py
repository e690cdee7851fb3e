"""The Gradescope autograder zip, run as Gradescope runs it.

The zip is unzipped into ``<tmp>/source`` of a folder laid out like
``/autograder``; ``run_autograder`` is copied to ``<tmp>/run_autograder``
(as Gradescope's image build does) and run from ``<tmp>`` with
``AUTOGRADER_ROOT=<tmp>``. ``AUTOGRADER_PYTHON`` points it at this kit's
interpreter instead of the venv setup.sh would build; setup.sh itself runs
with ``AUTOGRADER_SETUP_SKIP_INSTALL=1`` (no apt/pip).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from autograder import homework
from autograder.rubric import load_rubric
from kit.release import gradescope
from kit.corpus.examples import example_sources
from kit_tests.gradescope_layout import unzip_autograder

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "solutions" / "transformer_lm" / "modeling_attention.py"
SKELETON = ROOT / "transformer_lm" / "modeling_attention.py"
VISIBILITIES = {"hidden", "after_due_date", "after_published", "visible"}
RUBRIC = load_rubric()
FULL = RUBRIC.max_score + RUBRIC.max_bonus   # every point and bonus


@pytest.fixture(scope="module")
def archive(tmp_path_factory) -> Path:
    return gradescope.build(tmp_path_factory.mktemp("dist"))


def _autograder_dir(archive: Path, base: Path) -> Path:
    return unzip_autograder(archive, base / "autograder")


def _run(root: Path, python: str = sys.executable) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "AUTOGRADER_VALUES")}
    env.update(AUTOGRADER_ROOT=str(root), AUTOGRADER_PYTHON=python)
    subprocess.run([str(root / "run_autograder")], cwd=root, env=env,
                   capture_output=True, text=True, timeout=600)
    return json.loads((root / "results" / "results.json").read_text())


def _validate(results: dict) -> None:
    """The fields Gradescope reads, with the types it expects."""
    assert isinstance(results["score"], (int, float))
    assert results["output_format"] == "md"
    assert isinstance(results["output"], str) and results["output"]
    for test in results["tests"]:
        assert {"name", "score", "max_score", "status", "output",
                "visibility"} <= set(test)
        assert test["status"] in ("passed", "failed")
        assert test["visibility"] in VISIBILITIES
        assert 0 <= test["score"] or test["max_score"] == 0
    assert results["score"] == pytest.approx(
        sum(t["score"] for t in results["tests"]))


def test_zip_layout(archive):
    with zipfile.ZipFile(archive) as zf:
        names = set(zf.namelist())
        for script in ("setup.sh", "run_autograder"):
            assert (zf.getinfo(script).external_attr >> 16) & 0o111
    assert {"setup.sh", "run_autograder", "requirements.txt",
            "install_deps.py", "autograder/__main__.py",
            "autograder/rubric.toml", "autograder/gradescope/entry.py",
            "test_values/hidden.safetensors",
            "test_values/public.safetensors",
            "test_values/manifest.json"} <= names
    assert not any(n.startswith(("solutions/", "kit/", "kit_tests/",
                                 "transformer_lm/", "examples/",
                                 "autograder/staff/"))
                   for n in names)
    # the venv: requirements.txt (torch pinned) through the install rule
    setup = zf_text(archive, "setup.sh")
    assert "install_deps.py\" --venv \"$VENV\"" in setup
    assert "https://download.pytorch.org/whl/cpu" in setup
    assert "torch==2.13.0" in zf_text(archive, "requirements.txt")


def test_the_zip_carries_the_profile_its_grader_reads(archive, tmp_path):
    source = _autograder_dir(archive, tmp_path) / "source"
    shipped = homework.load(source)
    assert shipped.root == source.resolve()
    assert shipped.rubric.is_relative_to(source.resolve())
    assert (shipped.test_values / "hidden.safetensors").is_file()
    assert not shipped.reference.exists()
    # the homework's own check kinds (its [data] kinds) ship with it
    ours = homework.current()
    assert ours.kinds and [k.relative_to(source.resolve())
                           for k in shipped.kinds] == \
        [k.relative_to(ours.root) for k in ours.kinds]
    assert all(k.read_bytes() == m.read_bytes()
               for k, m in zip(shipped.kinds, ours.kinds))


def zf_text(archive: Path, name: str) -> str:
    with zipfile.ZipFile(archive) as zf:
        return zf.read(name).decode()


def test_grader_imports_are_pinned(archive, tmp_path):
    with zipfile.ZipFile(archive) as zf:
        zf.extractall(tmp_path)
    third_party = gradescope.third_party_imports(tmp_path / "autograder")
    assert "torch" in third_party and "safetensors" in third_party
    pinned = (tmp_path / "requirements.txt").read_text()
    for module in third_party:
        assert f"{module}==" in pinned


def test_reference_gets_full_marks(archive, tmp_path):
    root = _autograder_dir(archive, tmp_path)
    shutil.copy2(REFERENCE, root / "submission" / "modeling_attention.py")
    results = _run(root)
    _validate(results)
    assert results["score"] == FULL
    assert all(t["status"] == "passed" for t in results["tests"])
    counts = re.findall(r"hidden cases: (\d+) of (\d+) passed",
                        json.dumps(results["tests"]))
    assert counts and all(a == b for a, b in counts)


def test_hidden_case_details_wait_for_publication(archive, tmp_path):
    root = _autograder_dir(archive, tmp_path)
    (root / "submission" / "modeling_attention.py").write_text(
        example_sources()["squeeze_output"])
    results = _run(root)
    _validate(results)
    lost = sum(c.points for c in RUBRIC.checks() if c.id in ("1.2",
                                                             "1.bonus"))
    assert results["score"] == FULL - lost  # 1.2 fails on a hidden case
    visible = [t for t in results["tests"] if t["visibility"] == "visible"]
    later = [t for t in results["tests"]
             if t["visibility"] == "after_published"]
    assert "sa_single_token" not in json.dumps(visible) + results["output"]
    assert len(later) == 1 and "sa_single_token" in later[0]["output"]


def test_skeleton_scores_zero(archive, tmp_path):
    root = _autograder_dir(archive, tmp_path)
    package = root / "submission" / "transformer_lm"
    package.mkdir()
    shutil.copy2(SKELETON, package / "modeling_attention.py")
    results = _run(root)
    _validate(results)
    assert results["score"] == 0
    assert all(t["score"] == 0 for t in results["tests"])


def test_mistake_is_diagnosed(archive, tmp_path):
    root = _autograder_dir(archive, tmp_path)
    # a zip holding the mistake, as a student might upload by hand
    with zipfile.ZipFile(root / "submission" / "work.zip", "w") as zf:
        zf.writestr("transformer_lm/modeling_attention.py",
                    example_sources()["no_scale"])
    results = _run(root)
    _validate(results)
    assert 0 < results["score"] < FULL
    text = json.dumps(results["tests"])
    assert "sqrt" in text  # the catalogue's explanation of no_scale


@pytest.mark.parametrize("breakage", ["python", "package"])
def test_catastrophic_failure_still_writes_results(archive, tmp_path,
                                                   breakage):
    root = _autograder_dir(archive, tmp_path)
    shutil.copy2(REFERENCE, root / "submission" / "modeling_attention.py")
    if breakage == "package":
        shutil.rmtree(root / "source" / "autograder")
        results = _run(root)
    else:
        results = _run(root, python="/bin/false")
    assert results["score"] == 0 and results["tests"] == []
    assert results["output_format"] == "md"
    assert "autograder failed" in results["output"]
    assert results["extra_data"]["fallback"] is True


def test_a_broken_rubric_is_the_graders_apology_not_the_shells(archive,
                                                               tmp_path):
    # No rubric to score against: the grader itself still writes the
    # apology (no score), before run_autograder's shell fallback is needed.
    root = _autograder_dir(archive, tmp_path)
    shutil.copy2(REFERENCE, root / "submission" / "modeling_attention.py")
    (root / "source" / "autograder" / "rubric.toml").write_text("[[task]\n")
    results = _run(root)
    assert results["score"] == 0 and results["tests"] == []
    assert "not your grade" in results["output"]
    assert "fallback" not in results.get("extra_data", {})


def test_setup_locks_source_from_the_worker_user(archive, tmp_path):
    root = _autograder_dir(archive, tmp_path)
    source = root / "source"
    env = dict(os.environ, AUTOGRADER_SETUP_SKIP_INSTALL="1")
    if os.geteuid() != 0:
        pytest.skip("setup.sh creates a user and chowns: needs root")
    done = subprocess.run(["bash", str(source / "setup.sh")], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert source.stat().st_mode & 0o777 == 0o700
    hidden = source / "test_values" / "hidden.safetensors"
    assert hidden.stat().st_mode & 0o077 == 0
    denied = subprocess.run(
        ["runuser", "-u", "autograder-worker", "--", "cat", str(hidden)],
        capture_output=True, text=True)
    assert denied.returncode != 0 and "Permission denied" in denied.stderr
    # grading still works as root with the source locked
    shutil.copy2(REFERENCE, root / "submission" / "modeling_attention.py")
    results = _run(root)
    assert results["score"] == FULL
