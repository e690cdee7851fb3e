"""The one list of packages a submission may import
(``autograder/imports.toml``, read by ``autograder/submission/imports.py``):
what it refuses and lets through, ``check``'s and ``make submission``'s
refusal naming the package, the words ``make facts`` writes from it, and
every grader environment pinning every package on it."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from autograder import homework
from autograder.submission import imports
from kit.generate import facts

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = (ROOT / "solutions" / "transformer_lm" /
             "modeling_attention.py").read_text()
ENVIRONMENTS = [ROOT / "requirements.txt",
                ROOT / "autograder" / "gradescope" / "requirements.txt"]
# The students' environment takes a range where the grader pins one
# (torch: whatever the platform has, within the range the kit's checks
# hold on): it must require every package, the grader's version included.
STUDENT = ROOT / "kit" / "student" / "requirements.txt"
ALLOWED = imports.load_allowed()


def _pins(path: Path) -> set[str]:
    return {line.split("#", 1)[0].strip()
            for line in path.read_text().splitlines()} - {""}


def test_the_list_names_the_packages_the_rubric_invites():
    assert {"torch", "einops"} <= set(ALLOWED.packages) and ALLOWED.stdlib
    assert homework.current().imports == ROOT / "autograder/imports.toml"


@pytest.mark.parametrize("path", ENVIRONMENTS, ids=lambda p: str(
    p.relative_to(ROOT)))
def test_every_grader_environment_pins_every_package_on_the_list(path):
    missing = set(ALLOWED.packages.values()) - _pins(path)
    assert not missing, (f"{path.relative_to(ROOT)} lacks {sorted(missing)}"
                         f": add the line(s) autograder/imports.toml pins")


def test_the_student_environment_allows_every_pinned_version():
    from packaging.requirements import Requirement
    wanted = {r.name: r for r in map(Requirement, _pins(STUDENT))}
    for pin in map(Requirement, ALLOWED.packages.values()):
        assert pin.name in wanted, f"{STUDENT.name} lacks {pin.name}"
        version = next(iter(pin.specifier)).version
        assert wanted[pin.name].specifier.contains(version), (
            f"{STUDENT.name}'s {wanted[pin.name]} excludes the grader's "
            f"{pin}")


def test_allowed_imports_pass_and_others_are_named_with_their_line():
    source = ("import math\nimport torch.nn.functional as F\n"
              "from einops import rearrange\nfrom typing import Any\n"
              "import functools, dataclasses\nfrom . import sibling\n")
    assert imports.refused(source) == []
    bad = source + "import scipy.linalg\nimport numpy as np\nimport scipy\n"
    assert imports.refused(bad) == [(7, "scipy"), (8, "numpy")]
    text = imports.refusal(bad)
    assert "`scipy` (line 7)" in text and "`numpy` (line 8)" in text
    assert "`einops`" in text and "the Python standard library" in text
    assert imports.refusal(source) == ""


def test_imports_the_grader_never_runs_are_not_refused():
    # A fallback for a missing package, and code under the main guard.
    source = ("try:\n    import scipy\nexcept ImportError:\n"
              "    scipy = None\n"
              "if __name__ == '__main__':\n    import matplotlib\n"
              "else:\n    import numpy\n")
    assert imports.refused(source) == [(8, "numpy")]
    # a try that does not catch ImportError does run its import
    assert imports.refused("try:\n    import scipy\nexcept KeyError:\n"
                           "    pass\n") == [(2, "scipy")]
    # unparsable code: the import check says why, not this one
    assert imports.refused("import scipy\ndef f(:\n") == []


def test_the_rubric_and_the_student_readme_say_the_list():
    words = imports.allowed_words()
    assert words == "the Python standard library, `torch` and `einops`"
    rubric = (ROOT / "autograder" / "rubric.toml").read_text()
    block = rubric.split("<!-- facts:allowed-imports -->")[1]
    block = block.split("<!-- /facts -->")[0]
    assert all(line.startswith("#   ") for line in block.splitlines()[1:])
    assert "`einops`" in block and "the Python standard" in block
    assert "the like are fine" not in rubric
    readme = (ROOT / "kit" / "student" / "README.md").read_text()
    assert "<!-- facts:allowed-imports -->\nA submission may import" in readme
    assert facts.stale(facts.load_rubric()) == []


def test_a_comment_block_is_refilled_with_its_prefix():
    text = "# x\n#   <!-- facts:allowed-imports -->\n#   old\n" \
           "#   <!-- /facts -->\n"
    filled = facts.fill(text, facts.load_rubric())
    assert "old" not in filled and "#   A submission may import" in filled
    assert facts.fill(filled, facts.load_rubric()) == filled


def _cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "autograder", *args],
                          capture_output=True, text=True, cwd=cwd, env=env,
                          timeout=300)


def test_check_refuses_an_import_off_the_list_before_grading(tmp_path):
    path = tmp_path / "modeling_attention.py"
    path.write_text("import scipy  # a helper\n" + REFERENCE)
    done = _cli("check", str(path))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "NOT checked" in done.stderr and "`scipy` (line 1)" in \
        done.stderr
    assert "/16" not in done.stdout   # no score printed


EINOPS = importlib.util.find_spec("einops") is not None
EINOPS_SOURCE = REFERENCE.replace(
    "import torch\n", "import torch\nfrom einops import rearrange\n", 1)


@pytest.mark.e2e
@pytest.mark.skipif(not EINOPS, reason="einops is not installed here: "
                    "`make install` installs requirements.txt, which pins it")
def test_einops_gets_the_same_score_from_check_and_grade(tmp_path):
    assert "from einops import rearrange" in EINOPS_SOURCE
    path = tmp_path / "modeling_attention.py"
    path.write_text(EINOPS_SOURCE)
    checked = _cli("check", str(path))
    assert checked.returncode == 0, checked.stderr
    out = tmp_path / "out"
    graded = _cli("grade", "--public-only", "--out", str(out), str(path))
    assert graded.returncode == 0, graded.stderr
    row = (out / "grades.csv").read_text().splitlines()[1].split(",")
    # the same score: full marks and the bonus, by both
    assert row[1:3] == ["17", "16"], row
    assert "public: 16 / 16 points (+1 bonus)" in checked.stdout
