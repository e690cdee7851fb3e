"""The notebook's check cell: one task's verdict, shown once, its lines
wrapped at word boundaries (JupyterLab breaks long output lines anywhere,
mid-word included), the same text ``run_check`` prints or raises."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from autograder.local import SCOPE
from kit import variants
from autograder.notebook_checks import WIDTH, Verdict, check, run_check, wrap

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "solutions" / "transformer_lm" / "modeling_attention.py"


def _words(text: str) -> list[str]:
    return text.split()


@pytest.mark.parametrize("line", [
    "    - ✘ public case `sa_course` (course-sized case): the output of "
    "forward(x) differs at 135 of 135 positions; largest difference 0.61",
    "✘ 3.4 (1 point) your MultiHeadAttention(768, 768, 1024, 0.1, 12, "
    "qkv_bias=True): 12 heads of 64, 2,362,368 parameters",
    "short line",
    "x" * 100,   # one word longer than a line stays whole
])
def test_wrap_breaks_only_between_words(line):
    wrapped = wrap(line)
    assert _words(wrapped) == _words(line)   # no word cut or joined
    lines = wrapped.split("\n")
    assert all(len(part) <= WIDTH or " " not in part.strip()
               for part in lines)
    indent = len(line) - len(line.lstrip(" "))
    hang = 2 if line.lstrip().startswith(("- ", "✘ ")) else 0
    assert all(part.startswith(" " * (indent + hang)) for part in lines[1:])


def test_a_failing_task_is_one_verdict_with_its_mistake(tmp_path):
    path = tmp_path / "no_scale.py"
    path.write_text(variants.load_all()["examples/no_scale"].source())
    shown = check("1.2", path)
    assert isinstance(shown, Verdict) and not shown.passed
    text = repr(shown)
    assert text.startswith("Task 1.2: 1 of 1 item failed")
    assert SCOPE in text
    assert text.count("Common mistake `no_scale`") == 1
    assert re.search(r"expected \S+, got \S+", " ".join(text.split()))
    assert all(len(line) <= WIDTH for line in text.splitlines())
    with pytest.raises(AssertionError) as raised:
        run_check("1.2", path)
    assert str(raised.value) == text    # otter's test shows the same words


def test_a_passing_task_prints_once(capsys):
    shown = check("3.4", REFERENCE)
    assert shown.passed and str(shown).startswith("Task 3.4: passed")
    assert "✘" not in str(shown)
    assert capsys.readouterr().out == ""   # check shows, never prints
    run_check("3.4", REFERENCE)
    assert capsys.readouterr().out == str(shown) + "\n"


def test_the_html_form_escapes_and_wraps_at_words():
    shown = Verdict("1.1", False, "Task 1.1: got <b>&</b>")
    html = shown._repr_html_()
    assert "&lt;b&gt;&amp;&lt;/b&gt;" in html and "<b>" not in html
    assert "word-break: normal" in html and "pre-wrap" in html
