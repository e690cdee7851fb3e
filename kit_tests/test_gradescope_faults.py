"""Faults of the Gradescope image: the grader's failure is always shown as
the grader's, never as a score and never as nothing.

The zip is laid out as ``/autograder`` (kit_tests/test_gradescope.py's
helpers) and ``run_autograder`` run as Gradescope runs it; then its hidden
values are taken away or damaged, or the run is stopped with TERM, INT or
KILL while the real grader is grading the reference.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kit_tests.test_gradescope import (REFERENCE, _autograder_dir, _run,
                                       archive)

pytestmark = pytest.mark.e2e
__all__ = ["archive"]   # the fixture, shared with test_gradescope.py


def _no_score(results: dict) -> None:
    """The grader's apology: a valid file that gives no score."""
    assert results["score"] == 0
    assert all(t["score"] == 0 for t in results["tests"])
    assert results["output_format"] == "md" and results["output"]
    assert results["extra_data"].get("internal_error") or \
        results["extra_data"].get("fallback")


@pytest.mark.parametrize("damage", ["missing", "damaged", "unlisted"])
def test_no_hidden_values_no_score(archive, tmp_path, damage):
    # Graded on the public cases alone, the reference would get a
    # plausible full score: the grader refuses instead.
    root = _autograder_dir(archive, tmp_path)
    shutil.copy2(REFERENCE, root / "submission" / "modeling_attention.py")
    values = root / "source" / "test_values"
    hidden = values / "hidden.safetensors"
    if damage == "missing":
        hidden.unlink()
    elif damage == "damaged":
        data = bytearray(hidden.read_bytes())
        data[len(data) // 2] ^= 0xFF
        hidden.write_bytes(bytes(data))
    else:   # the manifest no longer lists the hidden file
        manifest = json.loads((values / "manifest.json").read_text())
        del manifest["files"]["hidden.safetensors"]
        (values / "manifest.json").write_text(json.dumps(manifest))
    results = _run(root)
    _no_score(results)
    assert "not your grade" in results["output"]
    assert "hidden" in results["output"]


def _start(root: Path) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "AUTOGRADER_VALUES")}
    env.update(AUTOGRADER_ROOT=str(root), AUTOGRADER_PYTHON=sys.executable)
    return subprocess.Popen([str(root / "run_autograder")], cwd=root,
                            env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


def _grading(run: subprocess.Popen, deadline: float = 120.0
             ) -> tuple[int, int]:
    """(timeout's pid, the grader's python pid) once the grader has
    started its sandbox (it is grading); fails if it never does."""
    end = time.monotonic() + deadline
    while time.monotonic() < end and run.poll() is None:
        for wrapper in _children(run.pid):
            for python in _children(wrapper):
                if _children(python):   # the fork server: grading
                    return wrapper, python
        time.sleep(0.05)
    pytest.fail("the grader never started grading")


# How long a stopped run may take to end: generous (a loaded machine is
# slow), what matters is that it ends.
STOP_S = 300.0


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie has ended)."""
    try:
        return "zombie" not in Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False


def _sweep(pgid: int) -> None:
    # What the killed grader left (its group: `timeout` leads one).
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _results(root: Path) -> dict:
    return json.loads((root / "results" / "results.json").read_text())


def _provisional(results: dict) -> None:
    _no_score(results)
    assert results["extra_data"]["provisional"] is True
    assert "did not finish" in results["output"]
    assert "not your score" in results["output"]


def test_the_apology_is_in_place_before_grading(archive, tmp_path):
    root = _autograder_dir(archive, tmp_path)
    shutil.copy2(REFERENCE, root / "submission" / "modeling_attention.py")
    # an old results.json (a previous run's full marks) must not survive
    (root / "results" / "results.json").write_text('{"score": 17}')
    run = _start(root)
    try:
        wrapper, _ = _grading(run)
        _provisional(_results(root))
        run.send_signal(signal.SIGKILL)   # the harness dies with no trap
        run.wait(30)
    finally:
        _sweep(wrapper)
        _sweep(run.pid)
    _provisional(_results(root))


@pytest.mark.parametrize("sig,status", [(signal.SIGTERM, 143),
                                        (signal.SIGINT, 130)])
def test_stopped_run_leaves_the_apology(archive, tmp_path, sig, status):
    root = _autograder_dir(archive, tmp_path)
    shutil.copy2(REFERENCE, root / "submission" / "modeling_attention.py")
    run = _start(root)
    try:
        wrapper, python = _grading(run)
        run.send_signal(sig)
        _, err = run.communicate(timeout=STOP_S)
        assert run.returncode == status, err
        assert "received" in err, err
        # the grader was stopped too, not left running (it may take a
        # moment to go on a loaded machine)
        end = time.monotonic() + STOP_S
        while _alive(python) and time.monotonic() < end:
            time.sleep(0.05)
        assert not _alive(python), f"the grader ({python}) still runs"
    finally:
        _sweep(wrapper)
        _sweep(run.pid)
    _provisional(_results(root))


def test_grader_killed_is_the_graders_failure(archive, tmp_path):
    # kill -9 of the grader alone: run_autograder tells the failure, with
    # its exit status, never a score
    root = _autograder_dir(archive, tmp_path)
    shutil.copy2(REFERENCE, root / "submission" / "modeling_attention.py")
    run = _start(root)
    try:
        wrapper, python = _grading(run)
        os.kill(python, signal.SIGKILL)
        _, err = run.communicate(timeout=STOP_S)
    finally:
        _sweep(wrapper)
        _sweep(run.pid)
    assert run.returncode == 0
    results = _results(root)
    _no_score(results)
    assert results["extra_data"]["grader_exit_code"] == 128 + 9
    assert "autograder failed" in results["output"]
    assert "Traceback" not in err
