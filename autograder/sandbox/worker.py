"""Run probes against a student submission, in the current process.

This module executes untrusted code: call it only inside the sandbox's
worker process (``autograder/sandbox/worker_jail.py``), never in the
grading parent.
It compiles the submission from a string (after a privilege drop the file
itself may be unreadable), registers the source with ``linecache`` so
tracebacks show the student's lines, and answers each ``Probe`` with a
``ProbeResult``.

``trace_shapes`` probes run on a separate, AST-instrumented copy of the
module that records the shapes of the tensors every student statement binds
or returns, keyed by the statement's first line.
"""
from __future__ import annotations

import ast
import builtins
import contextlib
import inspect
import io
import linecache
import secrets
import sys
import time
import traceback
import types
import warnings
from typing import Any, Callable, Iterator

import torch
import torch.nn as nn

from autograder import homework
from autograder.sandbox import fastbuild, value_recorder
from autograder.submission import regions
from autograder.checks import trace_integrity
from autograder.sandbox.protocol import (CRASH, ERROR, IMPORT_ERROR, MEMORY,
                                         OK, Probe, ProbeResult,
                                         stand_in_output)

# One name for both copies (plain and traced): a module-level check of
# __name__ cannot tell them apart.
MODULE_NAME = "student_" + homework.current().module_stem
MAX_MESSAGE_CHARS = 4000      # an exception message can be arbitrarily long
MAX_SHAPES_PER_LINE = 20      # distinct shape-lists kept per traced line
STUDENT_FRAMES = 3            # student frames quoted in an error message
_MEMORY_HINTS = ("can't allocate memory", "not enough memory",
                 "out of memory", "cannot allocate memory")


class ImportFailure(Exception):
    """The submission could not be imported; ``str(self)`` says why."""

    def __init__(self, message: str, status: str = IMPORT_ERROR):
        super().__init__(message)
        self.status = status


class ProbeFailure(Exception):
    """A probe cannot proceed; carries the status and message to report."""

    def __init__(self, status: str, message: str, phase: str = "",
                 exception: str = "", line: int | None = None):
        super().__init__(message)
        self.status, self.message, self.phase = status, message, phase
        self.exception, self.line = exception, line


# --------------------------------------------------------------------------
# Loading

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
            # The instrumented tree calls constants (see _link): a
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
    code = exc.code if isinstance(exc.code, int) else (
        0 if exc.code is None else 1)
    return f"the submission exited (code {code}) during {during}"


def describe_exception(exc: BaseException, filename: str
                       ) -> tuple[str, str, str, int | None]:
    """Status, message, exception type name and last student line of
    ``exc``. NotImplementedError keeps its message verbatim (the skeleton's
    "Task 1.2 not implemented yet: ..."); others read ``Type: message`` plus
    the last frames in the student file."""
    name = type(exc).__name__
    try:
        text = str(exc)
    except BaseException:   # noqa: B902 - a hostile __str__
        text = "<unprintable message>"
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if f.filename == filename]
    line = frames[-1].lineno if frames else None
    if isinstance(exc, NotImplementedError) and text:
        return ERROR, _cap(text), name, line
    status = MEMORY if _is_memory_error(exc, text) else ERROR
    message = f"{name}: {text}" if text else name
    for frame in frames[-STUDENT_FRAMES:]:
        message += f"\n  line {frame.lineno}, in {frame.name}: " \
                   f"{(frame.line or '').strip()}"
    return status, _cap(message), name, line


def _is_memory_error(exc: BaseException, text: str) -> bool:
    if isinstance(exc, MemoryError):
        return True
    lowered = text.lower()
    return isinstance(exc, RuntimeError) and any(
        hint in lowered for hint in _MEMORY_HINTS)


