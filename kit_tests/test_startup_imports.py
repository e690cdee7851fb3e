"""A run pays only for what its command needs: ``python -m autograder``
re-executes itself before importing torch, and reading a notebook's inline
answers needs no nbformat (whose jsonschema import builds Lark grammars)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from autograder.submission import answers

ROOT = Path(__file__).resolve().parents[1]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


@pytest.mark.e2e   # a command in its own process (make test-all)
def test_the_first_process_reexecutes_before_importing_torch(tmp_path):
    # -X importtime reaches only the first process (the re-executed one is
    # started without it): torch there would be imported twice per run.
    missing = tmp_path / "missing.py"
    run = subprocess.run([sys.executable, "-X", "importtime", "-m",
                          "autograder", "check", str(missing)],
                         capture_output=True, text=True, env=_env(),
                         cwd=tmp_path, timeout=120)
    imported = [line.rsplit("|", 1)[-1].strip()
                for line in run.stderr.splitlines()
                if line.startswith("import time:")]
    assert "autograder.sandbox.cleanenv" in imported
    assert "torch" not in imported and "autograder.cli" not in imported
    assert "no such file" in run.stderr   # the real run still happened


def _notebook(path: Path, cells: list) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.cells = cells
    nbformat.write(nb, str(path))
    return path


def test_plain_json_reading_matches_nbformat(tmp_path):
    cells = [nbformat.v4.new_markdown_cell("**Answer Q1:** first\nline"),
             nbformat.v4.new_code_cell("x = 1"),
             nbformat.v4.new_markdown_cell("continued", metadata={
                 "kit": {"question": "Q1"}}),
             nbformat.v4.new_markdown_cell("**Answer Q3:** three")]
    path = _notebook(tmp_path / "a.ipynb", cells)
    data = json.loads(path.read_text())
    # Jupyter writes sources as lists of lines.
    for cell in data["cells"]:
        if isinstance(cell["source"], str):
            cell["source"] = cell["source"].splitlines(True)
    path.write_text(json.dumps(data))
    fast = answers.collect_answers(path)
    assert fast["Q1"] == "first\nline\n\ncontinued"
    assert fast["Q3"] == "three" and fast["Q2"] == ""
    # The same as nbformat's reading, cell by cell.
    slow = nbformat.read(str(path), as_version=4)
    plain = answers.read_notebook(path)
    assert [c["source"] for c in plain["cells"]] == \
        [c.source for c in slow.cells]


def test_odd_notebooks_still_go_through_nbformat(tmp_path):
    path = tmp_path / "b.ipynb"
    path.write_text(json.dumps({"nbformat": 4, "nbformat_minor": 5,
                                "metadata": {}, "cells": [
                                    {"cell_type": "markdown", "metadata": 7,
                                     "source": "**Answer Q2:** x"}]}))
    assert answers._plain_v4(path.read_text()) is None
    assert answers._plain_v4("{not json") is None


@pytest.mark.e2e   # a command in its own process (make test-all)
def test_collecting_answers_imports_no_nbformat(tmp_path):
    path = _notebook(tmp_path / "c.ipynb", [
        nbformat.v4.new_markdown_cell("**Answer Q2:** two")])
    code = ("import sys; from autograder import cli; "
            "from autograder.submission import answers; "
            f"found = answers.collect_answers({str(path)!r}); "
            "assert found['Q2'] == 'two', found; "
            "assert 'nbformat' not in sys.modules; "
            "assert 'jsonschema' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, env=_env(),
                   timeout=120)
