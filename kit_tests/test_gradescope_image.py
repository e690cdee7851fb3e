"""The Gradescope image as ``setup.sh`` builds it, grading as Gradescope does.

The venv is built by the zip's own ``setup.sh`` (``AUTOGRADER_VENV`` points
it at a cache, ``AUTOGRADER_SETUP_PYTHON`` replaces apt's Python by the
system's /usr/bin/python3, else this interpreter): the
shipped ``requirements.txt`` through ``install_deps.py`` and nothing else,
so an import that only the kit's own ``.venv`` satisfies (numpy, which
``safetensors.torch`` imports, came there through matplotlib) fails here
as it would on Gradescope. The venv is cached across runs, keyed on the
requirements and the install rule (building it takes about a minute),
outside the checkout and world-readable like Gradescope's
``/opt/attention-grader/venv``, because the worker user imports torch from
it. setup.sh reruns on the cached venv each session (pip finds everything
installed), so the install step itself is exercised every time.

Every submission is graded in a fresh Gradescope-like root: a root-owned
folder of mode 755 holding ``source/`` (the zip, locked by setup.sh),
``submission/``, ``results/`` and ``run_autograder``, run with
``AUTOGRADER_ROOT`` and ``AUTOGRADER_PYTHON`` set to the image's
interpreter. Only ``results.json`` is read. Needs root (setup.sh creates
the worker user and chowns), as CI runs.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from autograder.rubric import load_rubric
from kit.release import gradescope
from kit.corpus.examples import example_sources
from kit_tests.gradescope_layout import unzip_autograder

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "solutions" / "transformer_lm" / "modeling_attention.py"
SKELETON = ROOT / "transformer_lm" / "modeling_attention.py"
CACHE = Path(os.environ.get("KIT_GRADESCOPE_IMAGE_CACHE",
                            "/var/tmp/attention-kit-gradescope-image"))
RUBRIC = load_rubric()
FULL = RUBRIC.max_score + RUBRIC.max_bonus
# The mistake graded below and the one item it must cost: heads merged by
# a bare reshape leave the attention probabilities right (2.1, 2.2, and
# 2.3b, which judges dropout on the probabilities) and the output att
# wrong (2.3a); the other tasks do not use that class.
MISTAKE, MISTAKE_COSTS = "merge_no_transpose", {"2.3a"}

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="a root-owned /autograder, setup.sh's "
    "useradd and chown need root (CI runs as root)")


def _env(**extra: str) -> dict[str, str]:
    """This environment without the kit's paths, plus ``extra``."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "AUTOGRADER_VALUES", "VIRTUAL_ENV")}
    return {**env, **extra}


@pytest.fixture(scope="module")
def archive(tmp_path_factory) -> Path:
    return gradescope.build(tmp_path_factory.mktemp("dist"))


def _new_root(archive: Path) -> Path:
    """A Gradescope-like /autograder: root-owned, mode 755, zip unzipped."""
    root = Path(tempfile.mkdtemp(prefix="autograder-"))
    root.chmod(0o755)
    return unzip_autograder(archive, root)


def _base_python() -> str:
    """The system Python if it can build the venv, as apt's would."""
    system = "/usr/bin/python3"
    fit = "import sys, venv, ensurepip; sys.exit(sys.version_info < (3, 11))"
    if os.path.exists(system) and subprocess.run(
            [system, "-c", fit], capture_output=True).returncode == 0:
        return system
    return sys.executable


def _setup(root: Path, **env: str) -> None:
    done = subprocess.run(["bash", str(root / "source" / "setup.sh")],
                          env=_env(**env), capture_output=True, text=True,
                          timeout=1200)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


