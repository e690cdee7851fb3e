"""Code, tests, catalogue and docs say what things do, not the history that
made them: no issue or pull-request number, no review round or red team in
a ``.py``, ``.toml`` or ``.md`` source of the kit (generated values and
build outputs aside). A number means nothing to a newcomer and goes stale
when the tracker moves; the behaviour it stood for belongs in the words."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SUFFIXES = {".py", ".toml", ".md"}
# Built, installed or generated: not sources anyone edits by hand.
SKIP_DIRS = {".git", ".venv", "build", "dist", "grades", "test_values",
             "__pycache__", ".pytest_cache", "node_modules"}

HISTORY = re.compile(
    r"\b(?:issues?|pull request|PR)\s?#?\d+"          # "issue 19", "PR #4"
    r"|(?<![\w&:'\"=#])#\d{1,5}\b(?![;}'\"\w])"       # "#27" but no colour
    r"|\bround[- ]?\d+\b"                              # "round 2", "round-2"
    r"|\bred[- ]team\b",
    re.IGNORECASE)


def sources(root: Path = ROOT) -> list[Path]:
    """Every hand-edited .py, .toml and .md file under ``root``."""
    found = []
    for path in sorted(root.rglob("*")):
        parts = path.relative_to(root).parts
        if path.suffix in SUFFIXES and path.is_file() and not any(
                part in SKIP_DIRS for part in parts[:-1]):
            found.append(path)
    return found


def citations(text: str) -> list[tuple[int, str]]:
    """(line number, line) of every line of ``text`` citing history."""
    return [(number, line.strip())
            for number, line in enumerate(text.splitlines(), 1)
            if HISTORY.search(line)]


@pytest.mark.parametrize("line", [
    "# a fix (issue 19)", "see Issue #27.", "(issues 16 and 19)",
    "fixed in PR #4", "# as #27 asked", "the round-2 layers",
    "Round 3's attack", "as the red team's SIGKILL did"])
def test_history_is_found(line):
    assert citations(line) == [(1, line)]


@pytest.mark.parametrize("line", [
    "fill:#333}", "stroke='#444'", "color=\"#4c72b0\"", "(#3b78c2)",
    "&#60;script&#62;", "border:1px solid #ddd;", "torch.round(x, 2)",
    "## A heading", "an issue of the grader", "issued 3 times"])
def test_colours_entities_and_plain_words_are_not_history(line):
    assert citations(line) == []


def test_the_scan_covers_every_kind_of_source():
    names = {path.relative_to(ROOT).as_posix() for path in sources()}
    assert {"autograder/rubric.toml", "README.md",
            "kit_tests/conftest.py"} <= names
    assert not any(name.startswith("test_values/") for name in names)


def test_no_source_cites_an_issue_or_a_review_round():
    this = Path(__file__).resolve()    # its examples cite history
    found = [f"{path.relative_to(ROOT)}:{number}: {line}"
             for path in sources() if path != this
             for number, line in citations(path.read_text(errors="replace"))]
    assert not found, (
        "say what the code does instead of the history that made it (an "
        "issue's number, a review round):\n  " + "\n  ".join(found))
