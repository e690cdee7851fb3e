"""A process the submission forks stays parked whatever handlers it
inherits (a park that waited in ``signal.pause()`` ran the
submission's handler; the handler raised, CPython reported the fork hook's
error and went on, and the child ran on). Each attack beside its control:
the old park, which the same attack leaves."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

from autograder.sandbox.pool import Sandbox
from autograder.sandbox.protocol import OK, Probe
from kit_tests.jail_modes import refusal
from kit_tests.test_cli import ROOT

# A handler that raises on every catchable signal, inherited by the
# child; the parent signals the child with a sample of them (standard,
# job control, real-time) and reads what it says through a pipe it made
# before the fork: b"escaped" if os.fork() returned in the child.
ATTACK = '''
import os, signal, time

CHILDREN = []

class Boom(Exception):
    pass

def boom(*args):
    raise Boom()

def fork_and_poke():
    catchable = [s for s in signal.valid_signals()
                 if s not in (signal.SIGKILL, signal.SIGSTOP)]
    for number in catchable:
        try:
            signal.signal(number, boom)
        except (OSError, ValueError):
            pass
    read, write = os.pipe()
    try:
        pid = os.fork()
    except PermissionError:   # the jail's seccomp refuses every new process
        return False
    if pid == 0:
        os.write(write, b"escaped")
        os._exit(0)
    CHILDREN.append(pid)
    for number in catchable:   # the parent keeps none of them
        try:
            signal.signal(number, signal.SIG_DFL)
        except (OSError, ValueError):
            pass
    os.close(write)
    os.set_blocking(read, False)
    heard = b""
    pokes = [signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM, signal.SIGINT,
             signal.SIGHUP, signal.SIGALRM, signal.SIGCONT, signal.SIGCHLD,
             signal.SIGWINCH, signal.SIGRTMIN, signal.SIGRTMAX]
    for _ in range(25):
        for number in pokes:
            try:
                os.kill(pid, number)
            except ProcessLookupError:
                pass
        time.sleep(0.02)
        try:
            heard += os.read(read, 64)
        except BlockingIOError:
            pass
    return heard
'''

SCRIPT = ATTACK + '''
import sys

def old_park():
    while True:
        signal.pause()

if sys.argv[1] == "old":
    os.register_at_fork(after_in_child=old_park)
else:
    from autograder.sandbox.worker_jail import park_forks
    park_forks()
print(fork_and_poke().decode())
for pid in CHILDREN:   # parked: only SIGKILL ends it
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
'''


@pytest.mark.parametrize("park", ["jail", "old"])
def test_no_handler_leaves_the_park(park):
    done = subprocess.run([sys.executable, "-c", SCRIPT, park],
                          capture_output=True, text=True, timeout=120,
                          cwd=ROOT, env={"PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-2000:]
    if park == "old":   # the control: the attack works on the old park
        assert "escaped" in done.stdout, done.stderr[-2000:]
    else:
        assert "escaped" not in done.stdout, done.stderr[-2000:]


SUBMISSION = ATTACK + '''
import torch
import torch.nn as nn


class Forker(nn.Module):
    def forward(self, x):
        return x + (1.0 if fork_and_poke() else 0.0)
'''


@pytest.mark.parametrize("namespaces", [True, False],
                         ids=["namespaces", "no-namespaces"])
def test_a_forked_child_with_handlers_stays_parked_in_the_jail(namespaces):
    with Sandbox(namespaces=namespaces) as box:
        refused = None if namespaces else refusal(box)
        if refused is not None:
            pytest.skip(f"the grader refuses ({refused})")
        probe = Probe("forker", "Forker", {}, args=[torch.zeros(1)],
                      timeout=60)
        [result] = box.run(SUBMISSION, "forker.py", [probe])
    assert result.status == OK, (result.status, result.message)
    assert result.outputs[0].tolist() == [0.0], "the forked child ran on"


# libc's fork() through ctypes runs no fork hook (nothing parks its
# child); os.fork, the control, does. In the jail both are refused by the
# kernel (seccomp): no child runs a line of Python, however forked.
LIBC_FORK = '''
import ctypes
import os

import torch
import torch.nn as nn


class Forker(nn.Module):
    def __init__(self, how):
        super().__init__()
        self.how = how

    def forward(self, x):
        read, write = os.pipe()
        if self.how == "libc":
            pid = ctypes.CDLL(None, use_errno=True).fork()
        else:
            try:
                pid = os.fork()
            except PermissionError:
                pid = -1
        if pid == 0:
            os.write(write, b"ran")
            os._exit(0)
        os.close(write)
        os.set_blocking(read, False)
        import time
        time.sleep(0.5)
        try:
            heard = os.read(read, 3)
        except BlockingIOError:
            heard = b""
        return x + torch.tensor([float(pid < 0), float(heard == b"ran")])
'''


@pytest.mark.parametrize("how", ["libc", "os"])
@pytest.mark.parametrize("namespaces", [True, False],
                         ids=["namespaces", "no-namespaces"])
def test_no_fork_however_called_gives_a_running_child(namespaces, how):
    with Sandbox(namespaces=namespaces) as box:
        refused = None if namespaces else refusal(box)
        if refused is not None:
            pytest.skip(f"the grader refuses ({refused})")
        probe = Probe(f"fork-{how}", "Forker", {"how": how},
                      args=[torch.zeros(2)], timeout=60)
        [result] = box.run(LIBC_FORK, "forker.py", [probe])
    assert result.status == OK, (result.status, result.message)
    # [refused, a child ran Python]
    assert result.outputs[0].tolist() == [1.0, 0.0], result.outputs[0]
