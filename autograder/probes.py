"""Build the probes a check needs, and put a failed probe into words.

A probe's time limit is not the kind's to choose: the grade sets every
planned probe's from the GradingConfig (``GradingConfig.time_limit``:
``--timeout``, else the item's, else the rubric's), so a builder's
``timeout`` matters only to probes run outside a grade.

Probe ids are deterministic in what the probe does, so checks that need the
same call (2.1 and 2.3a both call ``forward(x, return_attention=True)`` in
eval mode) share one run.
"""
from __future__ import annotations

import itertools
from typing import Any

import torch

from autograder.text import mdsafe
from autograder.sandbox.limits import LIMITS
from autograder.sandbox.protocol import (CRASH, ERROR, IMPORT_ERROR, MEMORY,
                                         NOT_RUN, TIMEOUT, Probe, ProbeResult,
                                         StandIn)
from autograder.values import Case

TRACE_SEED = 1234   # input of shape-tracing probes (weights stay random)


def case_probe(case: Case, *, train: bool = False,
               kwargs: dict[str, Any] | None = None,
               timeout: float = LIMITS.probe_seconds,
               again: bool = False, suffix: str = "",
               x: torch.Tensor | None = None,
               state: dict[str, torch.Tensor] | None = None,
               drawn_seed: int = 0,
               stand_in: StandIn | None = None) -> Probe:
    """``cls(**case.init)`` with the case's weights, called on its ``x``;
    with ``again``, then called again in eval mode on the same input
    (``Probe.again``: state kept between calls shows there; the
    module-output items judge that second call). The id does not say
    ``again``: a probe shared by several checks is run once, with the
    second call if any of them asks for it (``grade._unique``).

    A train-mode probe is seeded with the case's seed (the checks never
    assume the order of random draws; the seed only makes reruns equal).

    A variant of the call is built here, whole, never edited after: its
    id ends with ``suffix``; ``x`` replaces the case's input, ``state``
    its weights (``{}``: the module's own), with ``drawn_seed`` and
    ``stand_in`` as in :class:`Probe`. A hidden case's probe is marked
    ``hidden``.
    """
    kwargs = dict(kwargs or {})
    mode = "train" if train else "eval"
    longer = longer_tokens(case) if again else 0
    call = ",".join(f"{k}={v}" for k, v in sorted(kwargs.items())) or "x"
    return Probe(id=f"{case.name}:{mode}:{call}{suffix}", cls=case.cls,
                 init=dict(case.init),
                 state=case.weights if state is None else state,
                 args=[case.tensors["x"] if x is None else x],
                 kwargs=kwargs, train=train,
                 seed=case.seed if train else None, timeout=timeout,
                 again=again, again_longer=longer, drawn_seed=drawn_seed,
                 stand_in=stand_in, hidden=is_hidden(case))


def is_hidden(case: Case) -> bool:
    """Whether a probe built from ``case`` carries a hidden case's data."""
    return case.set == "hidden"


LONGER = 3   # tokens the third call of a module probe appends


def longer_tokens(case: Case) -> int:
    """How many tokens a case's third call appends (``Probe.again_longer``):
    ``LONGER``, fewer within the context length, none at it."""
    x = case.tensors.get("x")
    if x is None or x.dim() < 3:
        return 0
    seq = int(x.shape[1])
    context = case.size("context")
    room = LONGER if context is None else max(0, int(context) - seq)
    return min(LONGER, room, seq)


def inspect_probe(cls: str, init: dict[str, Any],
                  timeout: float = LIMITS.probe_seconds) -> Probe:
    """Construct ``cls(**init)`` and report its attributes, no call."""
    args = ",".join(f"{k}={v}" for k, v in sorted(init.items()))
    return Probe(id=f"inspect:{cls}({args})", cls=cls, init=dict(init),
                 call=False, inspect=True, timeout=timeout)


