"""The demo's example submissions are the catalogue group ``examples``:
edits of the live reference, written by ``python -m kit.corpus.examples``."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from autograder import homework
from kit.corpus.examples import ExampleError, build_examples, example_sources
from kit.variants import ROOT

REFERENCE = homework.staff().reference


def test_every_example_is_the_reference_with_its_mistake(tmp_path: Path):
    reference = REFERENCE.read_text()
    paths = build_examples(tmp_path)
    assert {p.stem for p in paths} >= {"no_scale", "mask_diagonal",
                                       "syntax_error"}
    for path in paths:
        source = path.read_text()
        assert source.startswith("# Example submission: ")
        assert source != reference and "class CausalAttention" in source
    with pytest.raises(SyntaxError):
        compile((tmp_path / "syntax_error.py").read_text(), "x", "exec")
    compile((tmp_path / "no_scale.py").read_text(), "x", "exec")


def test_an_edit_that_no_longer_matches_is_an_error(tmp_path: Path):
    (tmp_path / "examples.toml").write_text(
        '[stale]\nabout = "x"\nedits = [["text not in the reference", "y"]]\n')
    with pytest.raises(ExampleError, match=r"\[stale\].*appears 0 times"):
        example_sources(tmp_path)


def test_the_command_writes_build_examples(tmp_path: Path):
    done = subprocess.run([sys.executable, "-m", "kit.corpus.examples",
                           "--out", str(tmp_path)], cwd=ROOT,
                          capture_output=True,
                          text=True, env={"PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    assert sorted(p.stem for p in tmp_path.glob("*.py")) == \
        sorted(example_sources())
