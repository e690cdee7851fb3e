"""Grade many submissions once, through one warm sandbox: the shared
fixture body of the kit's end-to-end grading tests."""
from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor

from autograder.config import load_config
from autograder.grade import GradeResult, grade_source, sandbox_runner


def grade_batch(sources: Mapping[str, str],
                timeouts: Mapping[str, float] | None = None,
                jobs: int = 2) -> dict[str, GradeResult]:
    """name -> GradeResult of every ``sources`` entry, graded once by the
    real grader in one shared sandbox, ``jobs`` at a time; ``timeouts``
    gives a name's seconds per probe (short ones for hostile code)."""
    from autograder.sandbox.pool import Sandbox
    config = load_config()
    timeouts = timeouts or {}
    with Sandbox() as sandbox:
        runner = sandbox_runner(sandbox)

        def one(name: str) -> tuple[str, GradeResult]:
            filename = name.replace("/", "-") + ".py"
            return name, grade_source(sources[name], filename, config,
                                      runner, name=name,
                                      timeout=timeouts.get(name))

        with ThreadPoolExecutor(jobs) as pool:
            return dict(pool.map(one, sources))
