"""docs/testing.md's table of which test file covers which module: every
module of the grader and the staff tools has its row, and every test
file a row names exists (a new module, or a renamed test, fails here
naming what to update)."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "testing.md"
HEADING = "## Which test file covers which module"
PACKAGES = ("autograder", "kit")


def _section() -> str:
    text = DOC.read_text(encoding="utf-8")
    assert HEADING in text, f"docs/testing.md lost its '{HEADING}' section"
    return text.split(HEADING, 1)[1].split("\n## ", 1)[0]


def _rows() -> dict[str, list[str]]:
    """First cell -> the test files of its row (module rows only)."""
    rows = {}
    for line in _section().splitlines():
        cells = line.split("|")
        if len(cells) < 4 or not cells[1].strip().startswith("`"):
            continue
        first = re.findall(r"`([^`]+)`", cells[1])
        tests = re.findall(r"`([^`]+)`", cells[2])
        if first and first[0].endswith(".py"):
            rows[first[0]] = tests
    return rows


def _modules() -> set[str]:
    return {str(p.relative_to(ROOT)) for package in PACKAGES
            for p in (ROOT / package).rglob("*.py")
            if p.name != "__init__.py"}


def test_every_module_has_its_row():
    listed, modules = set(_rows()), _modules()
    missing = sorted(modules - listed)
    gone = sorted(listed - modules)
    assert not missing, (
        "docs/testing.md's table has no row for: " + ", ".join(missing) +
        " (add `| `path` | `test_...` |` naming the tests that cover it)")
    assert not gone, (
        "docs/testing.md's table lists modules that no longer exist: "
        + ", ".join(gone) + " (remove or rename their rows)")


def test_every_test_file_named_exists():
    tests_dir = ROOT / "kit_tests"
    present = {p.stem for p in tests_dir.rglob("test_*.py")}
    wrong = sorted({f"{module}: {name}" for module, names in _rows().items()
                    for name in names
                    if name.startswith("test_") and name not in present})
    assert not wrong, ("docs/testing.md names test files that do not "
                       "exist (renamed? update the row): " + ", ".join(wrong))
    empty = sorted(m for m, names in _rows().items() if not names)
    assert not empty, f"rows naming no test file: {', '.join(empty)}"


def test_the_table_is_read():
    # The parse above must see the table, or the tests pass vacuously.
    rows = _rows()
    assert "autograder/grade.py" in rows and len(rows) == len(_modules())
