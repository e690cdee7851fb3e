"""Before any test: every generated file must be in step with what
generates it (kit/generated.py), else one message says what to run."""
from __future__ import annotations

import pytest


def pytest_sessionstart(session: pytest.Session) -> None:
    if hasattr(session.config, "workerinput"):   # an xdist worker
        return
    from kit.generated import stale
    lines = stale()
    if lines:
        pytest.exit("generated files are stale:\n  " + "\n  ".join(lines)
                    + "\n(`make generate` runs them all, then `make test`)",
                    returncode=1)
