"""A passed canary remembered per environment, for ``check`` only
(autograder/sandbox/preflight.py): the same environment skips it, any change of
interpreter path, import path, user or jail settings runs it again, a
malformed entry counts for nothing, and ``grade``/``gradescope`` never
consult it."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from autograder import batch
from autograder.sandbox import preflight
from autograder.sandbox.jail import LAYERS
from kit_tests.reference_source import FULL_REFERENCE

ROOT = Path(__file__).resolve().parents[1]
LAYERS_SEEN = ["uid-drop", "landlock"]


class FakeSandbox:
    def __init__(self, namespaces: bool = True):
        self.user, self.readable = (65534, 65534), ["/usr"]
        self.namespaces, self.landlock = namespaces, True
        self.layers: list[str] = []


@pytest.fixture
def canaries(monkeypatch):
    runs = []

    def fake_run(sandbox, timeout=60.0):
        runs.append(sandbox)
        sandbox.namespaces = False   # as after the no-namespace fallback
        return list(LAYERS_SEEN)
    monkeypatch.setattr(preflight, "run_preflight", fake_run)
    return runs


def test_same_environment_runs_the_canary_once(canaries, tmp_path):
    first = FakeSandbox()
    assert preflight.remembered_preflight(first, folder=tmp_path) == \
        LAYERS_SEEN
    again = FakeSandbox()
    assert preflight.remembered_preflight(again, folder=tmp_path) == \
        LAYERS_SEEN
    assert canaries == [first]
    assert again.namespaces is False   # the fallback it found is kept
    assert (tmp_path / "canary.json").stat().st_mode & 0o077 == 0


def test_another_environment_runs_it_again(canaries, tmp_path,
                                           monkeypatch):
    preflight.remembered_preflight(FakeSandbox(), folder=tmp_path)
    preflight.remembered_preflight(FakeSandbox(namespaces=False),
                                   folder=tmp_path)
    other_user = FakeSandbox()
    other_user.user = (1000, 1000)
    preflight.remembered_preflight(other_user, folder=tmp_path)
    monkeypatch.setattr(sys, "path", ["/elsewhere", *sys.path])
    preflight.remembered_preflight(FakeSandbox(), folder=tmp_path)
    assert len(canaries) == 4


def test_a_malformed_entry_counts_for_nothing(canaries, tmp_path):
    key = preflight.environment_key(FakeSandbox())
    assert "made-up" not in LAYERS
    (tmp_path / "canary.json").write_text(json.dumps(
        {key: {"layers": ["made-up"], "namespaces": True}}))
    assert preflight.remembered_preflight(FakeSandbox(),
                                          folder=tmp_path) == LAYERS_SEEN
    (tmp_path / "canary.json").write_text("{not json")
    preflight.remembered_preflight(FakeSandbox(), folder=tmp_path)
    assert len(canaries) == 2


def test_forget_makes_the_next_check_run_it(canaries, tmp_path):
    preflight.remembered_preflight(FakeSandbox(), folder=tmp_path)
    preflight.forget_preflight(FakeSandbox(), folder=tmp_path)
    preflight.remembered_preflight(FakeSandbox(), folder=tmp_path)
    assert len(canaries) == 2


def test_grading_never_trusts_a_remembered_canary(monkeypatch, tmp_path):
    monkeypatch.setenv(preflight.CACHE_ENV, str(tmp_path))
    monkeypatch.setattr(preflight, "run_preflight",
                        lambda sandbox, timeout=60.0: list(LAYERS_SEEN))
    preflight.remembered_preflight(FakeSandbox())   # passed once

    def broken(sandbox, timeout=60.0):
        raise preflight.PreflightError("the canary failed")
    monkeypatch.setattr(preflight, "run_preflight", broken)
    assert batch.preflight(FakeSandbox(), quiet=True, remember=True) == \
        LAYERS_SEEN   # check's preview
    with pytest.raises(batch.ConfigError, match="canary failed"):
        batch.preflight(FakeSandbox(), quiet=True)   # grade, gradescope


@pytest.mark.e2e   # the CLI in its own process, twice (make test-all)
def test_check_after_a_passed_canary_still_stops_in_a_broken_env(tmp_path):
    # A Python whose packages differ (here numpy missing) is another
    # environment: the remembered canary of the good one does not count.
    (tmp_path / "m.py").write_text(FULL_REFERENCE)
    env = {**os.environ, "PYTHONPATH": str(ROOT),
           preflight.CACHE_ENV: str(tmp_path / "cache")}
    good = subprocess.run([sys.executable, "-m", "autograder", "check",
                           str(tmp_path / "m.py")], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert good.returncode == 0, good.stderr
    assert (tmp_path / "cache" / "canary.json").is_file()
    stub = tmp_path / "stub" / "numpy"
    stub.mkdir(parents=True)
    (stub / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'numpy'\")\n")
    env["PYTHONPATH"] = f"{stub.parent}{os.pathsep}{ROOT}"
    bad = subprocess.run([sys.executable, "-m", "autograder", "check",
                          str(tmp_path / "m.py")], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "canary" in bad.stderr


def test_gradescope_loads_its_inputs_while_the_canary_runs(monkeypatch):
    import threading
    started, loaded = threading.Event(), threading.Event()

    def canary(sandbox, quiet=False, remember=False):
        started.set()
        assert loaded.wait(30), "the inputs were not read meanwhile"
        return list(LAYERS_SEEN)
    monkeypatch.setattr(batch, "preflight", canary)

    def load():
        assert started.wait(30), "the canary had not started"
        loaded.set()
        return "config"
    assert batch.beside_canary(FakeSandbox(), load) == ("config",
                                                        LAYERS_SEEN)


def test_no_grading_after_a_failed_canary_or_input(monkeypatch):
    def failing(sandbox, quiet=False, remember=False):
        raise batch.ConfigError("canary failed")
    monkeypatch.setattr(batch, "preflight", failing)
    with pytest.raises(batch.ConfigError, match="canary failed"):
        batch.beside_canary(FakeSandbox(), lambda: "config")

    def bad_values():
        raise batch.ConfigError("no test cases found")
    with pytest.raises(batch.ConfigError, match="no test cases"):
        batch.beside_canary(FakeSandbox(), bad_values)


def test_a_remembered_canary_leaves_the_sandbox_as_the_real_one(
        tmp_path, monkeypatch):
    """A cached canary restores the fallback and the refused layers, so
    describe_jail says the same thing after a cached check as after a
    real one."""
    class Fake:
        def __init__(self):
            self.user, self.readable = (65534, 65534), ["/usr"]
            self.namespaces, self.landlock = True, True
            self.layers, self.refused, self.fallback = [], [], ""

    def real(sandbox, timeout=60.0):
        sandbox.namespaces = False
        sandbox.fallback = "the jail's namespaces could not be built (x)"
        sandbox.refused = ["namespaces: turned off for this sandbox"]
        sandbox.layers = ["uid-drop", "landlock"]
        return list(sandbox.layers)
    monkeypatch.setattr(preflight, "run_preflight", real)
    first, cached = Fake(), Fake()
    layers = preflight.remembered_preflight(first, folder=tmp_path)
    monkeypatch.setattr(preflight, "run_preflight", None)   # must not run
    assert preflight.remembered_preflight(cached, folder=tmp_path) == layers
    assert vars(cached) == vars(first)
    assert preflight.describe_jail(cached, layers) == \
        preflight.describe_jail(first, layers)


def test_forget_drops_the_entry_of_a_fallen_back_sandbox(canaries,
                                                         tmp_path):
    """forget_preflight after the namespace fallback: cmd_check
    forgets with the same sandbox, whose namespaces the fallback (or the
    cached entry) turned off, which changes environment_key; the entry
    it remembered must still go, or a check whose grading failed in the
    grader's code keeps skipping the canary."""
    for _ in range(2):    # a real run, then a cached one
        sandbox = FakeSandbox()
        preflight.remembered_preflight(sandbox, folder=tmp_path)
        preflight.forget_preflight(sandbox, folder=tmp_path)
    assert len(canaries) == 2
