"""The sandbox's bounds are declared once (autograder/sandbox/limits.py):
a frozen record that the sandboxes, the worker's settings, the jail and
the keeper read, never a copy of its values."""
from __future__ import annotations

import dataclasses
import inspect

import pytest

from autograder.sandbox import jail, memlimit, plain, pool, worker_jail
from autograder.sandbox.limits import LIMITS, SandboxLimits
from autograder.sandbox.protocol import Probe


def test_the_limits_cannot_be_changed_in_place():
    with pytest.raises(dataclasses.FrozenInstanceError):
        LIMITS.scratch_bytes = 1   # type: ignore[misc]
    assert LIMITS == SandboxLimits()


@pytest.mark.parametrize("call", [pool.Sandbox.__init__, pool.run_probes,
                                  plain.PlainSandbox.__init__])
def test_every_sandbox_defaults_to_the_declared_limits(call):
    defaults = {name: p.default for name, p in
                inspect.signature(call).parameters.items()}
    assert defaults["memory_mb"] == LIMITS.memory_mb
    assert defaults["output_limit"] == LIMITS.output_chars


def test_worker_settings_and_jail_plan_are_derived(tmp_path):
    probes = [Probe("a", "C", {}, timeout=2.5), Probe("b", "C", {},
                                                      timeout=3.0)]
    settings = worker_jail.WorkerSettings.for_probes(
        probes, str(tmp_path), memory_mb=700, output_limit=123, jobs=2,
        uid=5, gid=6, readable=["/usr"], namespaces=False)
    assert settings.cpu_seconds == 5 + LIMITS.cpu_grace_seconds
    assert settings.memory_mb == memlimit.worker_allowance_mb(700, share=2)
    assert settings.output_limit == 123 and settings.landlock
    plan = settings.jail_plan()
    assert (plan.workdir, plan.readable, plan.uid, plan.gid,
            plan.namespaces) == (settings.scratch, ["/usr"], 5, 6, False)
    assert plan.active == [] and plan.refused == []


def test_the_jail_and_the_keeper_bound_the_scratch_as_declared():
    assert jail.SCRATCH_BYTES == LIMITS.scratch_bytes
    assert worker_jail._MAX_ENTRIES == LIMITS.scratch_entries
    assert worker_jail._WATCH_SECONDS == LIMITS.watch_seconds
