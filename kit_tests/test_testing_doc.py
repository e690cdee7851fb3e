"""docs/testing.md's table of which test file covers which module is the
one ``python -m kit.test_table`` computes from the imports (a new module,
a moved import or a renamed test fails here, naming the command that
rewrites it), and every test file the hand-written tables name exists."""
from __future__ import annotations

import re
from pathlib import Path

from kit import test_table

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "testing.md"
HEADING = "## Which test file covers which module"


def _section() -> str:
    text = DOC.read_text(encoding="utf-8")
    assert HEADING in text, f"docs/testing.md lost its '{HEADING}' section"
    return text.split(HEADING, 1)[1].split("\n## ", 1)[0]


def test_the_table_is_the_generators():
    text = DOC.read_text(encoding="utf-8")
    assert test_table.in_doc(text), (
        "docs/testing.md has no generated table: put the lines "
        f"{test_table.BEGIN!r} and {test_table.END!r} where it goes, then "
        "run `python -m kit.test_table --write`")
    assert test_table.in_doc(text) == test_table.table(), (
        "docs/testing.md's module -> test table is stale: run "
        "`python -m kit.test_table --write`")


def test_every_module_has_its_row():
    rows = re.findall(r"^\| `([^`]+\.py)` \|", test_table.table(), re.M)
    modules = sorted(str(p.relative_to(ROOT)) for package in
                     ("autograder", "kit")
                     for p in (ROOT / package).rglob("*.py")
                     if p.name != "__init__.py")
    assert rows == modules


def test_a_row_names_the_tests_that_import_the_module(tmp_path):
    # a made-up checkout: one module, a test importing it inside a
    # function, its own-named test first, and a module no test imports
    (tmp_path / "autograder").mkdir()
    (tmp_path / "kit").mkdir()
    (tmp_path / "kit_tests").mkdir()
    (tmp_path / "autograder" / "__init__.py").write_text("")
    (tmp_path / "autograder" / "thing.py").write_text("")
    (tmp_path / "autograder" / "alone.py").write_text("")
    (tmp_path / "kit_tests" / "test_other.py").write_text(
        "def test_x():\n    from autograder import thing\n")
    (tmp_path / "kit_tests" / "test_thing.py").write_text(
        "import autograder.alone\nimport autograder.thing\n")
    assert test_table.table(tmp_path).splitlines()[2:] == [
        "| `autograder/alone.py` | `test_thing` |",
        "| `autograder/thing.py` | `test_thing`, `test_other` |"]
    (tmp_path / "kit_tests" / "test_thing.py").write_text("")
    assert "| `autograder/alone.py` | none imports it |" in \
        test_table.table(tmp_path)


def test_every_test_file_named_exists():
    present = {p.relative_to(ROOT / "kit_tests").with_suffix("").as_posix()
               for p in (ROOT / "kit_tests").rglob("test_*.py")}
    named = set(re.findall(r"`((?:faults/)?test_\w+)`", _section()))
    assert named, "the section names no test file: the parse is wrong"
    assert sorted(named - present) == [], (
        "docs/testing.md names test files that do not exist (renamed? "
        "update the row, or rerun `python -m kit.test_table --write`)")
