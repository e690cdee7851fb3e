"""Every check kind ``rubric.toml`` may name. Importing this module
imports each module that registers kinds, so the registry
(``autograder.checks.registry``) is complete; a new kind's module is
added to the import below.
"""
from __future__ import annotations

# Each of these modules registers its kinds when imported.
from autograder.checks import (values, dropout, causal, heads,  # noqa: F401
                               size, source)
from autograder.checks.entries import Check
from autograder.checks.registry import KINDS, KindSpec


def kind(check: Check) -> KindSpec:
    """The registered implementation of ``check.kind`` in its section."""
    return KINDS[(check.section, check.kind)]