def _cap(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[... {len(text) - limit} characters cut]"


# --------------------------------------------------------------------------
# Shape tracing

class ShapeRecorder:
    """Collects, per traced line, the distinct lists of tensor shapes (an
    empty list: the line ran and bound no tensor), the first line of each
    function entered, and the canary (see
    ``autograder/checks/trace_integrity.py``)."""

    def __init__(self) -> None:
        self.shapes: dict[int, list[list[list[int]]]] = {}
        self.canary: list[int] | None = None
        self.forged = False   # a call came from code the grader did not make

    def reset(self, canary: list[int] | None = None) -> None:
        """Forget everything recorded so far (one probe at a time); the
        next function entry records ``canary``."""
        self.shapes, self.canary, self.forged = {}, canary, False

    def take(self) -> dict[int, list[list[list[int]]]]:
        """What was recorded, then reset. A forged call drops the canary:
        the parent then refuses the trace (``trace_integrity``)."""
        shapes = self.shapes
        if self.forged:
            shapes.pop(trace_integrity.CANARY_LINE, None)
        self.reset()
        return shapes

    def bound(self, line: int, *values: Any) -> None:
        """Record the tensors among the values a statement just bound."""
        shapes = [_shape(v) for v in values]
        self._add(line, [s for s in shapes if s is not None])

    def returned(self, line: int, value: Any) -> Any:
        """Record the tensor(s) of a return value and pass it through."""
        items = value if isinstance(value, (tuple, list)) else (value,)
        self._add(line, [s for s in map(_shape, items) if s is not None])
        return value

    def entered(self, line: int) -> None:
        """A function (or lambda) of the submission starting at ``line``
        was called."""
        if self.canary is not None:
            self._add(trace_integrity.CANARY_LINE, [self.canary])
        self._add(line, [])

    def _add(self, line: int, shapes: list[list[int]]) -> None:
        seen = self.shapes.setdefault(line, [])
        if shapes not in seen and len(seen) < MAX_SHAPES_PER_LINE:
            seen.append(shapes)


def _shape(value: Any) -> list[int] | None:
    if not isinstance(value, torch.Tensor):
        return None
    try:
        return [int(d) for d in value.shape]
    except Exception:   # noqa: BLE001 - a hostile tensor subclass
        return None


_target_values = regions.target_values
_bound_targets = regions.bound_targets


class _Instrumenter(ast.NodeTransformer):
    """Adds a recorder call after each recorded statement, wraps the value
    of each recorded ``return`` and records each function's entry."""

    def __init__(self, statements: set[int], recorder: str):
        self.statements = statements   # id() of the nodes to instrument
        self.recorder = recorder

    def _call(self, method: str, line: int, args: list[ast.expr]) -> ast.Call:
        # A placeholder constant, replaced by the recorder's guarded method
        # in the compiled code (``_link``): no name leads to the recorder.
        # The call sits on ``line``, which the guard checks.
        func = ast.Constant(f"{self.recorder}.{method}")
        call = ast.Call(func, [ast.Constant(line), *args], [])
        call.lineno = call.end_lineno = line
        call.col_offset = call.end_col_offset = 0
        return ast.fix_missing_locations(call)

    def _bind(self, node: ast.stmt) -> Any:
        self.generic_visit(node)     # the lambdas it holds
        if id(node) not in self.statements:
            return node
        values = [v for t in _bound_targets(node) for v in _target_values(t)]
        if not values:
            return node
        record = ast.Expr(self._call("bound", node.lineno, values))
        ast.copy_location(record, node)
        return [node, record]

    visit_Assign = visit_AnnAssign = visit_AugAssign = _bind

    def visit_Return(self, node: ast.Return) -> ast.Return:
        self.generic_visit(node)
        if id(node) in self.statements and node.value is not None:
            node.value = self._call("returned", node.lineno, [node.value])
        return node

    def _function(self, node: Any) -> Any:
        self.generic_visit(node)
        body = node.body
        # After the docstring, which must stay the first statement.
        at = 1 if body and isinstance(body[0], ast.Expr) and \
            isinstance(body[0].value, ast.Constant) and \
            isinstance(body[0].value.value, str) else 0
        entry = ast.Expr(self._call("entered", node.lineno, []))
        ast.copy_location(entry, entry.value)
        node.body = body[:at] + [entry] + body[at:]
        return node

    visit_FunctionDef = visit_AsyncFunctionDef = _function

    def visit_Lambda(self, node: ast.Lambda) -> ast.Lambda:
        self.generic_visit(node)
        # lambda ...: (entered(line), body)[1]
        pair = ast.copy_location(ast.Tuple(
            [self._call("entered", node.lineno, []), node.body], ast.Load()),
            node.body)
        node.body = ast.copy_location(
            ast.Subscript(pair, ast.Constant(1), ast.Load()), node.body)
        return node


def instrument(source: str, recorder: str,
               methods: dict[str, tuple[str, ...]]) -> ast.Module:
    """The AST of ``source`` with shape recording on the statements of its
    graded regions (``methods``: the graded rubric's task methods, which
    the probe carries: see ``regions.graded_regions``) and of
    every function, and the entry of every function and lambda recorded:
    what ran decides which helpers a task's deductions read. Line numbers
    are the original ones."""
    tree = ast.parse(source)
    found = regions.student_statements(
        tree, regions.graded_regions(source, tree, methods=methods))
    wanted = {id(node) for _, node in found}
    for function in ast.walk(tree):
        if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            wanted.update(id(node) for stmt in function.body
                          for node in ast.walk(stmt)
                          if isinstance(node, ast.stmt))
    tree = _Instrumenter(wanted, recorder).visit(tree)
    return ast.fix_missing_locations(tree)


class TracedModule:
    """The instrumented copy of a submission and its recorder."""

    def __init__(self, source: str, filename: str,
                 methods: dict[str, tuple[str, ...]]):
        self.recorder, prefix = install_recorder()
        plain = sys.modules.get(MODULE_NAME)
        try:
            self.module = load_module(
                source, filename, tree=instrument(source, prefix, methods),
                link=lambda code, namespace: _link(
                    code, self.recorder, prefix, namespace))
        finally:
            if plain is not None:   # lookups by __name__ find the plain one
                sys.modules[MODULE_NAME] = plain


def _link(code: types.CodeType, recorder: Any, prefix: str,
          namespace: dict) -> types.CodeType:
    """``code`` with each placeholder constant ``"<prefix>.<method>"``
    replaced by a guard of ``recorder.<method>``. The guard records only a
    call made by one of these code objects, with this module's globals,
    on the line it names: a wrapper, a forged record, a replaced
    ``__code__`` or a call from other code marks the trace forged (see
    ``ShapeRecorder.take``) and records nothing."""
    ours: set[int] = set()
    kept: list[types.CodeType] = []     # keeps the ids in ``ours`` unique
    guards: dict[str, Callable[..., Any]] = {}

    def guard(method: str) -> Callable[..., Any]:
        target = getattr(recorder, method)

        def call(line: int, *args: Any) -> Any:
            caller = sys._getframe(1)
            if id(caller.f_code) in ours and caller.f_lineno == line and \
                    caller.f_globals is namespace:
                return target(line, *args)
            recorder.forged = True
            return args[0] if args else None
        return call

    def relink(code: types.CodeType) -> types.CodeType:
        consts = []
        for const in code.co_consts:
            if isinstance(const, types.CodeType):
                const = relink(const)
            elif isinstance(const, str) and const.startswith(prefix + "."):
                method = const[len(prefix) + 1:]
                const = guards.setdefault(method, guard(method))
            consts.append(const)
        linked = code.replace(co_consts=tuple(consts))
        ours.add(id(linked))
        kept.append(linked)
        return linked

    return relink(code)


_recorder: tuple[ShapeRecorder, str] | None = None


def install_recorder() -> tuple[ShapeRecorder, str]:
    """The shape recorder and the random prefix of the placeholder
    constants through which the traced copy calls it (see ``_link``). It
    has no name in builtins or in the module: student code cannot find it
    by looking, and a call it makes itself is refused."""
    global _recorder
    if _recorder is None:
        _recorder = (ShapeRecorder(), f"autograder-{secrets.token_hex(8)}")
    return _recorder


# --------------------------------------------------------------------------
# Probes

def drawn_state(shapes: dict[str, list[int]], seed: int
                ) -> dict[str, torch.Tensor]:
    """The weights a probe asks the worker to draw (see Probe.drawn)."""
    if not shapes:
        return {}
    key = (seed, tuple(sorted((p, tuple(s)) for p, s in shapes.items())))
    if key not in _drawn:
        generator = torch.Generator().manual_seed(seed)
        _drawn.clear()   # one set kept: the probes of a case come together
        _drawn[key] = {path: 0.02 * torch.randn(*shape, generator=generator)
                       for path, shape in sorted(shapes.items())}
    return dict(_drawn[key])   # load_state copies from them


_drawn: dict[tuple, dict[str, torch.Tensor]] = {}


def load_state(module: nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Copy each tensor of ``state`` into the attribute path it names."""
    with torch.no_grad():
        for path, value in state.items():
            target = _resolve(module, path)
            if not isinstance(target, torch.Tensor):
                raise ProbeFailure(
                    ERROR, f"{path} is a {type(target).__name__}, expected a "
                    f"tensor of shape {list(value.shape)}", "load")
            if list(target.shape) != list(value.shape):
                raise ProbeFailure(
                    ERROR, f"{path} has shape {list(target.shape)}, expected "
                    f"{list(value.shape)}", "load")
            target.copy_(value)


def _resolve(module: nn.Module, path: str) -> Any:
    obj: Any = module
    walked = []
    for part in path.split("."):
        walked.append(part)
        try:
            obj = getattr(obj, part)
        except AttributeError:
            owner = ".".join(walked[:-1]) or type(module).__name__
            raise ProbeFailure(
                ERROR, f"{owner} has no attribute {part!r} (needed to load "
                f"the weights {path})", "load") from None
    return obj


def describe_attributes(module: nn.Module) -> dict[str, Any]:
    """Attribute name -> description, for every attribute of ``module``."""
    found: dict[str, Any] = {}
    for name, value in vars(module).items():
        if not name.startswith("_") and name != "training":
            found[name] = _describe(value)
    for name, sub in module._modules.items():
        found[name] = _describe(sub)
    for name, param in module._parameters.items():
        found[name] = {"type": "Parameter", "shape": _shape(param)}
    for name, buf in module._buffers.items():
        found[name] = {"type": "Tensor", "shape": _shape(buf)}
    # Dunder name: cannot collide with an attribute a student defines.
    found["__parameters__"] = {"type": "int", "value": sum(
        p.numel() for p in module.parameters())}
    return found


def _describe(value: Any) -> dict[str, Any]:
    kind = type(value).__name__
    if isinstance(value, nn.Linear):
        return {"type": kind, "in_features": int(value.in_features),
                "out_features": int(value.out_features),
                "bias": value.bias is not None}
    if isinstance(value, nn.Dropout):
        return {"type": kind, "p": float(value.p)}
    if isinstance(value, (bool, int, float)):
        return {"type": kind, "value": value}
    if isinstance(value, torch.Tensor):
        return {"type": kind, "shape": _shape(value)}
    return {"type": kind}


def collect_outputs(value: Any) -> tuple[str, list[torch.Tensor]]:
    """``(output_kind, tensors)`` of a call's return value, as float32
    contiguous CPU tensors; raises ProbeFailure for anything else."""
    if isinstance(value, torch.Tensor):
        kind, items = "tensor", [value]
    elif isinstance(value, (tuple, list)):
        kind, items = "tuple", list(value)
        for i, item in enumerate(items):
            if not isinstance(item, torch.Tensor):
                raise ProbeFailure(
                    ERROR, f"forward returned a {type(value).__name__} whose "
                    f"item {i} is a {type(item).__name__}, expected tensors",
                    "output")
    else:
        raise ProbeFailure(
            ERROR, f"forward returned a {type(value).__name__}, expected a "
            "tensor or a tuple of tensors", "output")
    try:
        return kind, [t.detach().to("cpu", torch.float32).contiguous()
                      .clone() for t in items]
    except Exception as exc:   # noqa: BLE001 - e.g. meta or sparse tensors
        raise ProbeFailure(ERROR, f"could not read the returned tensors: "
                           f"{type(exc).__name__}: {exc}", "output") from None


def _stand_in_class(probe: Probe, real: Any) -> type:
    """The module class standing in for ``probe.stand_in["cls"]`` (see
    ``Probe.stand_in``): built as expected, called on the probe's input,
    its k-th instance returns the k-th known tensor."""
    spec = probe.stand_in
    name, want = str(spec["cls"]), dict(spec.get("init", {}))
    shape = [int(d) for d in spec["shape"]]
    expected = probe.args[0] if probe.args else None
    try:
        signature = inspect.signature(real) if isinstance(real, type) \
            else None
    except Exception:   # noqa: BLE001 - a hostile class: bind by position
        signature = None
    made = [0]

    class StandIn(nn.Module):
        """Known outputs in place of the submission's own class."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__()
            got = _bind(signature, list(want), args, kwargs)
            for key, value in want.items():
                if key in got and got[key] != value:
                    raise TypeError(f"{name} was built with {key}="
                                    f"{got[key]!r}, expected {value!r}")
            self.index = made[0]
            made[0] += 1

        def forward(self, x: Any) -> torch.Tensor:
            if expected is not None and not (
                    isinstance(x, torch.Tensor)
                    and x.shape == expected.shape
                    and bool(torch.equal(x, expected))):
                what = (f"a tensor of shape {list(x.shape)}"
                        if isinstance(x, torch.Tensor) else
                        f"a {type(x).__name__}")
                raise ValueError(f"a {name} was called on {what} that is "
                                 f"not the input x: run every head on x")
            return stand_in_output(probe.drawn_seed, self.index, shape)

    # Named and placed as the class it replaces: code that looks for the
    # grader's module cannot tell (the checks also judge with the real
    # class wherever it is right: checks/heads.py, checks/size.py).
    StandIn.__name__ = StandIn.__qualname__ = name
    StandIn.__module__ = str(getattr(real, "__module__", MODULE_NAME))
    StandIn.__doc__ = getattr(real, "__doc__", None)
    return StandIn


def _bind(signature: inspect.Signature | None, names: list[str],
          args: tuple, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The constructor's arguments by name: bound to the real class's
    signature when it binds, else positionally to ``names``."""
    if signature is not None:
        try:
            bound = signature.bind(None, *args, **kwargs) if list(
                signature.parameters)[:1] == ["self"] else \
                signature.bind(*args, **kwargs)
            bound.apply_defaults()
            return dict(bound.arguments)
        except (TypeError, ValueError):
            pass
    return {**dict(zip(names, args)), **kwargs}


def run_probe(module: types.ModuleType, probe: Probe, filename: str,
              recorder: ShapeRecorder | None = None) -> ProbeResult:
    """Answer one probe with the classes of ``module``."""
    if probe.stand_in:
        name = str(probe.stand_in["cls"])
        missing = object()
        real = module.__dict__.get(name, missing)
        module.__dict__[name] = _stand_in_class(probe, real)
        try:
            return _run_probe(module, probe, filename, recorder)
        finally:
            if real is missing:
                module.__dict__.pop(name, None)
            else:
                module.__dict__[name] = real
    return _run_probe(module, probe, filename, recorder)


def _run_probe(module: types.ModuleType, probe: Probe, filename: str,
               recorder: ShapeRecorder | None = None) -> ProbeResult:
    result = ProbeResult(probe.id, OK)
    start = time.perf_counter()
    phase = "init"
    try:
        cls = getattr(module, probe.cls, None)
        # A class, or a factory function returning a module (Part 3's
        # gpt2_small_attention()).
        if not (isinstance(cls, type) or inspect.isfunction(cls)):
            raise ProbeFailure(ERROR, f"the submission defines no class or "
                               f"function {probe.cls}", "init")
        if probe.seed is not None:
            _seed(probe.seed)   # weights not in state repeat too
        instance = _construct(cls, probe)
        if not isinstance(instance, nn.Module):
            got = type(instance).__name__
            raise ProbeFailure(ERROR, f"{probe.cls}() returned a {got}, "
                               f"expected an nn.Module" if
                               inspect.isfunction(cls) else
                               f"{probe.cls} is not an nn.Module", "init")
        phase = "load"
        load_state(instance, {**drawn_state(probe.drawn, probe.drawn_seed),
                              **probe.state})
        if probe.inspect:
            result.attributes = describe_attributes(instance)
        if probe.call:
            phase = "call"
            instance.train(probe.train)
            if probe.seed is not None:
                _seed(probe.seed)
            args = [_copy(a) for a in probe.args]
            kwargs = {k: _copy(v) for k, v in probe.kwargs.items()}
            if recorder is not None:
                recorder.reset(trace_integrity.canary_shape(probe.canary))
            # No second call with stand-ins (Probe.stand_in): they accept
            # only the first call's x, and the batch reversed is not it, so
            # a correct module would fail its second call.
            again = probe.again and not probe.stand_in
            before = state_snapshot(instance) if again else {}
            # No autograd graph: grading needs values only, and the graph
            # of a GPT-2-size call would hold hundreds of MB.
            with torch.no_grad():
                value = instance(*args, **kwargs)
            phase = "output"
            result.output_kind, result.outputs = collect_outputs(value)
            if again:
                result.changed = changed_state(before, state_snapshot(
                    instance))
                result.again = call_again(instance, probe, filename)
    except ProbeFailure as failure:
        _fail(result, failure.status, failure.message, failure.phase or phase,
              failure.exception, failure.line)
    except SystemExit as exc:
        _fail(result, CRASH, exit_message(exc, f"probe {probe.id} ({phase})"),
              phase, "SystemExit")
    except BaseException as exc:   # noqa: B902 - student code may raise anything
        status, message, name, line = describe_exception(exc, filename)
        _fail(result, status, message, phase, name, line)
    if recorder is not None:
        result.shapes = recorder.take()
    result.seconds = time.perf_counter() - start
    return result


def _seed(seed: int) -> None:
    # The CPU generator is all a worker draws from; torch.manual_seed also
    # queues CUDA's lazy seeding, formatting a traceback on every call.
    torch.default_generator.manual_seed(seed)


def _construct(cls: Callable[..., Any], probe: Probe) -> Any:
    """``cls(**probe.init)``, without random weights the probe overwrites
    or never reads (autograder/sandbox/fastbuild.py)."""
    sizes = [t.numel() for t in probe.state.values()]
    for shape in probe.drawn.values():
        size = 1
        for dim in shape:
            size *= dim
        sizes.append(size)
    if not fastbuild.worth_it(probe.call, sizes):
        return cls(**probe.init)
    return fastbuild.build(lambda: cls(**probe.init), call=probe.call,
                           paths=[*probe.drawn, *probe.state])


def call_again(instance: nn.Module, probe: Probe,
               filename: str) -> ProbeResult:
    """The probe's second call (``Probe.again``): eval mode, the same
    input with its batch order reversed; outputs as returned."""
    again = ProbeResult(probe.id, OK, phase="")
    phase = "call"
    try:
        instance.eval()
        args = [_reversed_batch(_copy(a)) for a in probe.args]
        kwargs = {k: _reversed_batch(_copy(v))
                  for k, v in probe.kwargs.items()}
        with torch.no_grad():
            value = instance(*args, **kwargs)
        phase = "output"
        again.output_kind, again.outputs = collect_outputs(value)
        if probe.again_longer:
            # Its failure rides on the second call's result (status ok,
            # outputs kept): the parent judges the second call first.
            problem = longer_call(instance, probe, args, kwargs, filename)
            if problem:
                again.phase, again.message = "longer", problem
    except ProbeFailure as failure:
        _fail(again, failure.status, failure.message,
              failure.phase or phase, failure.exception, failure.line)
    except SystemExit as exc:
        _fail(again, CRASH, exit_message(exc, f"probe {probe.id} (second "
                                              f"call)"), phase, "SystemExit")
    except BaseException as exc:   # noqa: B902 - student code may raise anything
        status, message, name, line = describe_exception(exc, filename)
        _fail(again, status, message, phase, name, line)
    return again


def _longer(value: Any, tokens: int) -> Any:
    if isinstance(value, torch.Tensor) and value.dim() >= 3:
        return torch.cat([value, value[:, :tokens]], dim=1)
    return value


def longer_call(instance: nn.Module, probe: Probe, args: list,
                kwargs: dict[str, Any], filename: str) -> str:
    """The third call (``Probe.again_longer``): the second call's input
    with its first tokens appended. What went wrong ("" if nothing): it
    raised, or returned the first call's length."""
    what = (f"a third call on a longer input (the same batch with "
            f"{probe.again_longer} more token"
            f"{'s' * (probe.again_longer > 1)})")
    longer = [_longer(a, probe.again_longer) for a in args]
    try:
        with torch.no_grad():
            value = instance(*longer, **kwargs)
        _, outputs = collect_outputs(value)
    except ProbeFailure as failure:
        return f"{what} returned {failure.message}"
    except SystemExit as exc:
        return f"{what}: {exit_message(exc, 'the third call')}"
    except BaseException as exc:   # noqa: B902 - student code may raise anything
        return f"{what} raised {describe_exception(exc, filename)[1]}"
    first = longer[0] if longer and isinstance(longer[0],
                                               torch.Tensor) else None
    if first is None or first.dim() < 3 or not outputs or \
            outputs[0].dim() < 2:
        return ""
    want, got = int(first.shape[1]), int(outputs[0].shape[1])
    return "" if got == want else (
        f"{what} returned {got} positions, not {want}: is something "
        f"sized by the first call?")


def _reversed_batch(value: Any) -> Any:
    if isinstance(value, torch.Tensor) and value.dim() > 0:
        return value.flip(0)
    return value


MAX_CHANGED = 10     # names of changed state reported per probe
# What every nn.Module has (hooks, flags): not the student's state.
_MODULE_INTERNALS = frozenset(vars(nn.Module())) - {
    "_parameters", "_buffers"}


def state_snapshot(module: nn.Module) -> dict[str, Any]:
    """Path -> a copy of every parameter, buffer and plain attribute of
    ``module`` and its submodules (``mask``, ``heads.0.calls``); tensors
    are cloned, other objects reduced to what shows a change. Empty if
    the module resists being read (it is only used to name a cause)."""
    found: dict[str, Any] = {}
    try:
        for prefix, sub in module.named_modules():
            dot = f"{prefix}." if prefix else ""
            for name, value in vars(sub).items():
                if name in ("_parameters", "_buffers"):
                    for key, tensor in value.items():
                        found[dot + key] = _frozen(tensor)
                elif name not in _MODULE_INTERNALS and \
                        not isinstance(value, nn.Module):
                    found[dot + name] = _frozen(value)
    except Exception:   # noqa: BLE001 - hostile attributes: name nothing
        return {}
    return found


def _frozen(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if type(value) in (int, float, bool, str, type(None)):
        return value
    if type(value) in (list, tuple, dict, set):
        return (type(value).__name__, len(value))
    return (type(value).__name__, id(value))


def changed_state(before: dict[str, Any], after: dict[str, Any]
                  ) -> list[str]:
    """The paths whose value differs between two snapshots, at most
    MAX_CHANGED; one the first call created ends with " (new)"."""
    changed = []
    try:
        for path in sorted(set(before) | set(after)):
            if path not in before:
                changed.append(f"{path} (new)")
            elif path not in after or not _same(before[path], after[path]):
                changed.append(path)
    except Exception:   # noqa: BLE001 - hostile values: name what we have
        pass
    return changed[:MAX_CHANGED]


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)
                and a.shape == b.shape and a.dtype == b.dtype):
            return False
        if a.is_floating_point() or a.is_complex():
            return bool(((a == b) | (a.isnan() & b.isnan())).all())
        return bool(torch.equal(a, b))
    if isinstance(a, float) and isinstance(b, float) and a != a and b != b:
        return True   # NaN
    return type(a) is type(b) and a == b


def _copy(value: Any) -> Any:
    # The student may modify its inputs in place; keep the probe intact.
    return value.clone() if isinstance(value, torch.Tensor) else value


def _fail(result: ProbeResult, status: str, message: str, phase: str,
          exception: str = "", line: int | None = None) -> None:
    result.status, result.message, result.phase = status, message, phase
    result.exception, result.line = exception, line
    result.outputs, result.output_kind = [], ""


# --------------------------------------------------------------------------
# No terminal

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


def execute_probes(source: str, filename: str, probes: list[Probe],
                   on_import: Callable[[], None] | None = None,
                   more: Callable[[], list[Probe]] | None = None
                   ) -> Iterator[ProbeResult]:
    """Import ``source`` as a fresh module and yield one result per probe,
    in order. An import failure gives every probe that status (usually
    IMPORT_ERROR). ``on_import`` is called once the module imported.
    ``more`` is called once ``probes`` are all answered and returns the
    probes that follow (the hidden cases', which the parent sends only
    then: see ``supervisor.Attempt``). While it runs the submission has no
    terminal (``no_terminal``) and runs eagerly (``eager``)."""
    with no_terminal(), eager():
        yield from _execute_probes(source, filename, probes, on_import, more)


def _execute_probes(source: str, filename: str, probes: list[Probe],
                    on_import: Callable[[], None] | None,
                    more: Callable[[], list[Probe]] | None
                    ) -> Iterator[ProbeResult]:
    def stream() -> Iterator[Probe]:
        yield from probes
        if more is not None:
            yield from more()

    if any(probe.trace_shapes for probe in probes):
        install_recorder()
    if any(probe.trace_values for probe in probes):
        value_recorder.install()   # before the plain copy: no tell
    try:
        module = load_module(source, filename)
    except ImportFailure as failure:
        for probe in stream():
            yield ProbeResult(probe.id, failure.status, str(failure),
                              phase="import")
        return
    if on_import is not None:
        on_import()
    traced: TracedModule | ImportFailure | None = None
    valued: value_recorder.ValueTracedModule | ImportFailure | None = None
    for probe in stream():
        if probe.trace_values:
            if valued is None:
                try:
                    valued = value_recorder.ValueTracedModule(
                        source, filename, probe.methods, load_module,
                        instrument, MODULE_NAME, _link)
                except ImportFailure as failure:
                    valued = failure
            if isinstance(valued, ImportFailure):
                yield ProbeResult(probe.id, valued.status,
                                  f"instrumented import failed: {valued}",
                                  phase="import")
            else:
                yield value_recorder.run_traced(valued, probe, filename,
                                                run_probe)
            continue
        if not probe.trace_shapes:
            yield run_probe(module, probe, filename)
            continue
        if traced is None:
            try:
                traced = TracedModule(source, filename, probe.methods)
            except ImportFailure as failure:
                traced = failure
        if isinstance(traced, ImportFailure):
            yield ProbeResult(probe.id, traced.status,
                              f"instrumented import failed: {traced}",
                              phase="import")
        else:
            yield run_probe(traced.module, probe, filename, traced.recorder)
