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
from autograder.sandbox.protocol import OK, Probe

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


@pytest.mark.parametrize("where", ["builtins", "torch", "module"])
def test_state_kept_outside_the_module_is_not_shared(where):
    x = torch.randn(1, 4, 3, generator=torch.Generator().manual_seed(3))
    changed = x.clone()
    changed[:, -1] = torch.randn(1, 3, generator=torch.Generator()
                                 .manual_seed(4))
    probes = [Probe(f"call-{k}", "Unmasked", {}, args=[value], fresh=True,
                    process=k + 1)
              for k, value in enumerate((x, changed))]
    with Sandbox() as box:
        first, second = box.run(REPLAY.replace('"WHERE"', repr(where)),
                                "replay.py", probes)
    assert first.status == second.status == OK, \
        (first.message, second.message)
    # No mask: the last token changes every earlier position's output,
    # unless the second call replays the first's.
    earlier = (first.outputs[0][:, :-1] - second.outputs[0][:, :-1]).abs()
    assert float(earlier.max()) > 1e-3, "replayed from another call"
