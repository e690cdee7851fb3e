"""What student code finds while probes run: no terminal (``input()``,
``breakpoint()`` and ``sys.stdin`` name themselves) and an eager
``torch.compile``. Both are restored afterwards: the notebook's checks run
in the student's own process."""
from __future__ import annotations

import builtins
import contextlib
import io
import sys
from typing import Any, Iterator

import torch
import torch.nn as nn


class NoTerminalError(RuntimeError):
    """The submission asked for a terminal (input(), breakpoint(), a read
    of sys.stdin): the grader has none; the message says which call."""


def _no_terminal(what: str) -> NoTerminalError:
    return NoTerminalError(f"your code called {what}; the grader has no "
                           f"terminal: remove it")


def _input(*args: Any, **kwargs: Any) -> str:
    caller = sys._getframe(1).f_globals.get("__name__", "")
    # pdb's prompt is cmd.Cmd's input(): name the debugger, not input().
    raise _no_terminal("a debugger (pdb.set_trace())" if caller in
                       ("cmd", "pdb", "bdb") else "input()")


def _breakpoint(*args: Any, **kwargs: Any) -> None:
    raise _no_terminal("breakpoint()")


class _NoStdin(io.TextIOBase):
    """sys.stdin while student code runs: every read names itself (a
    debugger such as pdb.set_trace() reads here too)."""

    def _refuse(self, *args: Any, **kwargs: Any) -> str:
        raise _no_terminal("sys.stdin (a read of standard input: input(), "
                           "pdb.set_trace() or sys.stdin.read())")

    read = readline = readlines = fileno = __next__ = _refuse

    def __iter__(self) -> "_NoStdin":
        return self

    def readable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False


@contextlib.contextmanager
def no_terminal() -> Iterator[None]:
    """input(), breakpoint() and sys.stdin raise NoTerminalError naming
    the call (instead of an OSError about a file descriptor, or a wait);
    restored afterwards (the notebook's checks run in the student's own
    process)."""
    saved = builtins.input, builtins.breakpoint, sys.stdin
    builtins.input, builtins.breakpoint = _input, _breakpoint
    sys.stdin = _NoStdin()
    try:
        yield
    finally:
        builtins.input, builtins.breakpoint, sys.stdin = saved


def _eager_compile(model: Any = None, **options: Any) -> Any:
    """``torch.compile`` while probes run: the function or module itself
    (used bare, ``@torch.compile(mode=...)`` or called on a module)."""
    if model is None:
        return lambda given: given
    return model


def _eager_module_compile(self: nn.Module, *args: Any, **kwargs: Any) -> None:
    """``nn.Module.compile()`` while probes run: nothing."""


@contextlib.contextmanager
def eager() -> Iterator[None]:
    """Run student code eagerly: ``torch.compile`` and
    ``nn.Module.compile`` return what they are given (the rubric states
    it). Compiling took 7-8 s of a 10 s call on a loaded machine, so a
    correct compiled module scored 0 or full marks by the load; eager
    results are the same numbers without that time. Restored afterwards
    (the notebook's checks run in the student's own process)."""
    saved = torch.compile, nn.Module.compile
    torch.compile, nn.Module.compile = _eager_compile, _eager_module_compile
    try:
        yield
    finally:
        torch.compile, nn.Module.compile = saved
