"""Which jail modes this machine can grade in, asked of the grader itself."""
from __future__ import annotations

import functools


@functools.lru_cache(maxsize=None)
def refusal_without_namespaces() -> str | None:
    """Why the grader refuses to grade here without namespaces (the
    preflight's message, e.g. a root-only checkout the worker user cannot
    read), or None when it can."""
    from autograder.sandbox.pool import Sandbox
    with Sandbox(namespaces=False) as sandbox:
        return refusal(sandbox)


def refusal(sandbox) -> str | None:
    """Why the grader refuses to grade in ``sandbox`` (its preflight's
    message), or None when it can: asked of a sandbox a test module starts
    anyway, it costs no second one."""
    from autograder.sandbox.preflight import PreflightError, run_preflight
    try:
        run_preflight(sandbox)
    except PreflightError as exc:
        return str(exc).splitlines()[-1].strip()
    return None
