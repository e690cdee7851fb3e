"""The scratch bound counts files a submission holds open after unlinking
them (and memfds), with and without namespaces: no folder shows them, so a
bound read from the folder alone let a submission hold 512 MiB; memfds
mapped with libc's mmap, their descriptors closed, held 360 MiB (shared
mappings, then private read-only ones). Each attack
has its control: the same code holding less than the bound passes."""
from __future__ import annotations

import os
import subprocess

import pytest
import torch

from autograder.sandbox.jail import landlock_abi
from autograder.sandbox.limits import LIMITS
from autograder.sandbox.pool import Sandbox
from autograder.sandbox.protocol import MEMORY, OK, Probe
from autograder.sandbox.worker_jail import submission_processes
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
        if how == "orphan":   # the orphan's files, none of the inmate's
            self.orphan_files, self.files = files, 0

    def forward(self, x):
        for i in range(self.files):
            if self.how in ("memfd", "mapped", "private", "child",
                            "orphan"):
                fd = os.memfd_create(f"held-{i}")
            else:
                fd = os.open(f"held-{i}", os.O_RDWR | os.O_CREAT, 0o600)
                os.unlink(f"held-{i}")
            os.write(fd, b"x" * (8 << 20))
            if self.how in ("mapped", "private"):
                # libc's mmap keeps no descriptor; a read-only PRIVATE
                # mapping keeps the whole memfd alive all the same.
                prot, flags = (3, 1) if self.how == "mapped" else (1, 2)
                import ctypes
                libc = ctypes.CDLL(None)
                libc.mmap.restype = ctypes.c_void_p
                libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t,
                                      ctypes.c_int, ctypes.c_int,
                                      ctypes.c_int, ctypes.c_long]
                KEPT.append(libc.mmap(None, 8 << 20, prot, flags, fd, 0))
                os.close(fd)
                continue
            KEPT.append(fd)
        if self.how == "child":
            try:
                pid = os.fork()
            except PermissionError:  # the jail refuses it: files stay here
                pid = None
            if pid == 0:      # the child keeps them; the parent not
                import time
                time.sleep(60)
                os._exit(0)
            for fd in KEPT if pid else ():
                os.close(fd)
        if self.how == "orphan":
            # A C-level fork (no fork hook parks it) whose own child
            # makes the files and keeps them while its parent exits: the
            # grandchild, orphaned, is re-parented to the keeper (a
            # subreaper) without a PID namespace, out of the inmate's tree.
            import ctypes
            import time
            libc = ctypes.CDLL(None, use_errno=True)
            middle = libc.fork()
            if middle < 0:   # the jail refuses it: the files made here
                for i in range(self.orphan_files):
                    fd = os.memfd_create(f"orphan-{i}")
                    os.write(fd, b"x" * (8 << 20))
                    KEPT.append(fd)
            if middle == 0:
                if libc.fork() == 0:
                    for i in range(self.orphan_files):
                        fd = os.memfd_create(f"orphan-{i}")
                        os.write(fd, b"x" * (8 << 20))
                    time.sleep(60)
                os._exit(0)
            try:
                os.waitpid(middle, 0)
            except ChildProcessError:   # none, or reaped (SIGCHLD ignored)
                pass
        import time
        # Over the bound, held until the keeper (which looks every few
        # hundredths of a second, at the forked child's files every
        # second) kills it: a loaded machine may delay its look by
        # seconds. Under the bound, held a second.
        held = max(self.files, getattr(self, "orphan_files", 0))
        time.sleep(20 if held * 8 > 64 else 1)
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


@pytest.mark.parametrize(
    "how", ["unlinked", "memfd", "mapped", "private"])
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


@pytest.mark.parametrize(
    "how", ["unlinked", "memfd", "mapped", "private"])
def test_control_files_under_the_bound_are_fine(box, how):
    result = _run(box, how, 4)      # 32 MiB
    assert result.status == OK, (result.status, result.message)


def test_a_forked_child_holding_them_is_counted(box, monkeypatch):
    # Its fork must not meet another test's fork bomb in the process count.
    with own_worker_user(box, monkeypatch):
        result = _run(box, "child", 12)
    assert result.status == MEMORY, (result.status, result.message)


@pytest.mark.parametrize("files", [12, 4], ids=["attack", "control"])
def test_an_orphan_holding_them_is_counted(box, monkeypatch, files):
    # An orphaned grandchild holding memfds past the bound once left
    # the inmate's tree and was never charged without a PID namespace.
    with own_worker_user(box, monkeypatch):
        result = _run(box, "orphan", files)
    expected = MEMORY if files * 8 > 64 else OK
    assert result.status == expected, (result.status, result.message)


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                    reason="a process of another uid needs root")
def test_every_process_of_the_workers_own_uid_is_a_holder():
    # A process of the worker's own uid outside the keeper's tree (where
    # no subreaper adopted it) is counted all the same; with the uid
    # shared (None), only the tree is.
    uid = LIMITS.spare_uids[1] - 1
    keeper = subprocess.Popen(["sleep", "30"])        # a tree of its own
    stray = subprocess.Popen(["sleep", "30"], user=uid)
    proc = os.open("/proc", os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert stray.pid in submission_processes(proc, keeper.pid, uid)
        assert stray.pid not in submission_processes(proc, keeper.pid, None)
        assert stray.pid in submission_processes(proc, os.getpid(), None)
    finally:
        os.close(proc)
        for child in (keeper, stray):
            child.kill()
            child.wait()
