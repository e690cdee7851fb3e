"""Every check kind ``rubric.toml`` may name. Importing this module
imports each module of the grader that registers kinds, so the registry
(``autograder.checks.registry``) holds the shared kinds; a new shared
kind's module is added to the import below.

A homework may ship kinds only its rubric uses (its profile's ``[data]
kinds``: module files in its own folder, e.g. the attention homework's
``kinds/heads.py``): :func:`register_homework_kinds` imports them, once
per file, and they register themselves through the same registry. The
rubric's loader calls it before it validates a rubric against the kinds.
A homework's modules form one package (``homework_kinds.<homework>``,
its path their folders), so one may import another relatively (``from
.projections import ...``): evidence only that homework's kinds read
lives with them, listed in ``kinds`` like a kind.
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
    paths = [Path(path).resolve() for path in getattr(hw, "kinds", ())]
    if paths:
        _package(hw.name, paths)
    for path in paths:
        if path not in _loaded:
            _loaded[path] = _import(path, hw.name)
        found[path.stem] = _loaded[path]
    _all_listed(hw.name, paths)
    return found


def _all_listed(homework: str, paths: list[Path]) -> None:
    """A sibling a kind imports must be in ``kinds`` too: the release and
    the Gradescope zip ship only the files listed there."""
    prefix = _dotted(HOMEWORK_KINDS, homework) + "."
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if name.startswith(prefix) and file and \
                Path(file).resolve() not in paths:
            raise ImportError(
                f"{file}: imported by the {homework} homework's kinds but "
                f"not listed in its profile's [data] kinds: add it there "
                f"(only the files listed ship with the homework)")


def _dotted(*parts: str) -> str:
    return ".".join(re.sub(r"\W", "_", part) for part in parts)


def _package(homework: str, paths: list[Path]) -> None:
    """The package a homework's kind modules belong to, its path their
    folders: a relative import between them finds the sibling file."""
    folders = {str(path.parent) for path in paths}
    for name, adds in ((HOMEWORK_KINDS, ()),
                       (_dotted(HOMEWORK_KINDS, homework), folders)):
        package = sys.modules.get(name)
        if package is None:
            package = sys.modules[name] = ModuleType(name)
            package.__path__ = []
        package.__path__[:] = sorted({*package.__path__, *adds})


def _import(path: Path, homework: str) -> ModuleType:
    name = _dotted(HOMEWORK_KINDS, homework, path.stem)
    if name in sys.modules:   # already imported by a sibling's import
        return sys.modules[name]
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
