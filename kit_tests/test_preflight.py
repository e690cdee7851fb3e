"""The grader proves it can grade before it writes a score
(autograder/sandbox/preflight.py): a broken environment stops every
command with the cause and the remedy, and never becomes a student's zero."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from autograder.report.layout import submission_dir
from autograder.sandbox.preflight import (PreflightError, make_canary,
                                          prove_spare_uids, run_preflight)
from autograder.sandbox.protocol import CRASH, OK, ProbeResult
from autograder.sandbox.pool import Sandbox
from kit_tests.reference_source import FULL_REFERENCE

ROOT = Path(__file__).resolve().parents[1]
# What Gradescope's image lacked: torch imports without numpy, but sending
# tensors back (safetensors) needs it.
NO_NUMPY = "raise ModuleNotFoundError(\"No module named 'numpy'\")\n"


@pytest.fixture
def broken_env(tmp_path) -> dict[str, str]:
    stub = tmp_path / "stub"
    (stub / "numpy").mkdir(parents=True)
    (stub / "numpy" / "__init__.py").write_text(NO_NUMPY)
    return {**os.environ, "PYTHONPATH": f"{stub}{os.pathsep}{ROOT}"}


def _cli(*args: str, env: dict[str, str], cwd: Path = ROOT):
    return subprocess.run([sys.executable, "-m", "autograder", *args],
                          env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=300)


def test_canary_passes_here_and_reports_the_jail():
    with Sandbox() as sandbox:
        layers = run_preflight(sandbox)
    assert layers, "the jail reported no layer"


def test_grade_stops_before_any_score(broken_env, tmp_path):
    (tmp_path / "reference.py").write_text(FULL_REFERENCE)
    out = tmp_path / "out"
    done = _cli("grade", "--out", str(out), str(tmp_path / "reference.py"),
                env=broken_env)
    assert done.returncode == 2
    assert "canary" in done.stderr
    assert "install the package 'numpy'" in done.stderr
    assert not (out / "grades.csv").exists()
    assert not (submission_dir(out, "reference") / "results.json").exists()


def test_check_stops_with_the_cause(broken_env, tmp_path):
    (tmp_path / "m.py").write_text(FULL_REFERENCE)
    done = _cli("check", str(tmp_path / "m.py"), env=broken_env)
    assert done.returncode == 2
    assert "No module named 'numpy'" in done.stderr
    assert "Score" not in done.stdout


def test_gradescope_says_it_is_not_a_grade(broken_env, tmp_path):
    root = tmp_path / "autograder"
    (root / "submission").mkdir(parents=True)
    (root / "submission" / "modeling_attention.py").write_text(FULL_REFERENCE)
    done = _cli("gradescope", env={**broken_env,
                                   "AUTOGRADER_ROOT": str(root)})
    assert done.returncode == 0, done.stderr
    data = json.loads((root / "results" / "results.json").read_text())
    assert data["score"] == 0
    assert "not your grade" in data["output"]
    assert data["extra_data"]["internal_error"] is True
    assert "numpy" in data["output"]


class _FakeSandbox:
    """Stands for a sandbox whose worker fails in a given way."""

    def __init__(self, result: ProbeResult, user=None, layers=()):
        self.result, self.user, self.layers = result, user, list(layers)
        self.readable: list[str] = []

    def run(self, source, filename, probes):
        return [self.result]


def test_unreadable_folder_is_named_with_the_remedy():
    # Not under pytest's tmp_path, whose base folder is itself closed.
    base = Path(tempfile.mkdtemp(prefix="preflight-"))
    base.chmod(0o755)
    locked = base / "locked"
    (locked / "venv").mkdir(parents=True)
    locked.chmod(0o700)
    fake = _FakeSandbox(ProbeResult("preflight", CRASH,
                                    "the submission exited (code 1)"),
                        user=(65534, 65534), layers=["uid-drop"])
    fake.readable = [str(locked / "venv")]
    if os.stat(locked).st_uid == 65534:
        pytest.skip("the test folder belongs to the worker user")
    with pytest.raises(PreflightError) as error:
        run_preflight(fake)
    shutil.rmtree(base)
    message = str(error.value)
    assert "exited (code 1)" in message
    assert f"cannot read {locked}" in message
    assert "AUTOGRADER_WORKER_USER" in message


def test_wrong_numbers_fail_the_canary():
    import torch
    fake = _FakeSandbox(ProbeResult("preflight", OK,
                                    outputs=[torch.zeros(2, 12)]))
    with pytest.raises(PreflightError, match="canary"):
        run_preflight(fake)


def test_root_only_checkout_grades_the_reference(tmp_path):
    """As root in a mode-700 folder (a TA's container cloning into /root),
    the worker user still runs the kit's venv: the reference scores full
    marks, where it used to score 1/16 with the student blamed."""
    if os.geteuid() != 0:
        pytest.skip("needs root: the worker drops privileges only as root")
    home = tmp_path / "home"
    kit = home / "kit"
    home.mkdir()
    home.chmod(0o700)
    for name in ("autograder", "test_values", "kinds"):
        shutil.copytree(ROOT / name, kit / name)
    shutil.copy(ROOT / "homework.toml", kit)
    (kit / "m.py").write_text(FULL_REFERENCE)
    # The venv inside the closed folder, as `make install` makes it there
    # (hard links: same files, no copy of torch's 1.5 GB where possible).
    venv = Path(sys.prefix)
    copy = subprocess.run(["cp", "-al", str(venv), str(kit / ".venv")],
                          capture_output=True)
    if copy.returncode:
        shutil.copytree(venv, kit / ".venv", symlinks=True)
    _assert_grades_reference_fully(kit / ".venv" / "bin" / "python", kit)


def test_a_jail_that_cannot_be_built_falls_back_without_namespaces():
    from autograder.sandbox.preflight import make_canary
    from autograder.sandbox.protocol import ENVIRONMENT

    class Picky(_FakeSandbox):
        namespaces = True

        def run(self, source, filename, probes):
            if self.namespaces:
                return [ProbeResult("preflight", ENVIRONMENT, "the grader "
                                    "could not lock up the worker: mount")]
            return [ProbeResult("preflight", OK,
                                outputs=[make_canary().expected])]

    picky = Picky(None, layers=["landlock"])
    assert run_preflight(picky) == ["landlock"]
    assert picky.namespaces is False


def test_a_venv_reached_through_a_symlink_grades_the_reference(tmp_path):
    """A venv linked into the checkout (``ln -s ~/venvs/kit .venv``): its
    imports look under the link's path, which the jail must show too."""
    link = tmp_path / "kit" / ".venv"
    link.parent.mkdir()
    link.symlink_to(sys.prefix)
    (tmp_path / "m.py").write_text(FULL_REFERENCE)
    _assert_grades_reference_fully(link / "bin" / "python", tmp_path, ROOT)


def _assert_grades_reference_fully(python: Path, folder: Path,
                                   kit: Path | None = None) -> None:
    """``python -m autograder grade`` of folder/m.py (the reference), with
    the grader from ``kit`` (default: ``folder``), earns every point."""
    from autograder.rubric import load_rubric
    kit = kit or folder
    done = subprocess.run([str(python), "-m", "autograder", "grade", "--out",
                           str(folder / "out"), str(folder / "m.py")],
                          env={**os.environ, "PYTHONPATH": str(kit)},
                          cwd=kit, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    data = json.loads((submission_dir(folder / "out", "m") /
                       "results.json").read_text())
    rubric = load_rubric()
    assert data["score"] == rubric.max_score + rubric.max_bonus


class _UidSandbox:
    """Runs the real canary's sums in this process, failing (as an
    unreadable Python would) when the run's uid is not the account's."""

    def __init__(self, tmp_path, spare_works: bool):
        from autograder.sandbox.worker_uids import WorkerUids
        self.user = (990, 991)
        self.uids = WorkerUids(self.user, range(61_000, 61_002), tmp_path,
                               has_account=lambda uid: False, running=set,
                               mapped=lambda: [range(0, 1 << 32)])
        self.spare_works, self.seen = spare_works, []
        self.layers, self.readable = ["uid-drop"], []

    def run(self, source, filename, probes):
        with self.uids.take() as (uid, _):
            self.seen.append(uid)
            if uid != self.user[0] and not self.spare_works:
                return [ProbeResult("preflight", CRASH, "Permission denied")]
            canary = make_canary()
            return [ProbeResult("preflight", OK,
                                outputs=[canary.expected.clone()])]


def test_a_spare_uid_is_proven_before_workers_run_side_by_side(tmp_path):
    fake = _UidSandbox(tmp_path, spare_works=True)
    assert prove_spare_uids(fake) == ""
    assert fake.seen == [61_000] and fake.uids.spare == [61_000, 61_001]


def test_a_spare_uid_that_fails_the_canary_is_not_used(tmp_path):
    fake = _UidSandbox(tmp_path, spare_works=False)
    warning = prove_spare_uids(fake)
    assert fake.seen == [61_000] and fake.uids.spare == []
    assert "Permission denied" in warning and "share the account" in warning
    with fake.uids.take() as first, fake.uids.take() as second:
        assert first == second == fake.user   # shared, as before
