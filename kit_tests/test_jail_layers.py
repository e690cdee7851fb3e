"""The jail's layers in the quick suite: the seccomp filter's
program (interpreted here for each architecture, and installed for real),
the scratch folder's bound without a mount namespace, and the causes a
grading command prints when a layer cannot be built."""
from __future__ import annotations

import ctypes
import errno
import os
import socket
import struct

import pytest

from autograder.sandbox import jail, seccomp
from autograder.sandbox.preflight import (PreflightError, describe_jail,
                                          run_preflight)
from autograder.sandbox.protocol import (CRASH, ENVIRONMENT, MEMORY, OK,
                                         ProbeResult)

ALLOW, EPERM = 0x7FFF0000, 0x00050000 | errno.EPERM
ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
# (name, number) per architecture, and the socket calls' numbers.
CALLS = {"x86_64": {"keyctl": 250, "add_key": 248, "request_key": 249,
                    "read": 0, "openat": 257, "socket": 41,
                    "socketpair": 53, "ptrace": 101, "io_uring_setup": 425,
                    "shmget": 29, "shmat": 30, "msgget": 68, "semget": 64,
                    "mq_open": 240, "mmap": 9, "getpid": 39,
                    "rt_sigaction": 13},
         "aarch64": {"keyctl": 219, "add_key": 217, "request_key": 218,
                     "read": 63, "openat": 56, "socket": 198,
                     "socketpair": 199, "ptrace": 117,
                     "io_uring_setup": 425, "shmget": 194, "shmat": 196,
                     "msgget": 186, "semget": 190, "mq_open": 180,
                     "mmap": 222, "getpid": 172, "rt_sigaction": 134}}


def _run_bpf(program, nr: int, arch: int, args=(0,) * 6) -> int:
    """Classic BPF, the few instructions the filter uses, on a
    ``struct seccomp_data``."""
    data = struct.pack("<iIQ6Q", nr, arch, 0, *args, *(0,) * (6 - len(args)))
    acc, pc = 0, 0
    while True:
        code, jt, jf, k = program[pc]
        if code == 0x20:      # ld [k]
            acc = struct.unpack_from("<I", data, k)[0]
        elif code == 0x54:    # and #k
            acc &= k
        elif code == 0x15:    # jeq #k
            pc += jt if acc == k else jf
        elif code == 0x35:    # jge #k
            pc += jt if acc >= k else jf
        elif code == 0x45:    # jset #k
            pc += jt if acc & k else jf
        elif code == 0x06:    # ret #k
            return k
        else:
            raise AssertionError(f"unknown opcode {code:#x}")
        pc += 1


@pytest.mark.parametrize("machine", sorted(CALLS))
def test_the_filter_refuses_what_it_names_and_nothing_else(machine):
    program = seccomp.program(machine)
    calls, arch = CALLS[machine], ARCH[machine]

    def verdict(name, *args):
        return _run_bpf(program, calls[name], arch,
                        (*args, *(0,) * (6 - len(args))))

    for name in ("keyctl", "add_key", "request_key", "ptrace",
                 "io_uring_setup", "shmget", "shmat", "msgget", "semget",
                 "mq_open"):
        assert verdict(name) == EPERM, name
    for name in ("read", "openat", "mmap", "getpid"):
        assert verdict(name) == ALLOW, name
    # Every new socket, whatever its family: no network, no unix socket.
    for family in (socket.AF_UNIX, socket.AF_INET, socket.AF_INET6,
                   socket.AF_NETLINK, 17):   # 17: AF_PACKET
        for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
            assert verdict("socket", family, kind) == EPERM, (family, kind)
    stream = socket.SOCK_STREAM | socket.SOCK_CLOEXEC
    assert verdict("socketpair", socket.AF_UNIX, stream) == EPERM
    assert verdict("socketpair", socket.AF_UNIX, socket.SOCK_DGRAM) == EPERM
    # A signal handler set (its action's pointer, whatever word holds
    # it) is refused; a query of the current one (NULL) is not.
    assert verdict("rt_sigaction", 10, 0x7FFF1234) == EPERM
    assert verdict("rt_sigaction", 10, 0x7F << 32) == EPERM
    assert verdict("rt_sigaction", 10, 0, 0x7FFF1234) == ALLOW
    # Another ABI (32-bit calls on x86-64, say) is refused whole.
    assert _run_bpf(program, calls["read"], 0x40000003) == EPERM
    if machine == "x86_64":   # x32 numbers
        assert _run_bpf(program, 0x40000000 | 250, arch) == EPERM


