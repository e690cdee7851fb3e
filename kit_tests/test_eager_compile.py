"""A correct module compiled with ``torch.compile`` earns what it earns
uncompiled, whatever the machine's load: student code runs eagerly while
it is checked (compiling took 7-8 s of a 10 s call, so the same code
scored 0, 14 or 14). The rule is stated in the rubric students read."""
from __future__ import annotations

import time
from pathlib import Path

import torch
import torch.nn as nn

from autograder.config import load_config
from autograder.grade import grade_source
from autograder.local import in_process_runner
from kit_tests.reference_source import FULL_REFERENCE

ROOT = Path(__file__).resolve().parents[1]
# Every forward decorated, and a module compiled where it is built.
COMPILED = FULL_REFERENCE.replace(
    "    def forward(", "    @torch.compile(mode=\"max-autotune\")\n"
    "    def forward(").replace(
    "def gpt2_small_attention():", "@torch.compile\n"
    "def gpt2_small_attention():")


def _scores(source: str) -> tuple[dict, float]:
    start = time.perf_counter()
    grade = grade_source(source, "compiled.py", load_config(),
                         in_process_runner, public_only=True)
    assert not grade.internal_error
    return {t.task.id: t.score for t in grade.tasks}, \
        time.perf_counter() - start


def test_a_compiled_module_scores_as_its_eager_self():
    assert COMPILED.count("@torch.compile") >= 6
    compile_before = torch.compile
    compiled, seconds = _scores(COMPILED)
    plain, plain_seconds = _scores(FULL_REFERENCE)
    assert compiled == plain
    # No compile time: within a few seconds of the eager control.
    assert seconds < plain_seconds + 5, (seconds, plain_seconds)
    # Restored for the student's own process (the notebook's checks).
    assert torch.compile is compile_before
    assert nn.Module.compile is not None


def test_the_rule_is_stated_where_students_read_it():
    rubric = (ROOT / "autograder" / "rubric.toml").read_text()
    assert "`torch.compile`" in rubric and "eagerly" in rubric
