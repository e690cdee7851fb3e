"""Every check kind ``rubric.toml`` may name. Importing this module
imports each module of the grader that registers kinds, so the registry
(``autograder.checks.registry``) holds the shared kinds; a new shared
kind's module is added to the import below.

A homework may ship kinds only its rubric uses (its profile's ``[data]
kinds``: module files in its own folder, e.g. the attention homework's
``kinds/heads.py``): :func:`register_homework_kinds` imports them, once
per file, and they register themselves through the same registry. The
rubric's loader calls it before it validates a rubric against the kinds.
"""
from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

# Each of these modules registers its kinds when imported.
from autograder.checks import values, source  # noqa: F401
from autograder.checks.entries import Check
from autograder.checks.registry import KINDS, KindSpec

# The package name a homework's kind modules are imported under.
HOMEWORK_KINDS = "homework_kinds"
_loaded: dict[Path, ModuleType] = {}


def kind(check: Check) -> KindSpec:
    """The registered implementation of ``check.kind`` in its section."""
    return KINDS[(check.section, check.kind)]


def register_homework_kinds(hw: Any) -> dict[str, ModuleType]:
    """Import the homework ``hw``'s own kind modules (its ``kinds``
    paths), each once per process: they register their kinds. Returns
    stem -> module. An unreadable or failing module is an ImportError
    naming the file and the profile's key."""
    found = {}
    for path in getattr(hw, "kinds", ()):
        path = Path(path).resolve()
        if path not in _loaded:
            _loaded[path] = _import(path, hw.name)
        found[path.stem] = _loaded[path]
    return found


def _import(path: Path, homework: str) -> ModuleType:
    safe = [re.sub(r"\W", "_", part) for part in (homework, path.stem)]
    name = ".".join((HOMEWORK_KINDS, *safe))
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path}: not a Python module ([data] kinds of "
                          f"the {homework} homework's profile)")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module   # its dataclasses' annotations resolve
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module