ENOSYS = 0x00050000 | errno.ENOSYS
PROCESS_CALLS = {"x86_64": {"clone": 56, "clone3": 435, "fork": 57,
                            "vfork": 58},
                 "aarch64": {"clone": 220, "clone3": 435}}


@pytest.mark.parametrize("machine", sorted(CALLS))
def test_the_second_filter_refuses_new_processes_not_threads(machine):
    # libc's fork() through ctypes runs no fork hook: the kernel refuses
    # it. Threads (torch's, threading's) are clone with CLONE_THREAD.
    program = seccomp.process_program(machine)
    calls, arch = PROCESS_CALLS[machine], ARCH[machine]
    fork_flags = 0x01200000 | 17      # glibc fork: CHILD_*TID | SIGCHLD
    spawn_flags = 0x4000 | 0x100 | 17  # posix_spawn: VFORK | VM | SIGCHLD
    thread_flags = 0x3D0F00           # glibc pthread_create
    assert _run_bpf(program, calls["clone"], arch, (fork_flags,)) == EPERM
    assert _run_bpf(program, calls["clone"], arch, (spawn_flags,)) == EPERM
    assert _run_bpf(program, calls["clone"], arch,
                    (thread_flags,)) == ALLOW
    assert _run_bpf(program, calls["clone3"], arch) == ENOSYS
    for name in ("fork", "vfork"):
        if name in calls:
            assert _run_bpf(program, calls[name], arch) == EPERM
    for name in ("read", "mmap", "getpid", "socket"):   # not its calls
        assert _run_bpf(program, CALLS[machine][name], arch) == ALLOW


@pytest.mark.skipif(not seccomp.program(), reason="no filter for this "
                    "architecture")
def test_the_filter_holds_in_a_real_process():
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:   # the filter is for ever: only in a child
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(38, 1, 0, 0, 0)     # no_new_privs
            seen = [seccomp.install()]
            keyctl = CALLS[os.uname().machine]["keyctl"]
            seen.append(libc.syscall(ctypes.c_long(keyctl), ctypes.c_long(0),
                                     ctypes.c_long(-3)) == -1 and
                        ctypes.get_errno() == errno.EPERM)
            for family in (socket.AF_UNIX, socket.AF_INET):
                try:
                    socket.socket(family)
                    seen.append(False)
                except PermissionError:
                    seen.append(True)
            # No new process, however forked; a thread still starts.
            seen.append(libc.fork() == -1 and
                        ctypes.get_errno() == errno.EPERM)
            try:
                os.fork()
                seen.append(False)
            except PermissionError:
                seen.append(True)
            # No Python signal handler (it would get the interrupted
            # frame); reading the current one still works.
            import signal
            try:
                signal.signal(signal.SIGUSR1, lambda *_: None)
                seen.append(False)
            except PermissionError:
                seen.append(signal.getsignal(signal.SIGUSR1) ==
                            signal.SIG_DFL)
            import threading
            ran = []
            thread = threading.Thread(target=ran.append, args=(1,))
            thread.start()
            thread.join()
            seen.append(ran == [1])
            os.write(write, repr(seen).encode())
        finally:
            os._exit(0)
    os.close(write)
    seen = os.read(read, 100).decode()
    os.waitpid(pid, 0)
    assert seen == repr([True] * 8)


