"""Build the submission's module, in the current process.

This module executes untrusted code: call it only inside the sandbox's
worker process (``autograder/sandbox/worker_jail.py``), never in the
grading parent. It compiles the submission from a string (after a
privilege drop the file itself may be unreadable), registers the source
with ``linecache`` so tracebacks show the student's lines, and turns what
the submission raises into a student-facing status and message.
"""
from __future__ import annotations

import ast
import linecache
import sys
import traceback
import types
import warnings
from typing import Any, Callable

from autograder.sandbox.limits import LIMITS
from autograder.sandbox.protocol import CRASH, ERROR, IMPORT_ERROR, MEMORY
from autograder.sandbox.safe_type import is_a, type_name

# One name for both copies (plain and traced): a module-level check of
# __name__ cannot tell them apart. The same for every homework: the worker
# needs no homework to name it.
MODULE_NAME = "student_module"
_MEMORY_HINTS = ("can't allocate memory", "not enough memory",
                 "out of memory", "cannot allocate memory")


class ImportFailure(Exception):
    """The submission could not be imported; ``str(self)`` says why."""

    def __init__(self, message: str, status: str = IMPORT_ERROR):
        super().__init__(message)
        self.status = status


def register_source(source: str, filename: str) -> None:
    """Make ``filename`` resolvable by linecache/traceback without disk I/O.

    ``mtime=None`` stops ``linecache.checkcache`` from dropping the entry
    because the (possibly unreadable) file differs or is missing.
    """
    linecache.cache[filename] = (len(source), None,
                                 source.splitlines(True), filename)


def load_module(source: str, filename: str, *, name: str = MODULE_NAME,
                tree: ast.Module | None = None,
                extra_globals: dict[str, Any] | None = None,
                link: Callable[[types.CodeType, dict], types.CodeType]
                | None = None) -> types.ModuleType:
    """Compile ``source`` (or an instrumented ``tree`` of it) as a fresh
    module and execute it; ``link`` may rewrite the compiled code, given
    the module's namespace, before it runs. Raises ImportFailure with a
    student-facing message on a syntax error or an exception at import
    time."""
    register_source(source, filename)
    try:
        with warnings.catch_warnings():
            # The instrumented tree calls constants (shape_recorder.link): a
            # "str object is not callable" warning per call otherwise.
            warnings.simplefilter("ignore", SyntaxWarning)
            code = compile(tree if tree is not None else source, filename,
                           "exec", dont_inherit=True)
    except SyntaxError as exc:
        raise ImportFailure(format_syntax_error(exc)) from None
    module = types.ModuleType(name)
    module.__file__ = filename
    module.__dict__.update(extra_globals or {})
    if link is not None:
        code = link(code, module.__dict__)
    sys.modules[name] = module    # some code looks itself up by __name__
    try:
        exec(code, module.__dict__)
    except SystemExit as exc:
        raise ImportFailure(exit_message(exc, "import"), CRASH) from None
    except BaseException as exc:   # noqa: B902 - student code may raise anything
        status, message, _, _ = describe_exception(exc, filename)
        raise ImportFailure(message,
                            MEMORY if status == MEMORY else IMPORT_ERROR
                            ) from None
    return module


def format_syntax_error(exc: SyntaxError) -> str:
    """``SyntaxError: invalid syntax (line 12)`` plus the offending line."""
    where = f" (line {exc.lineno})" if exc.lineno else ""
    text = f"{type(exc).__name__}: {exc.msg}{where}"
    if exc.text:
        text += f"\n  line {exc.lineno}: {exc.text.strip()}"
    return _cap(text)


def exit_message(exc: SystemExit, during: str) -> str:
    """The message for ``sys.exit()`` called by the submission."""
    code = exc.code if is_a(exc.code, int) else (
        0 if exc.code is None else 1)
    return f"the submission exited (code {code}) during {during}"


def describe_exception(exc: BaseException, filename: str
                       ) -> tuple[str, str, str, int | None]:
    """Status, message, exception type name and last student line of
    ``exc``. NotImplementedError keeps its message verbatim (the skeleton's
    "Task 1.2 not implemented yet: ..."); others read ``Type: message`` plus
    the last frames in the student file."""
    name = type_name(exc)
    try:
        text = str(exc)
    except BaseException:   # noqa: B902 - a hostile __str__
        text = "<unprintable message>"
    every = traceback.extract_tb(exc.__traceback__)
    frames = [f for f in every if f.filename == filename]
    line = frames[-1].lineno if frames else None
    # The student's own raise (the skeleton's "not implemented yet"), not
    # one a library raised (a ModuleList called: it has no forward).
    if is_a(exc, NotImplementedError) and text and every and \
            every[-1].filename == filename:
        return ERROR, _cap(text), name, line
    status = MEMORY if _is_memory_error(exc, text) else ERROR
    message = f"{name}: {text}" if text else name
    for frame in frames[-LIMITS.student_frames:]:
        message += f"\n  line {frame.lineno}, in {frame.name}: " \
                   f"{(frame.line or '').strip()}"
    return status, _cap(message), name, line


def _is_memory_error(exc: BaseException, text: str) -> bool:
    if is_a(exc, MemoryError):
        return True
    lowered = text.lower()
    return is_a(exc, RuntimeError) and any(
        hint in lowered for hint in _MEMORY_HINTS)


def _cap(text: str) -> str:
    limit = LIMITS.error_chars   # a message can be arbitrarily long
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[... {len(text) - limit} characters cut]"


# --------------------------------------------------------------------------
