"""The shape recorder and the traced copy of a submission.

``trace_shapes`` probes run on a separate, AST-instrumented copy of the
module that records the shapes of the tensors every student statement binds
or returns, keyed by the statement's first line. The instrumented code
reaches the recorder only through placeholder constants replaced in the
compiled code (``link``): no name in builtins or in the module leads to
it. The value recorder (``autograder/sandbox/value_recorder.py``) is
linked the same way.
"""
from __future__ import annotations

import ast
import operator
import secrets
import sys
import types
from typing import Any, Callable, NamedTuple

import torch

from autograder.sandbox.protocol import CANARY_LINE
from autograder.sandbox.safe_type import is_a
from autograder.sandbox.student_module import MODULE_NAME, load_module
from autograder.submission import regions


class ShapeRecorder(NamedTuple):
    """Sends, for each traced statement that ran, the shapes of the
    tensors it bound (an empty list: it ran and bound no tensor), the
    first line of each function entered, and the canary (see
    ``autograder/checks/trace_integrity.py``) to a sink, at once
    (``make_recorder``).

    It keeps no table: in the worker the sink is ``stream_sink``, whose
    records are frames of the result channel, and the parent rebuilds the
    table (``sandbox/shape_table.py``): what student code reaches here
    later (a frame's locals, through ``f_back``) cannot change what the
    parent already has. A tuple of functions that hold the sink as default
    values: nothing to reassign, and reading or replacing a function's
    defaults raises an audit event (``audit.py``)."""

    reset: Callable[..., None]
    forged: Callable[[], None]
    bound: Callable[..., None]
    returned: Callable[[int, Any], Any]
    entered: Callable[[int], None]


def make_recorder(sink: Any) -> ShapeRecorder:
    """A ``ShapeRecorder`` sending to ``sink`` (``start``, ``forged``,
    ``record``: a ``StreamSink`` in the worker, a ``ShapeTable`` in the
    student's own process)."""
    canary: list[Any] = [None]    # the next entries' canary record

    def reset(value: list[int] | None = None, _canary: list = canary,
              _start: Callable = sink.start) -> None:
        """A traced call begins; each function entry records ``value``."""
        _canary[0] = value
        _start()

    def forged(_forged: Callable = sink.forged) -> None:
        """A call from code the grader did not make (``link``)."""
        _forged()

    def shapes_of(values: Any, _shape: Callable = tensor_shape,
                  _forged: Callable = sink.forged,
                  _unreadable: type = UnreadableShape) -> list[list[int]]:
        # A tensor whose shape cannot be read is no evidence: a forgery.
        found = []
        for value in values:
            try:
                shape = _shape(value)
            except _unreadable:
                _forged()
                continue
            if shape is not None:
                found.append(shape)
        return found

    def bound(line: int, *values: Any, _record: Callable = sink.record,
              _shapes: Callable = shapes_of) -> None:
        """Record the tensors among the values a statement just bound."""
        _record(line, _shapes(values))

    def returned(line: int, value: Any, _record: Callable = sink.record,
                 _shapes: Callable = shapes_of) -> Any:
        """Record the tensor(s) of a return value and pass it through."""
        items = value if is_a(value, (tuple, list)) else (value,)
        _record(line, _shapes(items))
        return value

    def entered(line: int, _canary: list = canary,
                _record: Callable = sink.record) -> None:
        """A function (or lambda) of the submission starting at ``line``
        was called."""
        if _canary[0] is not None:
            _record(CANARY_LINE, [_canary[0]])
        _record(line, [])

    return ShapeRecorder(reset, forged, bound, returned, entered)


class StreamSink(NamedTuple):
    """The worker's sink: each call writes one frame on the result channel
    (``wire.frame_writer``) and keeps nothing. A tuple of functions whose
    writer is a default value: nothing here can be reassigned without an
    audit event, and what was written stays written."""

    start: Callable[[], None]
    forged: Callable[[], None]
    record: Callable[[int, list[list[int]]], None]