@pytest.fixture(scope="module")
def image(archive) -> Path:
    """The interpreter of the venv setup.sh builds (cached, see above)."""
    python = _base_python()
    version = subprocess.run([python, "--version"], capture_output=True,
                             text=True).stdout
    with zipfile.ZipFile(archive) as zf:
        key = hashlib.sha256(zf.read("requirements.txt")
                             + zf.read("install_deps.py")
                             + f"{python} {version}".encode()).hexdigest()[:16]
    venv = CACHE / f"venv-{key}"
    CACHE.mkdir(parents=True, exist_ok=True)
    CACHE.chmod(0o755)
    root = _new_root(archive)
    try:
        with open(CACHE / "lock", "w") as lock:
            # Two suites on one machine must not pip into one venv at once.
            fcntl.flock(lock, fcntl.LOCK_EX)
            _setup(root, AUTOGRADER_VENV=str(venv),
                   AUTOGRADER_SETUP_PYTHON=python)
            for stale in CACHE.glob("venv-*"):
                if stale != venv:
                    shutil.rmtree(stale, ignore_errors=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return venv / "bin" / "python"


@pytest.fixture
def gradescope_root(archive) -> Iterator[Path]:
    """A fresh root whose source/ is as setup.sh leaves it."""
    root = _new_root(archive)
    _setup(root, AUTOGRADER_SETUP_SKIP_INSTALL="1")
    yield root
    shutil.rmtree(root, ignore_errors=True)


def _grade(root: Path, python: Path) -> dict:
    done = subprocess.run(
        [str(root / "run_autograder")], cwd=root, capture_output=True,
        text=True, timeout=900,
        env=_env(AUTOGRADER_ROOT=str(root), AUTOGRADER_PYTHON=str(python)))
    results = json.loads((root / "results" / "results.json").read_text())
    extra = results.get("extra_data", {})
    # a grade, not "the autograder failed" (shell fallback or preflight)
    assert not extra.get("fallback") and not extra.get("internal_error"), (
        results["output"][:2000] + done.stderr[-2000:])
    return results


def _by_check(results: dict) -> dict[str, dict]:
    """Each rubric check's test in results.json, by check id."""
    found = {t["number"]: t for t in results["tests"] if "number" in t}
    assert set(found) == {c.id for c in RUBRIC.checks()}
    return found


def _pins(text: str) -> dict[str, str]:
    """Normalised distribution name -> pinned version, of a requirements
    file's text."""
    lines = [line.split("#")[0].strip() for line in text.splitlines()]
    return {re.sub(r"[-_.]+", "-", name).lower(): version
            for name, version in (line.split("==") for line in lines
                                  if "==" in line)}


def test_image_holds_the_requirements_and_nothing_else(archive, image):
    with zipfile.ZipFile(archive) as zf:
        pinned = _pins(zf.read("requirements.txt").decode())
    listing = subprocess.run(
        [str(image), "-c", "import importlib.metadata as m\n"
         "for d in m.distributions(): print(d.metadata['Name'], d.version)"],
        capture_output=True, text=True, check=True).stdout
    installed = _pins(listing.replace(" ", "=="))
    assert "numpy" in pinned and "torch" in pinned
    for name, version in pinned.items():
        # the CPU wheel's version is 2.13.0+cpu
        assert installed.get(name, "").split("+")[0] == version, name
    kit_only = set(_pins((ROOT / "requirements.txt").read_text())) - set(
        pinned)
    assert kit_only and not kit_only & set(installed)


def test_reference_gets_full_marks(gradescope_root, image):
    shutil.copy2(REFERENCE,
                 gradescope_root / "submission" / "modeling_attention.py")
    results = _grade(gradescope_root, image)
    assert results["score"] == FULL
    assert all(t["status"] == "passed" for t in results["tests"])


def test_einops_import_gets_full_marks_as_in_check(gradescope_root, image):
    # The rubric invites einops (autograder/imports.toml): the image has it,
    # so the score is check's (kit_tests/test_allowed_imports.py).
    source = REFERENCE.read_text().replace(
        "import torch\n", "import torch\nfrom einops import rearrange\n", 1)
    assert "einops" in source
    (gradescope_root / "submission" / "modeling_attention.py").write_text(
        source)
    results = _grade(gradescope_root, image)
    assert results["score"] == FULL


def test_skeleton_scores_zero(gradescope_root, image):
    package = gradescope_root / "submission" / "transformer_lm"
    package.mkdir()
    shutil.copy2(SKELETON, package / "modeling_attention.py")
    results = _grade(gradescope_root, image)
    assert results["score"] == 0 and results["tests"]
    assert all(t["score"] == 0 for t in results["tests"])


def test_catalogued_mistake_costs_its_items(gradescope_root, image):
    with zipfile.ZipFile(gradescope_root / "submission" / "submission.zip",
                         "w") as zf:
        zf.writestr("transformer_lm/modeling_attention.py",
                    example_sources()[MISTAKE])
    results = _grade(gradescope_root, image)
    costs = sum(c.points for c in RUBRIC.checks() if c.id in MISTAKE_COSTS)
    assert costs > 0 and results["score"] == FULL - costs
    by_check = _by_check(results)
    failed = {cid for cid, t in by_check.items() if t["status"] == "failed"}
    assert failed == MISTAKE_COSTS
    message = tomllib.loads(
        (ROOT / "autograder" / "mistakes.toml").read_text())[MISTAKE][
            "message"]
    assert any(message[:60] in by_check[cid]["output"]
               for cid in MISTAKE_COSTS)   # the diagnosis reached feedback
