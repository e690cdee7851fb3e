"""Run probes against a student submission, in the current process.

This module executes untrusted code: call it only inside the sandbox's
worker process (``autograder/sandbox/worker_jail.py``), never in the
grading parent. It is the worker's loop: import the submission
(``student_module``), answer each ``Probe`` with a ``ProbeResult``
(``probe_runner``) on the plain module, on the shape-traced copy
(``shape_recorder``) or on the value-traced copy (``value_recorder``),
with no terminal and an eager ``torch.compile`` (``run_environment``).
"""
from __future__ import annotations

import sys
from typing import Any, Callable, Iterator

from autograder.sandbox import value_recorder
from autograder.sandbox.probe_runner import run_probe
from autograder.sandbox.protocol import Probe, ProbeResult
from autograder.sandbox.run_environment import eager, no_terminal
from autograder.sandbox.shape_table import ShapeTable
from autograder.sandbox.shape_recorder import TracedModule, install_recorder
from autograder.sandbox.student_module import (
    MODULE_NAME, ImportFailure, load_module)


def execute_probes(source: str, filename: str, probes: list[Probe],
                   on_import: Callable[[], None] | None = None,
                   more: Callable[[], list[Probe]] | None = None,
                   shape_sink: Any = None) -> Iterator[ProbeResult]:
    """Import ``source`` as a fresh module and yield one result per probe,
    in order. An import failure gives every probe that status (usually
    IMPORT_ERROR). ``on_import`` is called once the module imported.
    ``more`` is called once ``probes`` are all answered and returns the
    probes that follow (the hidden cases', which the parent sends only
    then: see ``supervisor.Attempt``). While it runs the submission has no
    terminal (``no_terminal``) and runs eagerly (``eager``).

    ``shape_sink``: where traced probes' shape records go as they are made
    (the sandbox's worker: ``shape_recorder.stream_sink``, the parent
    rebuilds the table and the results carry none). Without it (the
    student's own process, where no one is to be kept out) a
    ``ShapeTable`` collects them here and each traced result carries its
    own."""
    local = ShapeTable() if shape_sink is None else None
    traced = {p.id for p in probes if p.trace_shapes}

    def then() -> list[Probe]:
        found = more() if more is not None else []
        traced.update(p.id for p in found if p.trace_shapes)
        return found

    with no_terminal(), eager():
        for result in _execute_probes(source, filename, probes, on_import,
                                      then, shape_sink or local):
            if local is not None:
                shapes, problem = local.take()
                if result.id in traced:
                    result.shapes, result.trace_forged = shapes, problem
            yield result


def _execute_probes(source: str, filename: str, probes: list[Probe],
                    on_import: Callable[[], None] | None,
                    more: Callable[[], list[Probe]],
                    shape_sink: Any) -> Iterator[ProbeResult]:
    def stream() -> Iterator[Probe]:
        yield from probes
        yield from more()

    # Made before the plain copy loads (no tell), held by this frame only.
    shapes_installed = install_recorder(shape_sink) \
        if any(probe.trace_shapes for probe in probes) else None
    values_installed = value_recorder.install() \
        if any(probe.trace_values for probe in probes) else None
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
                        source, filename, probe.methods, values_installed)
                except ImportFailure as failure:
                    valued = failure
            if isinstance(valued, ImportFailure):
                yield ProbeResult(probe.id, valued.status,
                                  f"instrumented import failed: {valued}",
                                  phase="import")
            else:
                yield value_recorder.run_traced(valued, probe, filename)
            continue
        if not probe.trace_shapes and probe.fresh:
            yield _run_fresh(source, filename, probe, module)
            continue
        if not probe.trace_shapes:
            yield run_probe(module, probe, filename)
            continue
        if traced is None:
            try:
                traced = TracedModule(source, filename, probe.methods,
                                      shapes_installed)
            except ImportFailure as failure:
                traced = failure
        if isinstance(traced, ImportFailure):
            yield ProbeResult(probe.id, traced.status,
                              f"instrumented import failed: {traced}",
                              phase="import")
        else:
            yield run_probe(traced.module, probe, filename, traced.recorder)


def _run_fresh(source: str, filename: str, probe: Probe,
               plain: object) -> ProbeResult:
    """``probe`` on a fresh import of the submission (``Probe.fresh``);
    lookups by ``__name__`` find the plain module again afterwards."""
    try:
        module = load_module(source, filename)
        return run_probe(module, probe, filename)
    except ImportFailure as failure:
        return ProbeResult(probe.id, failure.status, str(failure),
                           phase="import")
    finally:
        sys.modules[MODULE_NAME] = plain
