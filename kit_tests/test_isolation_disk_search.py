"""A submission that hunts the disk for the frozen values and replays them.

The jail shows the worker only the Python installation and its own scratch
folder, so the attack finds nothing and scores 0 on the value checks, even
with the values world-readable. Run as root, the worker also drops to an
unprivileged user, which alone protects values locked as the Gradescope
setup locks them (root-only directory). The control run, with the jail's
filesystem layers off and the files world-readable, shows the attack really
works, so this test fails if isolation ever stops holding.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from autograder import homework
from autograder.config import load_config
from autograder.grade import grade_source, sandbox_runner
from autograder.sandbox.pool import Sandbox
from kit_tests.jail_modes import refusal_without_namespaces

needs_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="privilege drop needs the grader to run as root")

CHEATER = '''\
"""Looks for frozen test values anywhere under SEARCH and replays them."""
import os

import torch
import torch.nn as nn
from safetensors.torch import load_file

SEARCH = {search!r}


def _stolen(x):
    for folder, _, files in os.walk(SEARCH):
        for name in files:
            if not name.endswith(".safetensors"):
                continue
            try:
                tensors = load_file(os.path.join(folder, name))
            except OSError:
                continue
            for key, value in tensors.items():
                if not key.endswith("/x") or value.shape != x.shape:
                    continue
                if torch.equal(value, x):
                    return tensors[key[:-1] + "output"]
                if torch.equal(value.flip(0), x):   # the grader's 2nd call
                    return tensors[key[:-1] + "output"].flip(0)
    return None


class SelfAttention(nn.Module):
    def __init__(self, input_size, hidden):
        super().__init__()
        self.q = nn.Linear(input_size, hidden)
        self.k = nn.Linear(input_size, hidden)
        self.v = nn.Linear(input_size, hidden)

    def forward(self, x):
        found = _stolen(x)
        if found is None:
            return torch.zeros(*x.shape[:2], self.q.out_features)
        return found
'''


@pytest.fixture
def root():
    # Not under pytest's tmp_path: its base directory is root-only, which
    # would hide the files from the worker in the control run too.
    folder = Path(tempfile.mkdtemp(prefix="autograder-root-"))
    folder.chmod(0o755)
    yield folder / "autograder"
    shutil.rmtree(folder)


def _grade_with_values_in(root: Path, mode: int, *,
                          jail: bool = True) -> float:
    """Copy the values under ``root`` with directory mode ``mode`` (files
    world-readable) and grade the cheater against them; return its 1.2
    (forward values) points."""
    values = root / "source" / "test_values"
    shutil.copytree(homework.current().test_values, values)
    for path in values.iterdir():
        path.chmod(0o644)
    for folder in (root, root / "source", values):
        folder.chmod(mode)
    config = load_config(values=values)
    source = CHEATER.format(search=str(root))
    with Sandbox(namespaces=jail, landlock=jail) as sandbox:
        grade = grade_source(source, "modeling_attention.py", config,
                             sandbox_runner(sandbox), name="cheater")
    assert not grade.internal_error, grade.internal_error
    return next(c.applied for t in grade.tasks for c in t.items
                if c.check.id == "1.2")


def test_exposed_values_are_outside_the_jail(root: Path):
    assert _grade_with_values_in(root, 0o755) == 0


@needs_root
@pytest.mark.skipif(   # a string: asked when the test runs, not collected
    "refusal_without_namespaces() is not None",
    reason="without the jail the grader refuses to grade here (a root-only "
    "checkout)")
def test_locked_values_cannot_be_stolen_without_the_jail(root: Path):
    # Where no jail layer is allowed, the privilege drop still protects
    # values locked as the Gradescope setup locks them.
    assert _grade_with_values_in(root, 0o700, jail=False) == 0


@pytest.mark.skipif(   # a string: asked when the test runs, not collected
    "refusal_without_namespaces() is not None",
    reason="without the jail the grader refuses to grade here (a root-only "
    "checkout): the control cannot run")
def test_control_exposed_values_would_be_stolen(root: Path):
    # Proves the attack is real: without the jail and the lock it scores.
    assert _grade_with_values_in(root, 0o755, jail=False) == 3
