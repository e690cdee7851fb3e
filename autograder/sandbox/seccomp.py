"""The jail's ``seccomp`` layer: system calls student code never needs.

A classic-BPF filter (``prctl(PR_SET_SECCOMP)``, Linux >= 3.5, allowed by
Docker's default profile) makes these fail with EPERM:

- ``keyctl``, ``add_key``, ``request_key``: the kernel keyrings. A fresh
  session keyring hides the grader's session keyring, but the *user*
  keyring is reached by uid, and an unprivileged grader without a user
  namespace shares its uid with the inmate (Kerberos and AFS tokens live
  there on university machines).
- ``socket`` and ``socketpair``, whatever the family: no network (TCP or
  UDP to 127.0.0.1 or the internet, where no network namespace hides it:
  Gradescope's Docker), no unix socket to connect with (the fork server,
  SSH agents, D-Bus, Kerberos KCM), and no socket pair whose queue could
  hold descriptors out of the keeper's sight. The inmate's result channel
  is an inherited, already connected socket pair, made before the filter.
- SysV IPC (``shmget``, ``shmat``, ``msgget``, ``semget``, ...) and POSIX
  message queues (``mq_open``, ...): no memory or messages shared with
  another submission where no IPC namespace separates them. (POSIX shared
  memory is a file in /dev/shm: Landlock and the mount namespace keep it
  out of reach.)
- ``io_uring_*``: io_uring opens sockets and files without these calls.
- ``ptrace``, ``process_vm_readv/writev``: no reading another process's
  memory (Landlock also refuses it outside its domain; this holds where
  Landlock is missing).
- ``rt_sigaction`` with a new action (a query, whose action pointer is
  NULL, stays allowed): no signal handler of the submission's. CPython
  calls a Python handler with the frame it interrupts, whose ``f_back``
  chain holds the grader's frames, and no audit event marks either the
  handler or the frame (a handler could read the recorder through
  them). The worker sets its own handlers before the filter.

A second filter (``process_program``), installed with the first, refuses
every new process, however it is asked for: ``clone`` without
``CLONE_THREAD`` (``os.fork``, libc's ``fork()`` through ``ctypes``,
``posix_spawn``, ``subprocess``) and ``fork``/``vfork`` fail with EPERM;
``clone3`` fails with ENOSYS (its flags are in memory, out of the filter's
sight), so glibc falls back to ``clone``, where threads are told apart.
Threads (torch's, ``threading``) stay allowed. A fork hook cannot hold a
child that libc's ``fork()`` makes (it runs none), and nothing the worker
does after the jail is built forks: the inmate serves every probe itself.
Code that must fork later has to do it before ``install`` (or install the
filter in each child).

The filter checks the audit architecture first: a call made through
another ABI (32-bit ``int 0x80`` or x32 on x86-64) is refused whole, so
the numbers below cannot be dodged. Unknown architectures get no filter
(the layer is then not reported).
"""
from __future__ import annotations

import ctypes
import errno
import os
import platform
import sys

PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2
_X32_BIT = 0x40000000

# Per architecture: the audit arch and the numbers of the denied calls.
_ARCHES = {
    "x86_64": (0xC000003E, {
        "keyctl": 250, "add_key": 248, "request_key": 249,
        "io_uring_setup": 425, "io_uring_enter": 426,
        "io_uring_register": 427, "ptrace": 101,
        "process_vm_readv": 310, "process_vm_writev": 311,
        "socket": 41, "socketpair": 53,
        "shmget": 29, "shmat": 30, "shmctl": 31, "shmdt": 67,
        "semget": 64, "semop": 65, "semctl": 66, "semtimedop": 220,
        "msgget": 68, "msgsnd": 69, "msgrcv": 70, "msgctl": 71,
        "mq_open": 240, "mq_unlink": 241, "mq_timedsend": 242,
        "mq_timedreceive": 243, "mq_notify": 244, "mq_getsetattr": 245}),
    "aarch64": (0xC00000B7, {
        "keyctl": 219, "add_key": 217, "request_key": 218,
        "io_uring_setup": 425, "io_uring_enter": 426,
        "io_uring_register": 427, "ptrace": 117,
        "process_vm_readv": 270, "process_vm_writev": 271,
        "socket": 198, "socketpair": 199,
        "shmget": 194, "shmat": 196, "shmctl": 195, "shmdt": 197,
        "semget": 190, "semop": 193, "semctl": 191, "semtimedop": 192,
        "msgget": 186, "msgsnd": 189, "msgrcv": 188, "msgctl": 187,
        "mq_open": 180, "mq_unlink": 181, "mq_timedsend": 182,
        "mq_timedreceive": 183, "mq_notify": 184, "mq_getsetattr": 185}),
}
DENIED = tuple(_ARCHES["x86_64"][1])
# Per architecture: rt_sigaction, refused when it sets an action.
_SIGACTION = {"x86_64": 13, "aarch64": 134}
# Per architecture: clone, clone3 and (where they exist) fork and vfork.
_PROCESS_CALLS = {
    "x86_64": {"clone": 56, "clone3": 435, "fork": 57, "vfork": 58},
    "aarch64": {"clone": 220, "clone3": 435},
}
CLONE_THREAD = 0x00010000

