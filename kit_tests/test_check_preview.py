"""``make check``'s preview (``report.check_text``) of a module that does
not import: the cause is said once, above the tasks, not under each of
the items it fails (it was repeated 18 times)."""
from __future__ import annotations

from pathlib import Path

from autograder.config import GradingConfig, load_mistake_messages
from autograder.grade import grade_source
from autograder.local import in_process_runner
from autograder.report.results import IMPORT_FAILED, check_text
from autograder.rubric import load_rubric
from autograder.values import load_cases

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "solutions" / "transformer_lm" / "modeling_attention.py"


def _preview(source: str, tmp_path: Path):
    path = tmp_path / "modeling_attention.py"
    path.write_text(source)
    config = GradingConfig(load_rubric(), load_cases(sets=("public",)),
                           load_mistake_messages())
    grade = grade_source(source, str(path), config, in_process_runner,
                         public_only=True)
    return grade, check_text(grade)


def test_a_syntax_error_is_said_once(tmp_path):
    source = REFERENCE.read_text() + "\ndef broken(:\n    pass\n"
    grade, text = _preview(source, tmp_path)
    assert grade.import_error.startswith("SyntaxError")
    assert text.count("SyntaxError") == 1, text
    assert text.count(IMPORT_FAILED) == 1
    assert text.index(IMPORT_FAILED) < text.index("Task 1")
    items = [c.id for t in load_rubric().tasks for c in t.items]
    assert all(f"[FAIL] {item} " in text for item in items)
    assert grade.score == 0


def test_a_module_that_imports_has_no_import_error(tmp_path):
    grade, text = _preview(REFERENCE.read_text(), tmp_path)
    assert grade.import_error == "" and IMPORT_FAILED not in text
