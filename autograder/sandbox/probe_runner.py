"""Answer one probe with the classes of the submission's module: build
the instance, load its weights, call it (a second and third time where
the probe asks), describe its attributes, and report what went wrong as
a status, never an exception. Runs student code: only inside the
sandbox's worker process."""
from __future__ import annotations

import inspect
import time
import types
from typing import Any, Callable

import torch
import torch.nn as nn

from autograder.sandbox import fastbuild
from autograder.sandbox.protocol import (CRASH, ERROR, FRESH_RAISES, OK,
                                         Probe, ProbeResult,
                                         canary_shape)
from autograder.sandbox.safe_type import is_a, type_name
from autograder.sandbox.shape_recorder import ShapeRecorder, tensor_shape
from autograder.sandbox.stand_in import stand_in_class
from autograder.sandbox.state_change import changed_state, state_snapshot
from autograder.sandbox.student_module import (describe_exception,
                                               exit_message)


class ProbeFailure(Exception):
    """A probe cannot proceed; carries the status and message to report."""

    def __init__(self, status: str, message: str, phase: str = "",
                 exception: str = "", line: int | None = None):
        super().__init__(message)
        self.status, self.message, self.phase = status, message, phase
        self.exception, self.line = exception, line


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
            if not is_a(target, torch.Tensor):
                raise ProbeFailure(
                    ERROR, f"{path} is a {type_name(target)}, expected a "
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
            owner = ".".join(walked[:-1]) or type_name(module)
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
        found[name] = {"type": "Parameter", "shape": tensor_shape(param)}
    for name, buf in module._buffers.items():
        found[name] = {"type": "Tensor", "shape": tensor_shape(buf)}
    # Dunder name: cannot collide with an attribute a student defines.
    found["__parameters__"] = {"type": "int", "value": sum(
        p.numel() for p in module.parameters())}
    return found


def _describe(value: Any) -> dict[str, Any]:
    kind = type_name(value)
    if is_a(value, nn.Linear):
        return {"type": kind, "in_features": int(value.in_features),
                "out_features": int(value.out_features),
                "bias": value.bias is not None}
    if is_a(value, nn.Dropout):
        return {"type": kind, "p": float(value.p)}
    if is_a(value, (bool, int, float)):
        return {"type": kind, "value": value}
    if is_a(value, torch.Tensor):
        return {"type": kind, "shape": tensor_shape(value)}
    return {"type": kind}


def collect_outputs(value: Any) -> tuple[str, list[torch.Tensor]]:
    """``(output_kind, tensors)`` of a call's return value, as float32
    contiguous CPU tensors; raises ProbeFailure for anything else."""
    if is_a(value, torch.Tensor):
        kind, items = "tensor", [value]
    elif is_a(value, (tuple, list)):
        kind, items = "tuple", list(value)
        for i, item in enumerate(items):
            if not is_a(item, torch.Tensor):
                raise ProbeFailure(
                    ERROR, f"forward returned a {type_name(value)} whose "
                    f"item {i} is a {type_name(item)}, expected tensors",
                    "output")
    else:
        raise ProbeFailure(
            ERROR, f"forward returned a {type_name(value)}, expected a "
            "tensor or a tuple of tensors", "output")
    try:
        return kind, [t.detach().to("cpu", torch.float32).contiguous()
                      .clone() for t in items]
    except Exception as exc:   # noqa: BLE001 - e.g. meta or sparse tensors
        raise ProbeFailure(ERROR, f"could not read the returned tensors: "
                           f"{type_name(exc)}: {exc}", "output") from None


def run_probe(module: types.ModuleType, probe: Probe, filename: str,
              recorder: ShapeRecorder | None = None) -> ProbeResult:
    """Answer one probe with the classes of ``module``; ``recorder`` (a
    traced probe's) is told when the call begins, and sends what it
    records itself (``shape_recorder``): the result carries no shapes."""
    if probe.stand_in:
        name = probe.stand_in.cls
        missing = object()
        real = module.__dict__.get(name, missing)
        module.__dict__[name] = stand_in_class(probe, real)
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
        if not (is_a(cls, type) or inspect.isfunction(cls)):
            raise ProbeFailure(ERROR, f"the submission defines no class or "
                               f"function {probe.cls}", "init")
        if probe.seed is not None:
            _seed(probe.seed)   # weights not in state repeat too
        instance = _construct(cls, probe)
        if not is_a(instance, nn.Module):
            got = type_name(instance)
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
            if probe.warm_eval:
                result.changed, result.repeat = warm_up(instance, probe)
            instance.train(probe.train)
            if probe.seed is not None:
                _seed(probe.seed)
            args = [_copy(a) for a in probe.args]
            kwargs = {k: _copy(v) for k, v in probe.kwargs.items()}
            if recorder is not None:
                recorder.reset(canary_shape(probe.canary))
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
                if not probe.train:
                    result.repeat = repeat_call(instance, probe)
                result.again = call_again(
                    instance, probe, filename,
                    lambda: _rebuilt(cls, probe, before))
    except ProbeFailure as failure:
        _fail(result, failure.status, failure.message, failure.phase or phase,
              failure.exception, failure.line)
    except SystemExit as exc:
        _fail(result, CRASH, exit_message(exc, f"probe {probe.id} ({phase})"),
              phase, "SystemExit")
    except BaseException as exc:   # noqa: B902 - student code may raise anything
        status, message, name, line = describe_exception(exc, filename)
        _fail(result, status, message, phase, name, line)
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


def _rebuilt(cls: Callable[..., Any], probe: Probe,
             before: dict[str, Any]) -> nn.Module:
    """A new module built as the probe's was, holding the tensors the
    first held before its first call (``before``: weights drawn or not in
    the probe too), in eval mode: what the module computes with no call
    behind it."""
    if probe.seed is not None:
        _seed(probe.seed)
    fresh = _construct(cls, probe)
    if not is_a(fresh, nn.Module):
        raise ProbeFailure(ERROR, "not a module", "init")
    load_state(fresh, {path: value for path, value in before.items()
                       if is_a(value, torch.Tensor)})
    return fresh.eval()


def _call_copy(instance: nn.Module, probe: Probe) -> Any:
    """``instance`` called on copies of the probe's arguments (a call
    that changes its input in place leaves the probe's own as they
    were)."""
    return instance(*[_copy(a) for a in probe.args],
                    **{k: _copy(v) for k, v in probe.kwargs.items()})


def warm_up(instance: nn.Module, probe: Probe
            ) -> tuple[list[str], list[torch.Tensor]]:
    """``Probe.warm_eval``'s eval-mode call, whatever it returns or
    raises, then the same call again: what the first changed in the
    module's state, and the second's first output (compared in the parent
    with a new module's eval output: an eval output the first call
    changed is the eval items' to charge)."""
    before = state_snapshot(instance)
    again: list[torch.Tensor] = []
    try:
        instance.eval()
        with torch.no_grad():
            _call_copy(instance, probe)
        changed = changed_state(before, state_snapshot(instance))
        with torch.no_grad():
            value = _call_copy(instance, probe)
        again = collect_outputs(value)[1][:1]
    except Exception:   # noqa: BLE001 - the eval items judge that call
        changed = changed_state(before, state_snapshot(instance))
    return changed, again


def repeat_call(instance: nn.Module, probe: Probe) -> list[torch.Tensor]:
    """An eval probe's call made again at once, on the same input in the
    same order (``ProbeResult.repeat``): its first output, or nothing if
    it raised or returned no tensor (the reversed call after it reports
    that). Randomness in eval mode or state the first call changed shows
    there; code that mixes batch elements does not."""
    try:
        with torch.no_grad():
            value = _call_copy(instance, probe)
        _, outputs = collect_outputs(value)
    except BaseException:   # noqa: B902 - student code may raise anything
        return []
    return outputs[:1]


def call_again(instance: nn.Module, probe: Probe, filename: str,
               rebuild: Callable[[], nn.Module] | None = None
               ) -> ProbeResult:
    """The probe's second call (``Probe.again``): eval mode, the same
    input with its batch order reversed; outputs as returned. With
    ``Probe.again_longer``, a third call judged against ``rebuild()``
    (a new module, its first call on that input)."""
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
            problem = longer_call(instance, probe, args, kwargs, filename,
                                  rebuild, again.outputs)
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
    if is_a(value, torch.Tensor) and value.dim() >= 3:
        return torch.cat([value, value[:, :tokens]], dim=1)
    return value


def longer_call(instance: nn.Module, probe: Probe, args: list,
                kwargs: dict[str, Any], filename: str,
                rebuild: Callable[[], nn.Module] | None = None,
                shorter: list[torch.Tensor] | None = None) -> str:
    """The third call (``Probe.again_longer``): the second call's input
    with its first tokens appended. What went wrong ("" if nothing): it
    raised, returned the first call's length, (``Probe.again_prefix``) its
    first positions differ from the second call's outputs ``shorter`` (a
    causal module's output at a position depends only on the tokens up
    to it), or (``rebuild``) its values differ at some position from
    those of a new module built the same way whose first call is this one
    (a mask or cache sized by, or kept from, the first call). The values
    are the module's own: whether they are right is the other checks'
    business."""
    what = (f"a third call on a longer input (the same batch with "
            f"{probe.again_longer} more token"
            f"{'s' * (probe.again_longer > 1)})")
    longer = [_longer(a, probe.again_longer) for a in args]
    try:
        with torch.no_grad():
            value = instance(*[_copy(a) for a in longer], **kwargs)
        _, outputs = collect_outputs(value)
    except ProbeFailure as failure:
        return f"{what} returned {failure.message}"
    except SystemExit as exc:
        return f"{what}: {exit_message(exc, 'the third call')}"
    except BaseException as exc:   # noqa: B902 - student code may raise anything
        said = f"{what} raised {describe_exception(exc, filename)[1]}"
        return said + (FRESH_RAISES if _raises_fresh(rebuild, longer, kwargs)
                       else "")
    first = longer[0] if longer and is_a(longer[0], torch.Tensor) else None
    if first is None or first.dim() < 3 or not outputs or \
            outputs[0].dim() < 2:
        return ""
    want, got = int(first.shape[1]), int(outputs[0].shape[1])
    if got != want:
        return (f"{what} returned {got} positions, not {want}: is "
                f"something sized by the first call?")
    fresh = _first_call_outputs(rebuild, longer, kwargs)
    problem = "" if fresh is None else _differs_from_fresh(
        what, outputs, fresh, probe.again_longer)
    if not problem and probe.again_prefix and shorter:
        problem = _prefix_differs(what, outputs, shorter)
    return problem


LONGER_ATOL = 1e-5   # the same computation twice: float noise at most


def _raises_fresh(rebuild: Callable[[], nn.Module] | None, longer: list,
                  kwargs: dict[str, Any]) -> bool:
    """Whether a new module's first call on ``longer`` raises as well."""
    if rebuild is None:
        return False
    try:
        module = rebuild()
        with torch.no_grad():
            module(*[_copy(a) for a in longer], **kwargs)
    except BaseException:   # noqa: B902 - student code may raise anything
        return True
    return False


def _first_call_outputs(rebuild: Callable[[], nn.Module] | None,
                        longer: list, kwargs: dict[str, Any]
                        ) -> list[torch.Tensor] | None:
    """The outputs of ``rebuild()``'s first call on ``longer``; None when
    there is none to compare with (no rebuild, or it fails: the module
    cannot be built twice, and the other checks judge it)."""
    if rebuild is None:
        return None
    try:
        fresh = rebuild()
        with torch.no_grad():
            value = fresh(*[_copy(a) for a in longer],
                          **{k: _copy(v) for k, v in kwargs.items()})
        return collect_outputs(value)[1]
    except (Exception, SystemExit):   # noqa: BLE001 - say nothing then
        return None


def _differs_from_fresh(what: str, outputs: list[torch.Tensor],
                        fresh: list[torch.Tensor], appended: int) -> str:
    """Where the third call's ``outputs`` differ from a new module's
    ``fresh`` ones, by position (dim 1); "" if nowhere."""
    for index, (got, want) in enumerate(zip(outputs, fresh)):
        name = "the output" if len(outputs) == 1 else f"output {index}"
        if got.shape != want.shape:
            return (f"{what} gave {name} of shape {list(got.shape)}, while "
                    f"a new module called once on that input gives "
                    f"{list(want.shape)}: is something kept from the "
                    f"first call?")
        if got.dim() < 2:
            continue
        apart = _positions_apart(got, want, LONGER_ATOL)
        if apart:
            where, listed, gap = apart
            return (f"{what} gives values other than a new module's, "
                    f"built the same way and called once on that input: "
                    f"{name} differs at {len(where)} of {got.shape[1]} "
                    f"positions ({listed}; the first "
                    f"{got.shape[1] - appended} are the first call's), "
                    f"by up to {gap:.3g}: is something "
                    f"(a mask, a cache) sized by or kept from the first "
                    f"call?")
    return ""


def _positions_apart(got: torch.Tensor, want: torch.Tensor, atol: float
                     ) -> tuple[list[int], str, float] | None:
    """The positions (dim 1) where ``got`` and ``want`` (one shape) differ
    by more than ``atol`` or where one alone is NaN, those positions
    listed for a message (the first eight), and the largest gap; None if
    nowhere."""
    gap = (got - want).abs().nan_to_num(nan=0.0, posinf=float("inf"))
    bad = (gap > atol) | (got.isnan() ^ want.isnan())
    rows = bad.transpose(0, 1).reshape(got.shape[1], -1).any(dim=1)
    if not bool(rows.any()):
        return None
    where = [int(i) for i in rows.nonzero().flatten()]
    listed = ", ".join(map(str, where[:8])) + \
        (", ..." if len(where) > 8 else "")
    return where, listed, float(gap[bad].max())


def _prefix_differs(what: str, outputs: list[torch.Tensor],
                    shorter: list[torch.Tensor]) -> str:
    """Where a causal module's third call (``outputs``) differs, on the
    positions of the second call, from the second call's outputs
    (``shorter``): "" if nowhere. Float noise of the longer matmuls is
    within ``LONGER_ATOL`` relative to the values' scale."""
    for index, (got, want) in enumerate(zip(outputs, shorter)):
        name = "the output" if len(outputs) == 1 else f"output {index}"
        # One position shows no prefix a mistake of the mask could keep
        # (a softmax over the wrong axis is right on one token).
        if got.dim() < 2 or want.dim() != got.dim() or want.shape[1] < 2 or \
                got.shape[0] != want.shape[0] or \
                got.shape[1] < want.shape[1] or \
                got.shape[2:] != want.shape[2:]:
            continue
        head = got[:, :want.shape[1]]
        scale = max(1.0, float(want.abs().nan_to_num(0.0).amax())) \
            if want.numel() else 1.0
        apart = _positions_apart(head, want, LONGER_ATOL * scale)
        if apart:
            where, listed, gap = apart
            return (f"{what} changes the outputs of the tokens it shares "
                    f"with the second call: {name} differs from the "
                    f"second call's at {len(where)} of its "
                    f"{want.shape[1]} positions ({listed}), by up to "
                    f"{gap:.3g}. In causal attention an "
                    f"output depends only on the tokens up to its own "
                    f"position, whatever follows")
    return ""


def _reversed_batch(value: Any) -> Any:
    if is_a(value, torch.Tensor) and value.dim() > 0:
        return value.flip(0)
    return value


def _copy(value: Any) -> Any:
    # The student may modify its inputs in place; keep the probe intact.
    return value.clone() if is_a(value, torch.Tensor) else value


def _fail(result: ProbeResult, status: str, message: str, phase: str,
          exception: str = "", line: int | None = None) -> None:
    result.status, result.message, result.phase = status, message, phase
    result.exception, result.line = exception, line
    result.outputs, result.output_kind = [], ""
