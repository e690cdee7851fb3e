"""Reach-ins caught at run time, whatever their spelling.

The static rule (``checks/grader_access.py``) reads names; code can build
them at run time (``getattr(sys, "mod" + "ules")``, ``operator.
attrgetter``, ``object.__getattribute__``). Behind it, the inmate runs
with an audit hook (``sys.addaudithook``: it cannot be removed) installed
before the submission's module loads, and a watch on the grader's own
modules:

- **Events** CPython 3.11 raises for what a reach-in needs, whenever the
  submission's own code is on the stack when they are raised (the
  innermost frame, or any frame out from it before a frame of the
  grader's, whose guards and recorders run inside the submission's
  calls): frames (``sys._getframe``, ``sys._current_frames``, and
  ``object.__getattr__``, which CPython raises for ``__code__``,
  ``tb_frame``, ``gi_frame``, ``gi_code``, ...), code and functions made
  or replaced (``code.__new__``, ``function.__new__``,
  ``object.__setattr__``), code run from strings (``exec``,
  ``compile``), ``gc``'s object lists, tracing and profiling hooks,
  another audit hook, ``ctypes``, and imports of the forbidden modules
  (``grader_access.MODULES``) that load them. The stack, not the
  innermost frame: a library that compiles, runs or walks frames for its
  caller (``timeit``, ``trace``, ``profile``, ``doctest``, ``logging``,
  ``traceback``, ``inspect``, ...) launders nothing. Three exceptions,
  each a library's own use that hands its caller no frame and no code it
  did not write: an import of an installed module (code from the standard
  library's or site-packages' files, compiled and run by importlib);
  the modules of ``OWN_USE``, which read frames or compile code they
  generate themselves (``namedtuple``, ``dataclass``, ``Enum``,
  ``TypeVar``, ``warnings``), when their own function names what
  raised the event (``_getframe``, the attribute, ``exec``: not a C
  function set as a slot of the submission's class that a library
  method's subscript calls), no code from a string lies between them and
  the raiser, and a dataclass's field names are identifiers (pasted into
  its generated source unchecked); and the modules of ``INTERNAL_USE`` when
  their own code called the raiser (``traceback.print_exc`` reading a
  traceback, a ``logging`` call finding its caller), not the
  submission's (``traceback.walk_stack``, ``logging.currentframe``).
  Code run from a string or a file neither installed nor the grader's
  (``exec``) is never the grader's own, even with a grader frame
  innermost: the submission's code can run inside the grader's call with
  no frame of its own (a property made of C callables, such as
  ``functools.partial(exec, source)``, that a grader's ``str()`` reads;
  ``sandbox/safe_type.py`` keeps type tests from reading one).
- **Events with no submission code on the stack**, once its source is
  compiled: code run on a thread it started, or by a callback it
  registered (``weakref.finalize``, ``atexit``, a library function handed
  to the grader) that fires inside the grader's frames, has none of its
  frames on the stack; such an event is charged unless the grader's own
  code raised it or an installed module's import (or one of the library
  uses above) did. A Python thread start (the worker starts none;
  torch's threads are C++'s) and a function's ``__defaults__``,
  ``__kwdefaults__`` or ``__code__`` replaced are charged whatever the
  stack holds.
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

import ast
import inspect
import os
import sys
import threading
import types
from typing import Any, Callable

from autograder.sandbox.wire import frame_writer

# Modules whose import is a reach-in: the interpreter's back doors, code
# loaded by name, and the grader itself (a package and its submodules).
# The static rule (``checks/grader_access.py``) finds the same imports in
# the source; it reads this list, which lives here, the lower layer.
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
    "_thread.start_new_thread",
})
# Events charged whatever the stack holds once the submission begins to
# load (but the grader's own raise): a Python thread (the grader's worker
# starts none; torch's threads are C++'s and raise no event), and a
# function's defaults or code replaced (``object.__setattr__``).
ALWAYS = frozenset({"_thread.start_new_thread"})
FUNCTION_FIELDS = frozenset({"__defaults__", "__kwdefaults__", "__code__"})
EVENT_PREFIXES = ("ctypes.",)
# Standard library modules that, called by the submission, read frames
# (``OWN_FRAMES``) or compile code (``OWN_CODE``) only for their own ends
# (the caller's module name, generated methods), handing no frame and no
# code of the caller's out: an event raised inside such a call is none of
# the submission's reach. (Not ``typing`` for code: ``get_type_hints``
# evaluates strings the caller wrote.)
OWN_FRAMES = ("collections", "dataclasses", "enum", "typing", "warnings")
OWN_CODE = ("collections", "dataclasses")
# Installed modules whose own functions read their caller's frame for
# their own ends and hand none out, whoever called into the library:
# ``torch.library.Library`` records where an operator was registered
# (``torch.func.vmap`` makes one on its first call). An event such a
# module raises, in a function whose code names it, is its own.
OWN_FRAME_READERS = ("torch.library",)
# Modules whose public functions hand frames out (``walk_stack``,
# ``walk_tb``, ``currentframe``) and also use them internally: an event is
# theirs only when their own code, not the submission, called the raiser.
INTERNAL_USE = ("traceback", "logging")
IMPORTLIB = ("<frozen importlib._bootstrap>",
             "<frozen importlib._bootstrap_external>")
# The grader's own packages, whose state the watch fingerprints.
GRADER_PACKAGES = ("autograder", "kit")
# The watch's findings start so (the parent cannot tell when the change
# was made, so it charges them to every task).
STATE_CHANGED = "grader state changed: "
MAX_REPORTS = 20          # findings written per worker (the first ones)
MAX_WHAT = 120            # characters of one finding


def _stdlib_dir() -> str:
    # threading's file, not os's: the same folder, and a module the
    # simulated platforms of the suite do not stand in for.
    return os.path.dirname(threading.__file__)


def _module_files(names: tuple[str, ...]) -> frozenset[str]:
    """The source files of the loaded modules (and packages) ``names``."""
    found = set()
    for name in names:
        path = getattr(sys.modules.get(name), "__file__", None)
        if path:
            found.add(path)
    return frozenset(found)


def _installed_folders() -> tuple[str, ...]:
    """Where installed modules live: the standard library and every
    site-packages folder (a module the submission wrote to its scratch
    folder and imports is in none of them)."""
    import site
    import sysconfig
    folders = {_stdlib_dir(), sysconfig.get_paths()["purelib"],
               sysconfig.get_paths()["platlib"], *site.getsitepackages()}
    user = site.getusersitepackages()
    if isinstance(user, str):
        folders.add(user)
    return tuple(os.path.join(f, "") for f in folders if f)


# Read once, when the fork server preloads this module (``sysconfig``
# and ``site`` cost a worker tenths of a second under load, within its
# first probe's time).
_INSTALLED = _installed_folders()


class Reporter:
    """Writes findings to the parent at once, as frames of the result
    channel (``wire.frame_writer`` of ``channel``: a descriptor, or the
    writer itself, shared with the shape records), with nothing a later
    patch of a module could change. At most ``MAX_REPORTS`` per worker
    (the parent keeps no more). A channel that refuses the write loses
    the report, never fails the code that raised the event."""

    def __init__(self, channel: int | Callable[[str], None]) -> None:
        self._write = frame_writer(channel) if isinstance(channel, int) \
            else channel
        self.count = 0
        self.seen: set[str] = set()
        self._lock = threading.RLock()

    def __call__(self, what: str) -> None:
        what = "".join(c if c.isprintable() and c not in '"\\' else "?"
                       for c in str.__str__(what)[:MAX_WHAT])
        with self._lock:
            if what in self.seen or self.count >= MAX_REPORTS:
                return
            self.seen.add(what)
            self.count += 1
            self._write('{"kind": "reach", "what": "' + what + '"}')


def _libraries_own_rule(grader: str) -> tuple[
        Callable[[str, tuple, Any, list[str]], bool],
        Callable[[str, tuple, Any], bool],
        Callable[[str, tuple, str], bool]]:
    """The audit hook's rules for a library's own use (the module's
    docstring): with the submission's call on the stack
    (``libraries_own``), and with none (``unattended_own``: an installed
    module's import, or the raiser a module of ``OWN_*`` or, called by
    itself, of ``INTERNAL_USE``); and ``foreign_code``: ``exec`` of code
    from a string or a file neither the grader's, nor installed, nor the
    submission's.
    Everything they read is taken now, in their closure, so that no later
    patch of a module changes them."""
    own_frames, own_code = _module_files(OWN_FRAMES), _module_files(OWN_CODE)
    readers = _module_files(OWN_FRAME_READERS)
    internal_use = _module_files(INTERNAL_USE)
    is_installed, compiled_file = _file_rules(grader)
    frozen = "<frozen "

    def libraries_own(event: str, args: tuple, raiser: Any,
                      between: list[str]) -> bool:
        # ``between``: the files of the frames from the raiser out to the
        # submission's, the submission's call (the entry) last.
        code = event in ("exec", "compile")
        if code:
            compiled = compiled_file(event, args)
            # (the file a code object names is any string its compile was
            # given: installed only if importlib is loading it)
            if (compiled.startswith(frozen) or is_installed(compiled)) and \
                    any(p in IMPORTLIB for p in between):
                return True     # an installed module imported
        if is_installed(raiser.f_code.co_filename) and \
                any(p in IMPORTLIB for p in between):
            return True     # an installed module's code, run as imported
        if not all(is_installed(p) or p.startswith(frozen)
                   for p in between):
            # Code from a string between the library and the raiser (a
            # dataclass field name that closes the generated code and
            # adds its own) is nobody's library.
            return False
        if not code and raiser.f_code.co_filename in readers:
            return generates(raiser, event, args)
        entry = between[-1]
        if entry in (own_code if code else own_frames):
            return generates(raiser, event, args)
        return entry in internal_use and len(between) > 1 and \
            between[-2] == entry

    generates = _generation_rule(own_code)
    signatures, syntax = inspect.__file__, ast.__file__

    def unattended_own(event: str, args: tuple, raiser: Any) -> bool:
        code = event in ("exec", "compile")
        if code:
            compiled = compiled_file(event, args)
            if (compiled.startswith(frozen) or is_installed(compiled)) and \
                    _importing(raiser):
                return True     # an installed module imported
        path = raiser.f_code.co_filename
        if path in (own_code if code else own_frames | readers):
            return generates(raiser, event, args)
        if path == signatures and _called_from(raiser, path, "signature"):
            return True     # a signature read: hands out no frame, no code
        if code and path == syntax and raiser.f_code.co_name == "parse":
            return True     # ``ast.parse``: a tree, no code to run
        caller = raiser.f_back
        if path in internal_use and caller is not None and \
                caller.f_code.co_filename == path:
            return True
        return _installed_import(event, raiser, is_installed)

    def foreign_code(event: str, args: tuple, submission: str) -> bool:
        # ``exec`` of code neither the submission's, the grader's, an
        # installed module's nor importlib's: a string, a file it wrote
        # (what runs: a ``compile`` of a tree names no file, runs nothing)
        compiled = compiled_file(event, args) if event == "exec" else None
        return compiled is not None and compiled != submission and not (
            compiled.startswith((grader, frozen)) or is_installed(compiled))

    return libraries_own, unattended_own, foreign_code


def _generation_rule(own_code: frozenset[str]
                     ) -> Callable[[Any, str, tuple], bool]:
    """``generates(raiser, event, args)``: whether an event raised inside
    a module of ``OWN_FRAMES`` or ``OWN_CODE`` is that module's own use:
    raised by a function of its own whose code names what raised it
    (``_getframe``, the attribute read, ``exec``), not by a C function
    the submission set as a slot of its class that a library method's
    subscript calls (``__getitem__ = sys._getframe``); and for code made
    for a dataclass, one whose field names are plain identifiers (a name
    is pasted into the generated source unchecked). What it reads is
    taken now."""
    builtins_called = frozenset({"exec", "eval", "compile"})
    class_dict = type.__dict__["__dict__"].__get__
    class_mro = type.__dict__["__mro__"].__get__
    field_name = __import__("dataclasses").Field.__dict__["name"].__get__
    str_type, dict_type = str, dict
    is_identifier, keywords = str.isidentifier, frozenset(
        __import__("keyword").kwlist)

    def plain(name: Any) -> bool:
        return type(name) is str_type and is_identifier(name) and \
            name not in keywords

    def plain_fields(cls: Any) -> bool:
        # Every name pasted: the class's annotations and, for each class
        # it inherits from, its fields' keys and the names they hold (a
        # Field's name can be set after its class is made).
        try:
            classes = class_mro(cls)
        except TypeError:     # not a class
            return False
        for each in classes:
            own = class_dict(each)
            annotations = own.get("__annotations__", {})
            fields = own.get("__dataclass_fields__", {})
            if type(annotations) is not dict_type or \
                    type(fields) is not dict_type or \
                    not all(plain(k) for k in dict_type.keys(annotations)):
                return False
            for key, field in dict_type.items(fields):
                try:
                    name = field_name(field)
                except TypeError:     # not a Field
                    return False
                if not plain(key) or type(name) is not str_type or \
                        name != key:
                    return False
        return True

    def generates(raiser: Any, event: str, args: tuple) -> bool:
        names = raiser.f_code.co_names
        if event not in ("exec", "compile"):
            what = args[1] if event.startswith("object.") and \
                len(args) > 1 else event.rsplit(".", 1)[-1]
            return type(what) is str_type and what in names
        if raiser.f_code.co_filename not in own_code or \
                not builtins_called & frozenset(names):
            return False
        frame, path = raiser, raiser.f_code.co_filename
        while frame is not None and frame.f_code.co_filename == path:
            if frame.f_code.co_name == "_process_class":
                return plain_fields(frame.f_locals.get("cls"))
            frame = frame.f_back
        # Not inside a dataclass's making: namedtuple (its names are
        # checked as identifiers), or a private helper called directly.
        return raiser.f_code.co_name == "namedtuple"
    return generates


def _file_rules(grader: str) -> tuple[Callable[[str], bool],
                                      Callable[[str, tuple], str]]:
    """``is_installed(path)``: a module of the standard library or
    site-packages (not the grader's); ``compiled_file(event, args)``: the
    file of the code ``exec`` runs or ``compile`` compiles ("" if none).
    What they read is taken now, in their closure."""
    installed = _INSTALLED
    str_type, bytes_type, code_type = str, bytes, types.CodeType

    def is_installed(path: str) -> bool:
        return path.startswith(installed) and not path.startswith(grader)

    def compiled_file(event: str, args: tuple) -> str:
        if event == "exec" and args and type(args[0]) is code_type:
            return args[0].co_filename
        if event == "compile" and len(args) > 1:
            name = args[1]
            if type(name) is bytes_type:
                name = name.decode(errors="replace")
            return name if type(name) is str_type else ""
        return ""

    return is_installed, compiled_file


_IMPORTLIB_FILES = (*IMPORTLIB, os.path.join(_stdlib_dir(), "importlib",
                                             "__init__.py"))


def _installed_import(event: str, raiser: Any,
                      is_installed: Callable[[str], bool]) -> bool:
    """Whether an event is an import asked by an installed module's code
    (the first frame out of importlib's own), or one of an installed
    module's code run as imported (importlib among the installed frames
    out from it)."""
    def importlib_frame(frame: Any) -> bool:
        path = frame.f_code.co_filename
        return path in _IMPORTLIB_FILES or path.startswith("<frozen ")

    frame, importing = raiser, False
    while frame is not None and importlib_frame(frame):
        frame, importing = frame.f_back, True
    if frame is None or not is_installed(frame.f_code.co_filename):
        return False
    if event == "import":
        return True
    while not importing and frame is not None and \
            is_installed(frame.f_code.co_filename):
        frame = frame.f_back
        importing = frame is not None and importlib_frame(frame)
    return importing


def _importing(frame: Any) -> bool:
    """Whether importlib's own frames are on the stack out from
    ``frame`` (a module being loaded)."""
    while frame is not None:
        if frame.f_code.co_filename in IMPORTLIB:
            return True
        frame = frame.f_back
    return False


def _called_from(frame: Any, path: str, name: str) -> bool:
    """Whether ``frame`` runs, in ``path``'s code only, inside a call of
    ``path``'s function ``name``."""
    while frame is not None and frame.f_code.co_filename == path:
        if frame.f_code.co_name == name:
            return True
        frame = frame.f_back
    return False


def install(filename: str, report: Callable[[str], None]
            ) -> Callable[..., Any]:
    """Add the audit hook (for the rest of this process): an event of
    ``EVENTS`` is ``report``-ed as ``"event: detail"`` when code of
    ``filename`` (the submission's, either copy) is on the stack with no
    grader frame between it and the raiser; when none is, once the
    submission's source is compiled (a thread it started, a callback
    firing in the grader's frames), unless the grader or an installed
    module's import raised it; and for ``ALWAYS`` events and a function's
    defaults or code replaced, whatever the stack, once it is compiled
    (the libraries' own uses excepted: the module's docstring).

    Returns ``own``: ``own(fn, *args)`` calls ``fn`` as the grader's own
    work (nothing it raises with no submission code on the stack is
    charged: the result channel's encoding). Keep it in a local: a frame
    reaches it only through events."""
    getframe = sys._getframe
    busy = threading.local()
    grader_work = threading.local()
    started = [False]       # the submission's source compiled
    events, prefixes, always = EVENTS, EVENT_PREFIXES, ALWAYS
    fields, function_type = FUNCTION_FIELDS, types.FunctionType
    walk_out, replaced = _walk_out, _function_replaced   # no later patch
    # This package's folder: its guards and recorders run inside the
    # submission's calls, and what they raise is the grader's own.
    grader = os.path.join(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))), "")
    libraries_own, unattended_own, foreign_code = \
        _libraries_own_rule(grader)
    finding = _finding_rule()

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
        if event == "compile" and len(args) > 1 and args[1] == filename:
            started[0] = True
        what = finding(event, args)
        if what is None:
            return
        raiser = getframe(2)   # the code that raised it (past the hook)
        # exec of a string is never the grader's own (module docstring)
        stray = started[0] and not getattr(grader_work, "depth", 0) and \
            foreign_code(event, args, filename)
        if raiser.f_code.co_filename.startswith(grader):
            return report(what) if stray else None   # else the grader's
        if started[0] and (event in always or replaced(
                event, args, fields, function_type)):
            return report(what)
        between, graders, entered = walk_out(raiser, filename, grader)
        if not entered:
            # No submission code on the stack: a thread it started, a
            # callback it registered, or the grader before it loads.
            if started[0] and not getattr(grader_work, "depth", 0) and \
                    not unattended_own(event, args, raiser):
                report(what)
            return
        if graders:     # the grader's own code, inside its call
            return report(what) if stray else None
        if between and event != "import" and \
                libraries_own(event, args, raiser, between):
            return
        report(what)

    sys.addaudithook(hook)
    return _own_work(grader_work)


