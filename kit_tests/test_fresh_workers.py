"""A fresh probe (``Probe.fresh``: the causal check's calls) shares no
state with the calls it is compared with. A cache in the module is reset
by the fresh import; state the submission keeps outside its module (in
``builtins``, on ``torch``) survives it, so the compared calls run in
different worker processes (``Probe.process``): a cache replaying the
first call's outputs on the shared prefix, with no mask at all, replays
nothing. The causal check's calls go to four processes, whatever the
number of tokens (one per call took the reference's grade from 17 s to
54 s)."""
from __future__ import annotations

import pytest
import torch

from autograder.sandbox.pool import Sandbox
from autograder.sandbox.protocol import IMPORT_ERROR, OK, Probe

REPLAY = '''
import builtins
import torch
import torch.nn as nn

CACHE = {}
WHERE = "WHERE"
if WHERE == "builtins":
    CACHE = builtins.__dict__.setdefault("_replayed", {})
elif WHERE == "torch":
    if not hasattr(torch, "_replayed"):
        torch._replayed = {}
    CACHE = torch._replayed


class Unmasked(nn.Module):
    """Attention with no mask: every position sees the future. Rows whose
    prefix an earlier call saw are replayed from it."""

    def forward(self, x):
        w = torch.softmax(x @ x.transpose(1, 2), dim=-1)
        out = w @ x
        for i in range(x.shape[1]):
            key = x[:, :i + 1].numpy().tobytes()
            if key in CACHE:
                out[:, i] = CACHE[key]
            else:
                CACHE[key] = out[:, i].clone()
        return out
'''


def _earlier_change(box: Sandbox, where: str,
                    processes: tuple[int, int]) -> float:
    """How much the outputs before the last token move when only the last
    token changes, each call fresh, in these worker processes."""
    x = torch.randn(1, 4, 3, generator=torch.Generator().manual_seed(3))
    changed = x.clone()
    changed[:, -1] = torch.randn(1, 3, generator=torch.Generator()
                                 .manual_seed(4))
    probes = [Probe(f"call-{k}", "Unmasked", {}, args=[value], fresh=True,
                    process=process)
              for k, (value, process) in enumerate(zip((x, changed),
                                                       processes))]
    first, second = box.run(REPLAY.replace('"WHERE"', repr(where)),
                            "replay.py", probes)
    assert first.status == second.status == OK, \
        (first.message, second.message)
    return float((first.outputs[0][:, :-1]
                  - second.outputs[0][:, :-1]).abs().max())


@pytest.mark.parametrize("where", ["builtins", "torch", "module"])
def test_state_kept_outside_the_module_is_not_shared(box, where):
    # No mask: the last token changes every earlier position's output,
    # unless the second call replays the first's.
    assert _earlier_change(box, where, (1, 2)) > 1e-3, \
        "replayed from another call"


def test_one_process_shares_it(box):
    # The attack is real: in one process, a fresh import does not reset
    # what is kept on torch.
    assert _earlier_change(box, "torch", (1, 1)) == 0


def test_an_import_that_fails_is_not_retried_in_each_process(box,
                                                             monkeypatch):
    probes = [Probe(f"p{k}", "Unmasked", {}, process=k) for k in range(3)]
    started = []
    start = box.start

    def counted(process):
        started.append(process)
        start(process)
    monkeypatch.setattr(box, "start", counted)
    results = box.run("raise ValueError('broken')\n", "broken.py", probes)
    assert [r.status for r in results] == [IMPORT_ERROR] * 3
    assert all("broken" in r.message for r in results)
    assert len(started) == 1
