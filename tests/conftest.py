"""Shows which implementation the tests run on."""
from __future__ import annotations

from .adapters import implementation_path


def pytest_report_header() -> str:
    return f"attention implementation: {implementation_path()}"
