"""The scratch bound counts files a submission holds open after unlinking
them (and memfds), with and without namespaces: no folder shows them, so a
bound read from the folder alone let a submission hold 512 MiB. Each attack
has its control: the same code holding less than the bound passes."""
from __future__ import annotations

import pytest
import torch

from autograder.sandbox.jail import landlock_abi
from autograder.sandbox.pool import Sandbox
from autograder.sandbox.protocol import MEMORY, OK, Probe
from kit_tests.jail_modes import refusal
from kit_tests.own_worker_user import own_worker_user

HOLDER = '''
import os

import torch.nn as nn

KEPT = []


class Holder(nn.Module):
    def __init__(self, how, files):
        super().__init__()
        self.how, self.files = how, files

    def forward(self, x):
        for i in range(self.files):
            if self.how in ("memfd", "child"):
                fd = os.memfd_create(f"held-{i}")
            else:
                fd = os.open(f"held-{i}", os.O_RDWR | os.O_CREAT, 0o600)
                os.unlink(f"held-{i}")
            os.write(fd, b"x" * (8 << 20))
            KEPT.append(fd)
        if self.how == "child":
            if os.fork() == 0:      # the child keeps them; the parent not
                import time
                time.sleep(60)
                os._exit(0)
            for fd in KEPT:
                os.close(fd)
        import time
        # Over the bound, held until the keeper (which looks every few
        # hundredths of a second, at the forked child's files every
        # second) kills it: a loaded machine may delay its look by
        # seconds. Under the bound, held a second.
        time.sleep(20 if self.files * 8 > 64 else 1)
        return x
'''


def _modes() -> list:
    return [pytest.param(True, id="namespaces"),
            pytest.param(False, id="no-namespaces", marks=pytest.mark.skipif(
                landlock_abi() < 6,
                reason="without namespaces the jail needs Landlock ABI 6"))]


@pytest.fixture(scope="module", params=_modes())
def box(request):
    # The grader's refusal is asked when the mode runs, not at collection,
    # of the mode's own sandbox (starting one costs seconds of CPU).
    with Sandbox(namespaces=request.param) as sandbox:
        refused = None if request.param else refusal(sandbox)
        if refused is not None:
            pytest.skip(f"the grader refuses ({refused})")
        yield sandbox


def _run(box, how: str, files: int):
    probe = Probe(f"{how}-{files}", "Holder", {"how": how, "files": files},
                  args=[torch.zeros(1)], timeout=60)
    [result] = box.run(HOLDER, "holder.py", [probe])
    return result


@pytest.mark.parametrize("how", ["unlinked", "memfd"])
def test_unlinked_open_files_count_against_the_scratch_bound(box, how):
    # 12 x 8 MiB = 96 MiB held, no name left for any of them. With a
    # mount namespace the scratch tmpfs refuses the unlinked files itself
    # (it counts them); a memfd is in no folder: the keeper stops it.
    result = _run(box, how, 12)
    if how == "unlinked" and result.status != MEMORY:
        assert "No space left on device" in result.message, result.message
        return
    assert result.status == MEMORY, (result.status, result.message)
    assert "files grew past 64 MiB" in result.message


@pytest.mark.parametrize("how", ["unlinked", "memfd"])
def test_control_files_under_the_bound_are_fine(box, how):
    result = _run(box, how, 4)      # 32 MiB
    assert result.status == OK, (result.status, result.message)


def test_a_forked_child_holding_them_is_counted(box, monkeypatch):
    # Its fork must not meet another test's fork bomb in the process count.
    with own_worker_user(box, monkeypatch):
        result = _run(box, "child", 12)
    assert result.status == MEMORY, (result.status, result.message)
