"""The environment of a kit command run for another homework, as `make
... HOMEWORK=...` runs it: one helper for the tests that start one."""
from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def homework_env(homework: Path) -> dict[str, str]:
    """This process's environment with HOMEWORK selecting ``homework``,
    the checkout on the path and no Gradescope root."""
    env = {k: v for k, v in os.environ.items() if k != "AUTOGRADER_ROOT"}
    env.update(HOMEWORK=str(homework), PYTHONPATH=str(ROOT))
    return env