def _walk_out(raiser: Any, filename: str, grader: str
              ) -> tuple[list[str], bool, bool]:
    """The files of the frames from ``raiser`` out to the submission's
    (``filename``) frame, whether one of them is the grader's, and
    whether the submission's frame was reached at all."""
    between: list[str] = []
    frame, graders = raiser, False
    while frame is not None:
        path = frame.f_code.co_filename
        if path == filename:
            return between, graders, True
        graders = graders or path.startswith(grader)
        between.append(path)
        frame = frame.f_back
    return between, graders, False


def _function_replaced(event: str, args: tuple, fields: frozenset,
                       function_type: type) -> bool:
    """Whether the event sets a function's defaults or code."""
    return event == "object.__setattr__" and len(args) > 1 and \
        args[1] in fields and type(args[0]) is function_type


def _own_work(grader_work: Any) -> Callable[..., Any]:
    """``own`` of ``install``: runs a call with ``grader_work.depth`` up."""
    def own(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        grader_work.depth = getattr(grader_work, "depth", 0) + 1
        try:
            return fn(*args, **kwargs)
        finally:
            grader_work.depth -= 1
    return own


def _finding_rule() -> Callable[[str, tuple], str | None]:
    """The text of an event's finding (``"event: detail"``), or None for
    an import of a module that is not forbidden; what it reads is taken
    now, in its closure."""
    forbidden = MODULES
    type_name = type.__dict__["__name__"].__get__

    def finding(event: str, args: tuple) -> str | None:
        if event == "import":
            name = str(args[0]) if args else ""
            if name.split(".")[0] not in forbidden:
                return None
            detail = name
        elif event in ("object.__getattr__", "object.__setattr__",
                       "object.__delattr__") and len(args) > 1:
            # The type's own name, read past its metaclass (a property
            # there would run student code inside the hook).
            detail = f"{type_name(type(args[0]))}.{args[1]}"
        else:
            detail = ""
        return f"{event}: {detail}" if detail else event
    return finding


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
                # The grader's own classes; a library's held here (torch's
                # Tensor) is the library's state, which a submission may
                # patch without reaching the grader (the parent compares).
                if str(lookup(value, "__module__", "")).split(".")[0] \
                        in GRADER_PACKAGES:
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
