"""Grade many submissions once, through one warm sandbox: the shared
fixture body of the kit's end-to-end grading tests."""
from __future__ import annotations

import contextlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from autograder import batch
from autograder.config import load_config
from autograder.grade import GradeResult


def grade_batch(sources: Mapping[str, str],
                timeouts: Mapping[str, float] | None = None,
                jobs: int = 2, sandbox: Any = None) -> dict[str, GradeResult]:
    """name -> GradeResult of every ``sources`` entry, graded once by the
    real grader (autograder/batch.py) in one shared sandbox (``sandbox``,
    else a new one: starting one costs seconds of CPU), ``jobs`` at a
    time; ``timeouts`` gives a name's seconds per probe (short ones for
    hostile code)."""
    from autograder.sandbox.pool import Sandbox
    config = load_config()
    timeouts = timeouts or {}
    entries = [batch.Entry(name, Path(name.replace("/", "-") + ".py"),
                           source, timeouts.get(name))
               for name, source in sources.items()]
    with contextlib.nullcontext(sandbox) if sandbox else Sandbox() as box:
        graded = batch.grade_all(entries, config,
                                 batch.budgeted_runner(box, config),
                                 jobs=jobs)
    return dict(zip(sources, graded.grades))
