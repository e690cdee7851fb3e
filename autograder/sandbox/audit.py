"""Reach-ins caught at run time, whatever their spelling.

The static rule (``checks/grader_access.py``) reads names; code can build
them at run time (``getattr(sys, "mod" + "ules")``, ``operator.
attrgetter``, ``object.__getattribute__``). Behind it, the inmate runs
with an audit hook (``sys.addaudithook``: it cannot be removed) installed
before the submission's module loads, and a watch on the grader's own
modules:

- **Events** CPython 3.11 raises for what a reach-in needs, when the
  submission's own code raises them (its frame is the innermost, or only
  frames of the stdlib's introspection helpers stand between, e.g.
  ``inspect.currentframe``): frames (``sys._getframe``,
  ``sys._current_frames``, and ``object.__getattr__``, which CPython
  raises for ``__code__``, ``tb_frame``, ``gi_frame``, ``gi_code``, ...),
  code and functions made or replaced (``code.__new__``,
  ``function.__new__``, ``object.__setattr__``), code run from strings
  (``exec``, ``compile``), ``gc``'s object lists, tracing and profiling
  hooks, another audit hook, ``ctypes``, and imports of the forbidden
  modules (``MODULES``, the static rule's list too) that load them.
- **The rest**, which raises no event (``__globals__``, ``__closure__``,
  ``vars``, ``sys.modules``, ``print.__self__``, ``__subclasses__``):
  what they can reach of the grader is its modules' state, so every
  grader module's globals, its classes' attributes and its functions'
  defaults are fingerprinted before the submission loads and compared
  before each traced probe's result, every few results and before the
  last (``watch``, ``worker_jail.serve_probes``); a change is a
  reach-in. The recorders themselves are held by no module
  (``shape_recorder``): only frames and code constants lead to them,
  which raise events.

Each finding is written to the parent at once, a frame of its own on the
result channel (``{"kind": "reach", "what": ...}``), with functions taken
when the hook was installed (a later patch of ``wire``, ``json`` or
``builtins`` cannot silence it). The parent charges a reach-in as the
static rule does, in every task, and refuses the submission's shape
trace (``grade.py``, ``checks/source.py``).
"""
from __future__ import annotations

import os
import sys
import threading
import types
from typing import Any, Callable

# Modules whose import is the finding, here and in the static rule
# (checks/grader_access.py reads this list): the interpreter's back doors,
# code loaded by name, and the grader itself (a package and its
# submodules).
MODULES = frozenset({
    "builtins", "gc", "inspect", "ctypes", "importlib", "imp",
    "autograder", "kit", "_thread", "sysconfig", "code", "codeop",
    "runpy", "pickle", "marshal", "tracemalloc", "faulthandler",
})

# Events that are a reach-in when the submission's code raises them.
EVENTS = frozenset({
    "sys._getframe", "sys._current_frames", "sys.settrace",
    "sys.setprofile", "sys.addaudithook", "object.__getattr__",
    "object.__setattr__", "object.__delattr__", "code.__new__",
    "function.__new__", "exec", "compile", "gc.get_objects",
    "gc.get_referrers", "gc.get_referents", "import",
    "cpython._PySys_ClearAuditHooks", "sys._getframemodulename",
})
EVENT_PREFIXES = ("ctypes.",)
# Stdlib modules that reach frames and code on their caller's behalf: an
# event they raise is charged to the code that called them. (Not
# ``traceback``: printing one's own exception reads its frames, and is
# no reach.)
HELPERS = ("inspect", "importlib", "runpy", "pickle", "code", "codeop",
           "dis", "pdb", "bdb", "pydoc", "operator", "functools")
# The grader's own packages, whose state the watch fingerprints.
GRADER_PACKAGES = ("autograder", "kit")
MAX_REPORTS = 20          # findings written per worker (the first ones)
MAX_WHAT = 120            # characters of one finding


def _stdlib_dir() -> str:
    # threading's file, not os's: the same folder, and a module the
    # simulated platforms of the suite do not stand in for.
    return os.path.dirname(threading.__file__)


def _helper_files() -> frozenset[str]:
    found = set()
    for name in HELPERS:
        module = sys.modules.get(name)
        path = getattr(module, "__file__", None)
        if path:
            found.add(path)
    folder = os.path.join(_stdlib_dir(), "importlib")
    found.update({"<frozen importlib._bootstrap>",
                  "<frozen importlib._bootstrap_external>"})
    return frozenset(found | {folder})


