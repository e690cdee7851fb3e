"""The notebook's first code cell: it finds the homework folder from
wherever the notebook runs (the folder, ``assignment/`` in it, the folder
above it as on Colab), or says what to do in one message, and names the
one ``%pip install`` line for missing packages.

The cell is run as built (``kit.generate.notebook.build``) in a fresh
interpreter per case; the kernel run that stops "Run All" at it is in
test_notebook.py."""
from __future__ import annotations

import json
import subprocess
import re
import sys
from pathlib import Path

import pytest

from kit.generate import notebook

ROOT = Path(__file__).resolve().parents[1]
RUN = """\
import json, sys
try:
    exec(compile(open(sys.argv[1]).read(), "setup", "exec"), {})
except Exception as error:
    print(json.dumps({"error": type(error).__name__,
                      "shown": error._render_traceback_()}))
else:
    print(json.dumps({"path": sys.path}))
"""


@pytest.fixture(scope="module")
def setup_cell(tmp_path_factory) -> Path:
    """The built notebook's first code cell, as a file."""
    first = next(c for c in notebook.build().cells if c.cell_type == "code")
    path = tmp_path_factory.mktemp("cell") / "setup.py"
    path.write_text(first.source)
    return path


def _homework(folder: Path) -> Path:
    """A homework folder as the release unpacks it (what the cell looks
    for), with the release's requirements."""
    for name in ("transformer_lm", "autograder", "test_values",
                 "assignment"):
        (folder / name).mkdir(parents=True)
    (folder / "requirements.txt").write_text(
        (ROOT / "kit" / "student" / "requirements.txt").read_text())
    return folder


def _run(cell: Path, cwd: Path, python: str = sys.executable) -> dict:
    done = subprocess.run([python, "-c", RUN, str(cell)], cwd=cwd,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.parametrize("where", ["", "assignment", ".."])
def test_the_homework_folder_is_found_from_where_jupyter_runs(
        setup_cell, tmp_path, where):
    home = _homework(tmp_path / "course" / "attention-homework")
    # "": JupyterLab at the folder; assignment: JupyterHub or VS Code
    # beside the notebook; "..": Colab's /content with the folder uploaded
    found = _run(setup_cell, (home / where).resolve())
    assert found.get("path", [None])[0] == str(home), found


def test_no_homework_folder_is_one_message_saying_what_to_do(
        setup_cell, tmp_path):
    shown = _run(setup_cell, tmp_path)
    assert shown["error"] == "SetupError"
    text = " ".join(shown["shown"])
    assert text.startswith("SETUP FAILED: no homework folder")
    for hint in (str(tmp_path), "transformer_lm/", "make notebook", "%cd"):
        assert hint in text, hint
    assert all(len(line) <= 78 for line in shown["shown"])


def _missing(python: str) -> list[str]:
    """Which of the notebook's packages ``python`` lacks."""
    done = subprocess.run(
        [python, "-c", "import importlib.util as u; print(' '.join(n for n "
         "in ('torch', 'safetensors', 'pycodestyle', 'matplotlib') if "
         "u.find_spec(n) is None))"], capture_output=True, text=True,
        timeout=60)
    return done.stdout.split()


def test_missing_packages_get_one_pip_line(setup_cell, tmp_path):
    # The interpreter under this venv: an environment a student brings.
    python = getattr(sys, "_base_executable", None)
    if not python or not Path(python).exists():
        pytest.skip("no base interpreter to stand for a bare Python")
    missing = _missing(python)
    if not missing:
        pytest.skip(f"{python} has every package the notebook needs")
    home = _homework(tmp_path / "attention-homework")
    shown = _run(setup_cell, home, python)
    assert shown["error"] == "SetupError"
    text = " ".join(shown["shown"])
    # Each as requirements.txt requires it (torch: its range, quoted for
    # the shell), torch's CPU build on Linux.
    wanted = {re.split(r"[<>=]", line)[0]: line.split("#")[0].strip()
              for line in (home / "requirements.txt").read_text(
              ).splitlines() if re.match(r"[a-z]", line) and ";" not in line}
    line = "%pip install " + " ".join(f'"{wanted[name]}"'
                                      for name in missing)
    assert line in text and "restart the kernel" in text, text
    assert ("download.pytorch.org/whl/cpu" in text) == (
        "torch" in missing and sys.platform == "linux"), text
    assert text.count("%pip install") == 1
