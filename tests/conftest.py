"""Runs the grader's value checks once per session on the implementation
under test, and says which one in pytest's header."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from autograder.config import load_config
from autograder.grade import GradeResult
from autograder import homework
from autograder.local import SCOPE, check_values

IMPL_ENV = "HOMEWORK_IMPL"


def implementation_path() -> Path:
    """The file under test: ``$HOMEWORK_IMPL`` (relative to the current
    directory) or the homework's module (homework.toml's [module] file)."""
    return Path(os.environ.get(IMPL_ENV)
                or homework.current().module).resolve()


def pytest_report_header() -> list[str]:
    return [f"implementation under test: {implementation_path()}",
            f"checks: the grader's items on the public cases ({SCOPE})"]


@pytest.fixture(scope="session")
def graded() -> GradeResult:
    """Every item's verdict on the public cases, computed once."""
    path = implementation_path()
    if not path.is_file():
        pytest.fail(f"no implementation at {path} (set {IMPL_ENV})",
                    pytrace=False)
    grade = check_values(load_config(sets=("public",)), path)
    if grade.internal_error:
        pytest.fail(f"the checker itself failed (not your code):\n"
                    f"{grade.internal_error}", pytrace=False)
    return grade
