"""The kit follows the style it grades: pycodestyle-clean everywhere the
students' code, the graders' code and the staff tools live."""
from __future__ import annotations

from pathlib import Path

import pycodestyle
import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ["autograder", "kit", "tests", "transformer_lm", "solutions",
            "kit_tests", "kinds"]


@pytest.mark.parametrize("package", PACKAGES)
def test_package_is_pycodestyle_clean(package: str):
    files = [str(p) for p in sorted((ROOT / package).rglob("*.py"))]
    assert files
    report = pycodestyle.StyleGuide(quiet=True).check_files(files)
    assert report.total_errors == 0, report.get_statistics()