def stream_sink(write: Callable[[str], None]) -> StreamSink:
    """A ``StreamSink`` writing with ``write`` (``wire.frame_writer``)."""
    def start(_write: Callable[[str], None] = write) -> None:
        _write('{"kind": "shape", "start": true}')

    def forged(_write: Callable[[str], None] = write) -> None:
        _write('{"kind": "shape", "forged": true}')

    def record(line: int, shapes: list[list[int]],
               _write: Callable[[str], None] = write,
               _join: Callable[..., str] = ",".join,
               _int: type = int) -> None:
        # Plain ints only (tensor_shape made them): "%d" of an int is JSON.
        text = _join("[" + _join("%d" % _int(d) for d in shape) + "]"
                     for shape in shapes)
        _write('{"kind": "shape", "line": %d, "shapes": [%s]}'
               % (_int(line), text))
    return StreamSink(start, forged, record)


class UnreadableShape(Exception):
    """A tensor whose shape cannot be read through torch's own type: a
    forgery (``tensor_shape``), never "no tensor"."""


# Taken at import, before any submission runs: the C type's ``size``, which
# no subclass's ``shape`` or ``size`` overrides, called with every
# ``__torch_function__`` off (a subclass's would answer instead).
_c_size = torch._C.TensorBase.size
_no_torch_function = torch._C.DisableTorchFunction
_index = operator.index
_tensor_type = torch.Tensor


def tensor_shape(value: Any) -> list[int] | None:
    """The shape of ``value`` if it is a tensor, else None, read through
    the C type (a subclass's ``shape`` whose dimensions refuse ``int()``
    once made the recorder record "bound no tensor"). Raises
    ``UnreadableShape`` for a tensor whose shape cannot be read so."""
    if not is_a(value, _tensor_type):
        return None
    try:
        with _no_torch_function():
            size = _c_size(value)
        return [_index(d) for d in size]
    except Exception:   # noqa: BLE001 - a hostile tensor subclass
        raise UnreadableShape() from None


_target_values = regions.target_values
_bound_targets = regions.bound_targets


def _written(target: ast.expr) -> ast.expr | None:
    """A load of the tensor a subscript target writes into (``t`` of
    ``t[i] = ...``, ``self.t`` of ``self.t[i] += ...``), else None."""
    if not isinstance(target, ast.Subscript):
        return None
    base = target.value
    while isinstance(base, ast.Subscript):     # t[i][j] = ...
        base = base.value
    if isinstance(base, ast.Name) or isinstance(base, ast.Attribute) and \
            isinstance(base.value, ast.Name) and base.value.id == "self":
        return ast.parse(ast.unparse(base), mode="eval").body
    return None


class _Instrumenter(ast.NodeTransformer):
    """Adds a recorder call after each recorded statement, wraps the value
    of each recorded ``return`` and records each function's entry."""

    def __init__(self, statements: set[int], recorder: str,
                 inplace: bool = False):
        self.statements = statements   # id() of the nodes to instrument
        self.recorder = recorder
        self.inplace = inplace         # record in-place ops' tensors too

    def _call(self, method: str, line: int, args: list[ast.expr]) -> ast.Call:
        # A placeholder constant, replaced by the recorder's guarded method
        # in the compiled code (``link``): no name leads to the recorder.
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
        targets = _bound_targets(node)
        values = [v for t in targets for v in _target_values(t)]
        records = [ast.Expr(self._call("bound", node.lineno, values))] \
            if values else []
        # ``scores[..., i, i + 1:] = -inf`` changes ``scores`` in place:
        # with ``inplace``, the whole tensor is recorded after it.
        written = [_written(t) for t in targets] if self.inplace else []
        records += [ast.Expr(self._call("changed", node.lineno, [w]))
                    for w in written if w is not None]
        if not records:
            return node
        for record in records:
            ast.copy_location(record, node)
        return [node, *records]

    visit_Assign = visit_AnnAssign = visit_AugAssign = _bind

    def visit_Expr(self, node: ast.Expr) -> Any:
        """``t.masked_fill_(...)`` (a method named ``..._``, torch's
        in-place convention) changes ``t`` without binding it: with
        ``inplace``, ``t`` is recorded after the statement as if bound,
        so the value recorder sees the tensor the line leaves."""
        self.generic_visit(node)
        call = node.value
        if not self.inplace or id(node) not in self.statements or \
                not isinstance(call, ast.Call) or \
                not isinstance(call.func, ast.Attribute) or \
                not call.func.attr.endswith("_") or \
                call.func.attr.startswith("_"):
            return node
        target = call.func.value
        chain = target
        while isinstance(chain, ast.Attribute):
            chain = chain.value
        if not isinstance(chain, ast.Name):
            return node      # a call's result: no name to read it by again
        value = ast.parse(ast.unparse(target), mode="eval").body
        record = ast.Expr(self._call("changed", node.lineno, [value]))
        ast.copy_location(record, node)
        return [node, ast.fix_missing_locations(record)]

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
               methods: dict[str, tuple[str, ...]],
               inplace: bool = False) -> ast.Module:
    """The AST of ``source`` with shape recording on the statements of its
    graded regions (``methods``: the graded rubric's task methods, which
    the probe carries: see ``regions.graded_regions``) and of
    every function, and the entry of every function and lambda recorded:
    what ran decides which helpers a task's deductions read. Line numbers
    are the original ones. With ``inplace`` (the value recorder), the
    tensor an in-place method changes is recorded too."""
    tree = ast.parse(source)
    found = regions.student_statements(
        tree, regions.graded_regions(source, tree, methods=methods))
    wanted = {id(node) for _, node in found}
    for function in ast.walk(tree):
        if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            wanted.update(id(node) for stmt in function.body
                          for node in ast.walk(stmt)
                          if isinstance(node, ast.stmt))
    tree = _Instrumenter(wanted, recorder, inplace).visit(tree)
    return ast.fix_missing_locations(tree)