# Classic BPF opcodes and seccomp return values.
_LD_W_ABS, _JEQ_K, _JGE_K, _JSET_K, _RET_K = 0x20, 0x15, 0x35, 0x45, 0x06
_RET_ALLOW = 0x7FFF0000
_RET_EPERM = 0x00050000 | errno.EPERM
_RET_ENOSYS = 0x00050000 | errno.ENOSYS
# struct seccomp_data: nr at 0, arch at 4, args[0]'s low word at 16,
# args[1]'s words at 24 and 28 (both architectures are little-endian).
_NR, _ARCH, _ARG0_LOW, _ARG1_LOW, _ARG1_HIGH = 0, 4, 16, 24, 28


class _Filter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8),
                ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _Program(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint16),
                ("filter", ctypes.POINTER(_Filter))]


def program(machine: str | None = None) -> list[tuple[int, int, int, int]]:
    """The filter's instructions (code, jt, jf, k) for ``machine`` (this
    one by default); empty for an architecture it does not know."""
    arch, numbers = _ARCHES.get(machine or platform.machine(), (None, {}))
    if arch is None:
        return []
    # Written with labels ("allow", "deny"), resolved into offsets below.
    code: list[tuple] = [
        (_LD_W_ABS, 0, 0, _ARCH),
        (_JEQ_K, 0, "deny", arch),
        (_LD_W_ABS, 0, 0, _NR)]
    if arch == _ARCHES["x86_64"][0]:
        code.append((_JGE_K, "deny", 0, _X32_BIT))   # x32 calls: refused
    for number in sorted(set(numbers.values())):
        code.append((_JEQ_K, "deny", 0, number))
    machine = machine or platform.machine()
    code += [
        (_JEQ_K, 0, "allow", _SIGACTION[machine]),
        # rt_sigaction(sig, act, oldact): a NULL act only reads
        (_LD_W_ABS, 0, 0, _ARG1_LOW),
        (_JEQ_K, 0, "deny", 0),
        (_LD_W_ABS, 0, 0, _ARG1_HIGH),
        (_JEQ_K, "allow", "deny", 0),
        ("allow", _RET_K, 0, 0, _RET_ALLOW),
        ("deny", _RET_K, 0, 0, _RET_EPERM)]
    return _resolve(code)


def process_program(machine: str | None = None
                    ) -> list[tuple[int, int, int, int]]:
    """The second filter's instructions for ``machine``: no new process
    (``clone`` without ``CLONE_THREAD``, ``fork``, ``vfork``: EPERM;
    ``clone3``: ENOSYS); empty for an architecture it does not know.
    Another ABI is refused whole by the first filter already."""
    machine = machine or platform.machine()
    arch = _ARCHES.get(machine, (None, {}))[0]
    if arch is None:
        return []
    calls = _PROCESS_CALLS[machine]
    code: list[tuple] = [
        (_LD_W_ABS, 0, 0, _ARCH),
        (_JEQ_K, 0, "allow", arch),     # the first filter refuses it
        (_LD_W_ABS, 0, 0, _NR),
        (_JEQ_K, 0, "other", calls["clone"]),
        (_LD_W_ABS, 0, 0, _ARG0_LOW),
        (_JSET_K, "allow", "deny", CLONE_THREAD),
        ("other", _JEQ_K, "nosys", 0, calls["clone3"])]
    for name in ("fork", "vfork"):
        if name in calls:
            code.append((_JEQ_K, "deny", 0, calls[name]))
    code += [("allow", _RET_K, 0, 0, _RET_ALLOW),
             ("deny", _RET_K, 0, 0, _RET_EPERM),
             ("nosys", _RET_K, 0, 0, _RET_ENOSYS)]
    return _resolve(code)


def _resolve(code: list[tuple]) -> list[tuple[int, int, int, int]]:
    """Labelled instructions (a leading string names one; a jump's
    string is a label) as plain ones with relative offsets (forward
    only: the kernel refuses a filter with a jump back)."""
    labels = {}
    plain = []
    for i, ins in enumerate(code):
        if isinstance(ins[0], str):
            labels[ins[0]] = i
            ins = ins[1:]
        plain.append(ins)
    out = []
    for i, (op, jt, jf, k) in enumerate(plain):
        jt = labels[jt] - i - 1 if isinstance(jt, str) else jt
        jf = labels[jf] - i - 1 if isinstance(jf, str) else jf
        assert 0 <= jt < 256 and 0 <= jf < 256, (i, jt, jf)
        out.append((op, jt, jf, k))
    return out


def install() -> bool:
    """Install the filter on this thread's process (needs no_new_privs or
    CAP_SYS_ADMIN; it is inherited by every child and cannot be removed).
    Returns whether it is in force; raises OSError if the kernel refused
    it where it should work."""
    if sys.platform != "linux" or not _COMPILED:
        return False
    for _filters, prog in _COMPILED:
        if _LIBC.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER,
                       ctypes.byref(prog), 0, 0) != 0:
            err = ctypes.get_errno()
            if err == errno.EINVAL:   # a kernel built without seccomp
                return False
            raise OSError(err, "prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER): "
                          f"{errno.errorcode.get(err, err)} "
                          f"({os.strerror(err)})")
    return True


def _compile() -> list[tuple]:
    if sys.platform != "linux":
        return []
    out = []
    for code in (program(), process_program()):
        if code:
            filters = (_Filter * len(code))(*[_Filter(*c) for c in code])
            out.append((filters, _Program(len(code), filters)))
    return out


# Built once, when the fork server preloads the jail: a worker only
# installs them.
_COMPILED = _compile()
_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform == "linux" \
    else None

__all__ = ["CLONE_THREAD", "DENIED", "install", "process_program",
           "program"]