def trace_probes(cls: str, init: dict[str, Any], input_shape: list[int], *,
                 vary_init: dict[str, list] | None = None,
                 vary_kwargs: dict[str, list] | None = None,
                 vary_train: list[bool] | None = None,
                 timeout: float = LIMITS.probe_seconds) -> list[Probe]:
    """Shape-tracing probes over every combination of the variations, with
    fresh random weights and a random ``x`` of ``input_shape``."""
    vary_init, vary_kwargs = vary_init or {}, vary_kwargs or {}
    generator = torch.Generator().manual_seed(TRACE_SEED)
    x = torch.randn(*input_shape, generator=generator)
    init_keys, kw_keys = sorted(vary_init), sorted(vary_kwargs)
    probes = []
    for init_values in itertools.product(*(vary_init[k] for k in init_keys)):
        for kw_values in itertools.product(*(vary_kwargs[k]
                                             for k in kw_keys)):
            for train in (vary_train or [False]):
                full_init = {**init, **dict(zip(init_keys, init_values))}
                kwargs = dict(zip(kw_keys, kw_values))
                label = ",".join(f"{k}={v}" for k, v in sorted(
                    {**full_init, **kwargs}.items()))
                probes.append(Probe(
                    id=f"trace:{cls}:{'train' if train else 'eval'}:{label}",
                    cls=cls, init=full_init, args=[x], kwargs=kwargs,
                    train=train, seed=TRACE_SEED if train else None,
                    trace_shapes=True, timeout=timeout))
    return probes


def call_text(probe: Probe) -> str:
    """How the probe called the student's code, e.g. ``forward(x,
    return_attention=True)`` in train mode."""
    if not probe.call:
        return f"{probe.cls}(...)"
    args = ["x", *(f"{k}={v}" for k, v in probe.kwargs.items())]
    mode = " in train mode" if probe.train else ""
    return f"forward({', '.join(args)}){mode}"


def failure_text(result: ProbeResult, probe: Probe) -> str:
    """A student-facing sentence (markdown) for a probe that did not end
    "ok". The message quotes the submission (its exception's text, its
    source lines), so it is escaped: student text is data."""
    message = mdsafe.inline(result.message.strip() or "(no message)")
    if result.exception == "NotImplementedError" or \
            "not implemented yet" in message:
        return message
    if result.status == IMPORT_ERROR:
        return f"the module failed to import: {message}"
    if result.status == TIMEOUT:
        return f"{call_text(probe)} did not finish: {message}"
    if result.status == MEMORY:
        return f"{call_text(probe)} used too much memory: {message}"
    if result.status == CRASH:
        return f"the worker running your code stopped: {message}"
    if result.status == NOT_RUN:
        return f"not run: {message}"
    if result.status == ERROR:
        where = {"init": f"constructing {probe.cls}({_init_text(probe)})",
                 "load": "loading the test weights into "
                         f"{probe.cls}",
                 "call": call_text(probe),
                 "output": f"the value returned by {call_text(probe)}",
                 "import": "importing the module"}.get(result.phase,
                                                       call_text(probe))
        return f"{where} failed: {message}"
    return f"{result.status}: {message}"


def short_failure(result: ProbeResult) -> str:
    """A few words for a hidden case: what went wrong, no values."""
    if result.exception == "NotImplementedError":
        return "not implemented yet"
    return {IMPORT_ERROR: "the module failed to import",
            TIMEOUT: "timed out",
            MEMORY: "used too much memory",
            CRASH: "the worker stopped (exit or crash)",
            NOT_RUN: result.message or "not run"}.get(
        result.status,
        f"raised {mdsafe.inline(result.exception, 100)}"
        if result.exception else "failed")


def is_not_implemented(result: ProbeResult) -> bool:
    """Whether the probe hit the skeleton's NotImplementedError (the
    student's own raise: its message as written; one a library raised
    reads ``NotImplementedError: ...``, ``describe_exception``)."""
    return result.exception == "NotImplementedError" and \
        not result.message.startswith("NotImplementedError: ") or \
        "not implemented yet" in result.message


def _init_text(probe: Probe) -> str:
    return ", ".join(f"{k}={v}" for k, v in probe.init.items())