def load_traced(source: str, filename: str,
                methods: dict[str, tuple[str, ...]], recorder: Any,
                prefix: str, inplace: bool = False) -> types.ModuleType:
    """A copy of the submission instrumented (``instrument``) to call
    ``recorder`` through the placeholder constants named by ``prefix``
    (``link``); lookups by ``__name__`` still find the plain copy. Raises
    ImportFailure as ``load_module`` does."""
    plain = sys.modules.get(MODULE_NAME)
    try:
        tree = instrument(source, prefix, methods, inplace)
        return load_module(
            source, filename, tree=tree,
            link=lambda code, namespace: link(code, recorder, prefix,
                                              namespace))
    finally:
        if plain is not None:
            sys.modules[MODULE_NAME] = plain


class TracedModule:
    """The instrumented copy of a submission and its shape recorder
    (``installed``: one made by ``install_recorder`` before the plain copy
    loaded)."""

    def __init__(self, source: str, filename: str,
                 methods: dict[str, tuple[str, ...]],
                 installed: tuple[ShapeRecorder, str]):
        self.recorder, prefix = installed
        self.module = load_traced(source, filename, methods, self.recorder,
                                  prefix)


def link(code: types.CodeType, recorder: Any, prefix: str,
         namespace: dict) -> types.CodeType:
    """``code`` with each placeholder constant ``"<prefix>.<method>"``
    replaced by a guard of ``recorder.<method>``. The guard records only a
    call made by one of these code objects, with this module's globals,
    on the line it names: a wrapper, a forged record, a replaced
    ``__code__`` or a call from other code records nothing and tells the
    parent at once that the trace is forged (``ShapeRecorder.forged``),
    which no later call can undo."""
    ours: set[int] = set()
    kept: list[types.CodeType] = []     # keeps the ids in ``ours`` unique
    guards: dict[str, Callable[..., Any]] = {}

    def guard(method: str) -> Callable[..., Any]:
        target = getattr(recorder, method)
        refuse = recorder.forged

        def call(line: int, *args: Any) -> Any:
            caller = sys._getframe(1)
            if id(caller.f_code) in ours and caller.f_lineno == line and \
                    caller.f_globals is namespace:
                return target(line, *args)
            refuse()
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


def install_recorder(sink: Any) -> tuple[ShapeRecorder, str]:
    """A new shape recorder sending to ``sink`` and the random prefix of
    the placeholder constants through which the traced copy calls it (see
    ``link``). No module, builtin or global holds it (only the caller's
    frame, the traced copy's ``TracedModule`` and the guards, constants of
    the traced code); a call student code makes itself is refused, and
    whoever reaches it (a frame's ``f_back`` raises no audit event) finds
    no table: what it sent is the parent's."""
    return make_recorder(sink), f"autograder-{secrets.token_hex(8)}"


# --------------------------------------------------------------------------
