"""The notebook's check cell: one task's verdict, shown once, its lines
wrapped at word boundaries (JupyterLab breaks long output lines anywhere,
mid-word included), the same text ``run_check`` prints or raises; the
grader's verdict, deductions and bonus included (a PEP 8 slip or a wrong
shape comment never shows "passed"), and a module that does not import
said once."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from autograder.local import TASK_SCOPE
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
    assert TASK_SCOPE in " ".join(text.split())
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


def _reference_with(old: str, new: str) -> str:
    source = REFERENCE.read_text()
    assert source.count(old) == 1, old
    return source.replace(old, new)


# One slip each on the reference's SelfAttention.forward: the values stay
# right, so only a deduction tells (it also costs 1.2's bonus).
SLIPS = {
    "E261": ("return probs @ v  # [bs, seq, hidden]",
             "return probs @ v # [bs, seq, hidden]", "1.pep8", "E261"),
    "shape": (")  # [bs, seq, seq]\n        return probs",
              ")  # [bs, seq, hidden]\n        return probs", "1.shapes",
              "comment claims [bs, seq, hidden]"),
}


@pytest.mark.parametrize("slip", list(SLIPS))
def test_a_deduction_never_shows_passed(slip, tmp_path):
    old, new, deduction, said = SLIPS[slip]
    path = tmp_path / "slip.py"
    path.write_text(_reference_with(old, new))
    for task_id in ("1.1", "1.2"):   # every cell of the class says it
        shown = check(task_id, path)
        text = " ".join(str(shown).split())
        assert not shown.passed
        assert text.startswith(f"Task {task_id}: its item passed on the "
                               f"public cases, but deductions take 1 point")
        assert f"✘ {deduction} (deduction: -1 point)" in text
        assert said in text
        with pytest.raises(AssertionError):
            run_check(task_id, path)
    text = " ".join(str(check("1.2", path)).split())
    assert "✘ 1.bonus (bonus, not earned: +1 point)" in text
    assert "1.bonus" not in str(check("1.1", path))   # 1.2's bonus


def test_the_reference_passes_with_its_bonus_and_no_deduction():
    text = " ".join(str(check("1.2", REFERENCE)).split())
    assert text.startswith("Task 1.2: passed on the public cases")
    assert "✔ 1.bonus (bonus: +1 point)" in text
    assert "✔ 1.pep8 (deduction, not taken: -1 point)" in text
    assert "✘" not in text


def test_a_module_that_does_not_import_is_said_once(tmp_path):
    path = tmp_path / "broken.py"
    path.write_text(_reference_with(
        "return probs @ v  # [bs, seq, hidden]",
        "return probs @ v  # [bs, seq, hidden]\n    x = ("))
    for task_id in ("1.1", "2.3", "3.4"):
        shown = check(task_id, path)
        text = str(shown)
        assert not shown.passed
        assert text.startswith(f"Task {task_id}: fix the module first")
        assert text.count("was never closed") == 1, text
        assert "✘" not in text and "✔" not in text