class _Sandbox:
    """A sandbox whose runs fail as scripted: one result per call."""

    def __init__(self, *results: ProbeResult):
        self.results = list(results)
        self.namespaces, self.user, self.readable = True, None, []
        self.layers: list[str] = []
        self.refused: list[str] = []
        self.fallback = ""

    def run(self, source, filename, probes):
        return [self.results.pop(0)]


def test_a_failing_fallback_names_both_causes():
    mount = ("the grader could not lock up the worker: OSError: [Errno 22] "
             "mount('/', MS_REC|MS_PRIVATE) failed: EINVAL (Invalid "
             "argument)")
    fake = _Sandbox(ProbeResult("preflight", ENVIRONMENT, mount),
                    ProbeResult("preflight", CRASH,
                                "the submission exited (code 1)"))
    with pytest.raises(PreflightError) as error:
        run_preflight(fake)
    message = str(error.value)
    assert "exited (code 1)" in message          # the fallback's cause
    assert "mount('/', MS_REC|MS_PRIVATE) failed: EINVAL" in message
    assert "not a mount point" in message
    assert not fake.namespaces


def test_a_working_fallback_is_printed_with_its_cause():
    from autograder.sandbox.preflight import make_canary
    fake = _Sandbox(ProbeResult("preflight", ENVIRONMENT, "the grader could "
                                "not lock up the worker: OSError: pivot_root"
                                "('/x', '.old-root') failed: EINVAL"),
                    ProbeResult("preflight", OK, outputs=[
                        make_canary().expected.clone()]))
    fake.layers = ["subreaper", "landlock", "seccomp"]
    fake.refused = ["namespaces: turned off for this sandbox"]
    assert run_preflight(fake) == fake.layers
    text = describe_jail(fake, fake.layers)
    assert text.startswith("jail: subreaper, landlock, seccomp")
    assert "unavailable here: mount-namespace, pid-namespace" in text
    assert "pivot_root('/x', '.old-root') failed: EINVAL" in text
    assert "turned off for this sandbox" not in text
    assert fake.results == []   # the canary ran twice


def test_every_layer_in_force_prints_no_warning():
    fake = _Sandbox()
    layers = ["pid-namespace", "mount-namespace", "landlock", "seccomp"]
    assert describe_jail(fake, layers) == "jail: " + ", ".join(layers)


def test_a_call_that_fails_is_named_with_its_errno():
    with pytest.raises(OSError) as error:
        jail._call("umount2", b"/nonexistent-jail-test", 0)
    assert "umount2('/nonexistent-jail-test', 0) failed: E" in str(
        error.value)


def test_scratch_is_bounded_without_a_mount_namespace():
    from autograder.sandbox.protocol import Probe
    from autograder.sandbox.pool import Sandbox
    source = '''
import torch.nn as nn


class Filler(nn.Module):
    def forward(self, x):
        for i in range(40):
            with open(f"fill-{i}", "wb") as f:
                f.write(b"x" * (8 << 20))
        return x
'''
    import torch
    probe = Probe("fill", "Filler", {}, args=[torch.zeros(1)], timeout=30)
    # The same bytes in folders nested past PATH_MAX, written through
    # folder descriptors: counted all the same.
    deep = source.replace(FILL, DEEP_FILL)
    with Sandbox(namespaces=False) as box:
        results = box.run(source, "filler.py", [probe])
        results += box.run(deep, "deep.py", [probe])
    for result in results:
        assert result.status == MEMORY, result.message
        assert "files grew past 64 MiB" in result.message


FILL = """        for i in range(40):
            with open(f"fill-{i}", "wb") as f:
                f.write(b"x" * (8 << 20))
"""
DEEP_FILL = """        import os
        fd = os.open(".", os.O_RDONLY)
        for i in range(20):
            os.mkdir("d" * 250, dir_fd=fd)
            fd = os.open("d" * 250, os.O_RDONLY, dir_fd=fd)
        for i in range(40):
            f = os.open(f"fill-{i}", os.O_WRONLY | os.O_CREAT, dir_fd=fd)
            os.write(f, b"x" * (8 << 20))
            os.close(f)
"""
