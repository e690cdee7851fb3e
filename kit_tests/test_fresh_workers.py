"""A fresh probe (``Probe.fresh``: the causal check's calls) shares no
state with another call. A cache in the module is reset by the fresh
import (the control, which holds); state the submission keeps outside
its module (in ``builtins``, on ``torch``) survives it, and a cache
replaying the first call's outputs on the shared prefix, with no mask at
all, passes the causal check (not yet closed). One worker per
fresh probe closes it (tried: the reference's 122 fresh probes took its
grade from 17 s to 54 s, children's CPU 3 s to 11.5 s); the attacks are
kept here as strict xfails, the spec of the fix, so that whoever closes
it sees them pass."""
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


OPEN = pytest.mark.xfail(strict=True, reason=(
    "state outside the module survives a fresh import in one worker"))


@pytest.mark.parametrize("where", [pytest.param("builtins", marks=OPEN),
                                   pytest.param("torch", marks=OPEN),
                                   "module"])
def test_state_kept_outside_the_module_is_not_shared(where):
    x = torch.randn(1, 4, 3, generator=torch.Generator().manual_seed(3))
    changed = x.clone()
    changed[:, -1] = torch.randn(1, 3, generator=torch.Generator()
                                 .manual_seed(4))
    probes = [Probe(f"call-{k}", "Unmasked", {}, args=[value], fresh=True)
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