class Reporter:
    """Writes findings to the parent at once, as frames of the result
    channel (the descriptor ``fd``), with nothing a later patch of a
    module could change: ``os.write``, ``bytes`` and ``str`` methods taken
    now. At most ``MAX_REPORTS`` per worker; a lock keeps two threads'
    frames apart. A channel that refuses the write (a closed one; a
    Windows pipe handle, where ``check``'s plain child cannot report)
    loses the report, never fails the code that raised the event."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.count = 0
        self.seen: set[str] = set()
        self._write = os.write
        self._lock = threading.RLock()

    def __call__(self, what: str) -> None:
        what = "".join(c if c.isprintable() and c not in '"\\' else "?"
                       for c in str.__str__(what)[:MAX_WHAT])
        with self._lock:
            if what in self.seen or self.count >= MAX_REPORTS:
                return
            self.seen.add(what)
            self.count += 1
            head = ('{"kind": "reach", "what": "' + what + '"}').encode()
            payload = len(head).to_bytes(4, "big") + head
            frame = len(payload).to_bytes(4, "big", signed=True) + payload
            try:
                while frame:
                    frame = frame[self._write(self.fd, frame):]
            except OSError:
                pass


def install(filename: str, report: Callable[[str], None]) -> None:
    """Add the audit hook (for the rest of this process): an event of
    ``EVENTS`` raised by code of ``filename`` (the submission's, either
    copy), directly or through ``HELPERS``, is ``report``-ed as
    ``"event: detail"``."""
    helpers = _helper_files()
    getframe = sys._getframe
    busy = threading.local()
    forbidden = MODULES
    events, prefixes = EVENTS, EVENT_PREFIXES
    stdlib = _stdlib_dir()

    def is_helper(path: str) -> bool:
        return path in helpers or (path.startswith(stdlib) and any(
            path.startswith(h) for h in helpers if h.startswith(stdlib)))

    def hook(event: str, args: tuple) -> None:
        if event not in events and not event.startswith(prefixes):
            return
        if getattr(busy, "on", False):
            return
        busy.on = True
        try:
            check(event, args)
        except Exception:   # noqa: BLE001 - never the code's failure
            pass
        finally:
            busy.on = False

    def check(event: str, args: tuple) -> None:
        if event == "import":
            name = str(args[0]) if args else ""
            if name.split(".")[0] not in forbidden:
                return
            detail = name
        elif event in ("object.__getattr__", "object.__setattr__",
                       "object.__delattr__") and len(args) > 1:
            detail = f"{type(args[0]).__name__}.{args[1]}"
        else:
            detail = ""
        frame = getframe(2)   # the code that raised it (past hook)
        walk = event in ("import", "sys._getframe",
                         "object.__getattr__")
        while frame is not None and walk and \
                is_helper(frame.f_code.co_filename):
            frame = frame.f_back
        if frame is not None and frame.f_code.co_filename == filename:
            report(f"{event}: {detail}" if detail else event)

    sys.addaudithook(hook)


# --------------------------------------------------------------------------
# The grader's state, fingerprinted

def watch() -> Callable[[], list[str]]:
    """A fingerprint of the grader's modules' state now (before the
    submission loads): each module's globals, and their functions' code
    and defaults, their classes' attributes and their other objects'
    fields (one level). Returns the function that names what differs
    later: state the submission reached and patched. Everything it calls
    is taken now, in its closure, so that a patch of this module, of
    ``types`` or of ``builtins`` changes nothing it does; the comparison
    is of identities, in C (``map(id, ...)``), cheap enough for every
    probe (modules loaded later are not compared)."""
    function, module_type = types.FunctionType, types.ModuleType
    ident, is_a, fields_of, pair, each = id, isinstance, vars, tuple, map
    lookup, mapping = getattr, dict
    # (name, the mapping to compare): module dicts, class dicts, objects'
    # fields; and (name, function) for functions' code and defaults.
    tables: list[tuple[str, Any]] = []
    functions: list[tuple[str, Any]] = []
    for name, module in list(sys.modules.items()):
        if not is_a(module, module_type) or \
                name.split(".")[0] not in GRADER_PACKAGES:
            continue
        tables.append((name, fields_of(module)))
        for key, value in list(fields_of(module).items()):
            where = f"{name}.{key}"
            if is_a(value, function):
                functions.append((where, value))
            elif is_a(value, type):
                tables.append((where, fields_of(value)))
                functions += [(f"{where}.{k}", v) for k, v in
                              list(fields_of(value).items())
                              if is_a(v, function)]
            elif not is_a(value, module_type) and \
                    is_a(lookup(value, "__dict__", None), mapping):
                tables.append((where, value.__dict__))

    def table_state(table: Any) -> tuple:
        return pair(table), pair(each(ident, table.values()))

    def function_state(value: Any) -> tuple:
        return (ident(value.__code__), ident(value.__defaults__),
                ident(value.__kwdefaults__))

    before = ([table_state(t) for _, t in tables],
              [function_state(f) for _, f in functions])

    def changed() -> list[str]:
        now = ([table_state(t) for _, t in tables],
               [function_state(f) for _, f in functions])
        if now == before:
            return []
        return [name for (name, _), old, new in zip(tables, before[0],
                                                    now[0]) if old != new] \
            + [name for (name, _), old, new in zip(functions, before[1],
                                                   now[1]) if old != new]

    return changed


__all__ = ["EVENTS", "Reporter", "install", "watch"]
