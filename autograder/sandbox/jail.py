"""The worker's jail: what student code can see, write, signal and leave.

The sandbox's worker forks in two. The *keeper* (trusted code, never runs
student code) enters new namespaces and forks the *inmate*, which builds its
view of the filesystem, gives up every privilege and only then runs the
submission. Each layer is tried where the machine allows it and reported by
name, so the grader can say what protected a run:

- ``pid-namespace``: the inmate is process 1 of a new PID namespace; when it
  dies the kernel kills every process the submission started (setsid'd and
  double-forked ones included), and it sees no process outside.
- ``mount-namespace``: the inmate's root is an empty tmpfs holding read-only
  binds of the Python installation and system libraries only, plus one
  private, size-bounded tmpfs to write in (its working directory). No /proc,
  no kit checkout, no other submission, no /tmp shared with anyone.
- ``network-namespace``: no network.
- ``user-namespace``: how an unprivileged grader gets the three above.
- ``landlock``: the kernel's own filesystem sandbox (Linux >= 5.13): reads
  only under the allowed folders, writes only in the working directory; from
  ABI 4 on, no TCP bind or connect; from ABI 6 on, no signals to and no
  abstract sockets of processes outside.
  Where the namespaces are refused (a Docker container's seccomp profile),
  this is the filesystem jail.
- ``uid-drop`` (the grader runs as root) or ``no-capabilities`` (user
  namespace): no privilege left, and no way back (``no_new_privs``).
- ``subreaper``: without a PID namespace the keeper adopts every orphan of
  the submission and kills them all when it ends.
- ``session-keyring``: the inmate joins a new, empty session keyring
  (the grader's keys, Kerberos or AFS tokens among them, stay behind).
- ``seccomp``: keyrings, every new socket (network, the fork server, SSH
  agents, D-Bus), SysV IPC and POSIX message queues, io_uring and ptrace
  refused (``autograder/sandbox/seccomp.py``); with it the fork server and
  the network are unreachable in every mode, whatever their address.

Everything here is Linux-specific and does nothing elsewhere.
"""
from __future__ import annotations

import ctypes
import errno
import os
import platform
import signal
import stat
import sys
import sysconfig
import time
from dataclasses import dataclass, field
from pathlib import Path

from autograder.sandbox import seccomp
from autograder.sandbox.limits import LIMITS

_libc = ctypes.CDLL(None, use_errno=True) if sys.platform == "linux" \
    else None

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_NOATIME, MS_NODIRATIME = 32, 1024, 2048
MS_BIND, MS_REC, MS_PRIVATE = 4096, 16384, 1 << 18
MS_RELATIME = 1 << 21
MNT_DETACH = 2
# statvfs f_flag bits -> the mount flags a bind remount must keep (a user
# namespace may not clear flags its parent locked). Only glibc's os has
# them all: elsewhere (macOS, Windows) this module must still import.
_LOCKED_FLAGS = {getattr(os, name): flag for name, flag in (
    ("ST_NOSUID", MS_NOSUID), ("ST_NODEV", MS_NODEV),
    ("ST_NOEXEC", MS_NOEXEC), ("ST_NOATIME", MS_NOATIME),
    ("ST_NODIRATIME", MS_NODIRATIME), ("ST_RELATIME", MS_RELATIME))
    if hasattr(os, name)}

PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS, PR_SET_CHILD_SUBREAPER = 1, 38, 36
_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}
_LANDLOCK = {"create_ruleset": 444, "add_rule": 445, "restrict_self": 446}

SCRATCH_BYTES = LIMITS.scratch_bytes   # the inmate's whole writable space
_DEVICES = ("/dev/null", "/dev/zero", "/dev/random", "/dev/urandom")
_SYSTEM_DIRS = ("/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin")
_SYSTEM_FILES = ("/etc/ld.so.cache", "/etc/localtime")

LAYERS = ("user-namespace", "pid-namespace", "mount-namespace",
          "network-namespace", "landlock", "uid-drop", "no-capabilities",
          "subreaper", "session-keyring", "seccomp")
_KEYCTL = {"x86_64": 250, "aarch64": 219}
KEYCTL_JOIN_SESSION_KEYRING = 1


def kernel_calls() -> bool:
    """Whether libc's Linux calls the jail is built with (``prctl``,
    ``unshare``, ``syscall``) can be made here."""
    return _libc is not None and all(
        hasattr(_libc, name) for name in ("prctl", "unshare", "syscall"))


class JailError(Exception):
    """A layer the jail requires could not be set up."""


@dataclass
class JailPlan:
    """What the inmate may read and write, decided by the trusted parent."""

    workdir: str                      # the only writable folder
    readable: list[str]               # folders (and files) it may read
    uid: int | None = None            # drop to this uid/gid (root only)
    gid: int | None = None
    namespaces: bool = True           # try them (tests turn them off)
    active: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)  # layer: failing call


def _call(name: str, *args, shown: str = "") -> int:
    """libc's ``name(*args)``; an OSError naming the call (``shown``: how
    to print its arguments) and the errno's symbol on failure, so that a
    layer that cannot be built says which call failed and why."""
    result = getattr(_libc, name)(*args)
    if result == -1:
        err = ctypes.get_errno()
        raise OSError(err, f"{name}({shown or _shown(args)}) failed: "
                      f"{errno.errorcode.get(err, err)} "
                      f"({os.strerror(err)})")
    return result


def _shown(args: tuple) -> str:
    parts = []
    for arg in args:
        if isinstance(arg, bytes):
            parts.append(repr(arg.decode(errors="replace")))
        elif arg is None or isinstance(arg, int):
            parts.append(str(arg))
        else:
            parts.append("...")
    return ", ".join(parts)


def _syscall(number: int, *args) -> int:
    result = _libc.syscall(ctypes.c_long(number), *args)
    if result == -1:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return result


# --------------------------------------------------------------------------
# What running a submission needs to read

def python_paths() -> list[str]:
    """The folders of this Python installation and its packages: what an
    import may read. Folders holding the grader itself are excluded by the
    caller (the kit checkout holds the solution and the values)."""
    found = {sys.prefix, sys.base_prefix, sys.exec_prefix,
             sys.base_exec_prefix}
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        path = sysconfig.get_paths().get(key)
        if path:
            found.add(path)
    for path in sys.path:
        if path and ("site-packages" in path or "dist-packages" in path):
            found.add(path)
    found.add(os.path.dirname(os.path.realpath(sys.executable)))
    # As Python names them (a venv reached through a symlink is bound at
    # the symlink's path, which is where imports look), and resolved.
    both = {os.path.abspath(p) for p in found} | \
        {os.path.realpath(p) for p in found}
    return sorted(p for p in both if os.path.isdir(p))


def default_readable(exclude: list[str]) -> list[str]:
    """System folders plus the Python installation, minus the folders of
    ``exclude`` (the grader's checkout, or the kit's own packages): a
    folder holding one is bound entry by entry without it (site-packages
    without the installed kit). A venv inside the checkout stays: only it
    is bound."""
    wanted = [*_SYSTEM_DIRS, *_SYSTEM_FILES, *python_paths()]
    excluded = [os.path.realpath(p) for p in exclude]
    keep: list[str] = []
    for path in wanted:
        if os.path.exists(path):
            keep += _without(path, excluded)
    return sorted(set(keep))


def _without(path: str, excluded: list[str], depth: int = 2) -> list[str]:
    """``path``, or its entries (to ``depth`` levels) without the excluded
    folders when it holds one. A path inside an excluded folder stays
    (a venv inside the checkout: only it is bound)."""
    real = os.path.realpath(path)
    if not any(_inside(e, real) and e != real for e in excluded):
        return [path]
    if depth == 0 or not os.path.isdir(path):
        return []
    try:
        entries = sorted(os.listdir(path))
    except OSError:
        return []
    found = []
    for name in entries:
        entry = os.path.join(path, name)
        if os.path.realpath(entry) not in excluded:
            found += _without(entry, excluded, depth - 1)
    return found


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


# --------------------------------------------------------------------------
# Namespaces (keeper side)

def enter_namespaces(plan: JailPlan) -> None:
    """Unshare user (when not root), mount, PID, network and IPC namespaces;
    records what worked in ``plan.active``. The calling process stays in
    its PID namespace: its next child is process 1 of the new one."""
    if not plan.namespaces or _libc is None:
        plan.refused.append("namespaces: turned off for this sandbox"
                            if _libc else "namespaces: not Linux")
        return
    flags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC
    as_root = os.geteuid() == 0
    uid, gid = os.getuid(), os.getgid()
    try:
        _call("unshare", flags if as_root else flags | CLONE_NEWUSER,
              shown="CLONE_NEWNS|CLONE_NEWPID|CLONE_NEWNET|CLONE_NEWIPC"
              + ("" if as_root else "|CLONE_NEWUSER"))
    except OSError as exc:
        plan.refused.append(f"namespaces: {exc.strerror}")
        return
    if not as_root:
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"{uid} {uid} 1")
        _write("/proc/self/gid_map", f"{gid} {gid} 1")
        plan.active.append("user-namespace")
    plan.active += ["pid-namespace", "mount-namespace", "network-namespace"]


def _write(path: str, text: str) -> None:
    with open(path, "w") as handle:
        handle.write(text)


# --------------------------------------------------------------------------
# The filesystem view (inmate side)

def build_root(plan: JailPlan) -> None:
    """Replace the filesystem the inmate sees: a fresh tmpfs root with
    read-only binds of ``plan.readable``, the devices, and a private
    size-bounded tmpfs at ``plan.workdir``. Needs the mount namespace."""
    _call("mount", None, b"/", None, MS_REC | MS_PRIVATE, None,
          shown="'/', MS_REC|MS_PRIVATE")
    new_root = plan.workdir   # any folder works as the mount point
    _mount_tmpfs(new_root, "mode=0755,size=1m")
    for path in plan.readable:
        _bind(path, new_root + path, readonly=True)
    for device in _DEVICES:
        if os.path.exists(device):
            _bind(device, new_root + device, readonly=False)
    scratch = new_root + plan.workdir
    os.makedirs(scratch, exist_ok=True)
    owner = "" if plan.uid is None else f",uid={plan.uid},gid={plan.gid}"
    _mount_tmpfs(scratch, f"mode=0700,size={SCRATCH_BYTES}{owner}")
    for name in ("tmp", "var/tmp", "dev/shm"):
        # Code that ignores TMPDIR finds a read-only folder, not a shared one.
        os.makedirs(os.path.join(new_root, name), exist_ok=True)
    old = os.path.join(new_root, ".old-root")
    os.makedirs(old, exist_ok=True)
    number = _PIVOT_ROOT.get(platform.machine())
    os.chdir(new_root)
    if number is not None:
        try:
            _syscall(number, b".", b".old-root")
        except OSError as exc:
            raise OSError(exc.errno, f"pivot_root('{new_root}', "
                          f"'.old-root') failed: "
                          f"{errno.errorcode.get(exc.errno, exc.errno)} "
                          f"({exc.strerror})") from None
        os.chdir("/")
        _call("umount2", b"/.old-root", MNT_DETACH)
        os.rmdir("/.old-root")
    else:   # pragma: no cover - other architectures
        os.chroot(".")
    _call("mount", None, b"/", None,
          MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, None)
    os.chdir(plan.workdir)


def _mount_tmpfs(target: str, options: str) -> None:
    _call("mount", b"tmpfs", target.encode(), b"tmpfs",
          MS_NOSUID | MS_NODEV, options.encode())


def _bind(source: str, target: str, *, readonly: bool) -> None:
    if os.path.isdir(source):
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if not os.path.exists(target):
            open(target, "w").close()
    _call("mount", source.encode(), target.encode(), None,
          MS_BIND | MS_REC, None)
    if readonly:
        flags = MS_REMOUNT | MS_BIND | MS_RDONLY
        kept = os.statvfs(source).f_flag
        for bit, flag in _LOCKED_FLAGS.items():
            if kept & bit:
                flags |= flag
        _call("mount", None, target.encode(), None, flags, None)


# --------------------------------------------------------------------------
# Privileges (inmate side)

def drop_privileges(plan: JailPlan) -> None:
    """As root: become ``plan.uid``; in a user namespace: drop every
    capability. Then no_new_privs: no setuid binary gives them back."""
    if plan.uid is not None:
        os.setgroups([])
        os.setgid(plan.gid)
        os.setuid(plan.uid)
        if os.getuid() == 0 or os.geteuid() == 0:
            raise JailError("privilege drop failed")
        plan.active.append("uid-drop")
    elif "user-namespace" in plan.active:
        _drop_capabilities()
        plan.active.append("no-capabilities")
    _call("prctl", PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32),
                ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


def _drop_capabilities() -> None:
    header = _CapHeader(0x20080522, 0)   # _LINUX_CAPABILITY_VERSION_3
    data = (_CapData * 2)()
    _call("capset", ctypes.byref(header), data)


# --------------------------------------------------------------------------
# Landlock (inmate side)

class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64),
                ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64),
                ("parent_fd", ctypes.c_int32)]


_FS_EXECUTE, _FS_WRITE_FILE, _FS_READ_FILE, _FS_READ_DIR = 1, 2, 4, 8
_FS_ALL_V1 = (1 << 13) - 1            # execute .. make_sym
_FS_REFER, _FS_TRUNCATE, _FS_IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
_SCOPE_ABSTRACT_UNIX, _SCOPE_SIGNAL = 1, 2
_NET_BIND_TCP, _NET_CONNECT_TCP = 1, 2


def landlock_abi() -> int:
    """The kernel's Landlock ABI version, 0 when unavailable."""
    if _libc is None or platform.machine() not in _PIVOT_ROOT:
        return 0
    try:
        return _syscall(_LANDLOCK["create_ruleset"], None, 0, 1)
    except OSError:
        return 0


def apply_landlock(plan: JailPlan, readable: list[str]) -> bool:
    """Restrict this process (and what it starts) to reading ``readable``
    and writing ``plan.workdir``; from ABI 6 also scope signals and
    abstract unix sockets. Returns whether it is in force."""
    abi = landlock_abi()
    if abi < 1:
        plan.refused.append("landlock: landlock_create_ruleset() failed: "
                            "this kernel has no Landlock (Linux >= 5.13, "
                            "lsm=landlock)")
        return False
    handled = _FS_ALL_V1
    if abi >= 2:
        handled |= _FS_REFER
    if abi >= 3:
        handled |= _FS_TRUNCATE
    if abi >= 5:
        handled |= _FS_IOCTL_DEV
    scoped = _SCOPE_ABSTRACT_UNIX | _SCOPE_SIGNAL if abi >= 6 else 0
    # From ABI 4: no TCP bind or connect at all (no rule allows a port),
    # a second wall behind seccomp's refusal of socket().
    net = _NET_BIND_TCP | _NET_CONNECT_TCP if abi >= 4 else 0
    attr = _RulesetAttr(handled, net, scoped)
    size = ctypes.sizeof(attr) if abi >= 6 else 16 if abi >= 4 else 8
    ruleset = _syscall(_LANDLOCK["create_ruleset"], ctypes.byref(attr),
                       ctypes.c_size_t(size), 0)
    try:
        read = _FS_EXECUTE | _FS_READ_FILE | _FS_READ_DIR
        for path in readable:
            _allow(ruleset, path, read, handled)
        for device in _DEVICES:
            _allow(ruleset, device, read | _FS_WRITE_FILE, handled)
        # The scratch space is bounded by a tmpfs's size with a mount
        # namespace, by the keeper's watch without one: writable in both,
        # so that a grade never depends on the layers.
        _allow(ruleset, plan.workdir, handled, handled)
        _call("prctl", PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        _syscall(_LANDLOCK["restrict_self"], ruleset, 0)
    finally:
        os.close(ruleset)
    plan.active.append("landlock")
    return True


def _allow(ruleset: int, path: str, access: int, handled: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return
    try:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            # Rules on files may only carry file rights.
            access &= _FS_EXECUTE | _FS_WRITE_FILE | _FS_READ_FILE | \
                _FS_TRUNCATE | _FS_IOCTL_DEV
        rule = _PathBeneath(access & handled, fd)
        _syscall(_LANDLOCK["add_rule"], ruleset, 1, ctypes.byref(rule), 0)
    finally:
        os.close(fd)


# --------------------------------------------------------------------------
# Credentials and system calls (inmate side)

def new_session_keyring(plan: JailPlan) -> bool:
    """Join a new, empty, anonymous session keyring (after the privilege
    drop, so that it is the worker user's). A failure (no keyrings in this
    kernel, a seccomp profile refusing keyctl, the user's key quota) is
    recorded: the seccomp layer refuses keyctl anyway."""
    number = _KEYCTL.get(platform.machine())
    if _libc is None or number is None:
        return False
    try:
        _syscall(number, ctypes.c_long(KEYCTL_JOIN_SESSION_KEYRING), None)
    except OSError as exc:
        plan.refused.append(
            f"session-keyring: keyctl(KEYCTL_JOIN_SESSION_KEYRING) failed:"
            f" {errno.errorcode.get(exc.errno, exc.errno)} ({exc.strerror})")
        return False
    plan.active.append("session-keyring")
    return True


def apply_seccomp(plan: JailPlan) -> bool:
    """The seccomp filter of ``autograder/sandbox/seccomp.py`` (last: it also
    refuses keyctl, which ``new_session_keyring`` needs)."""
    if _libc is None:
        return False
    _call("prctl", PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    if not seccomp.install():
        plan.refused.append("seccomp: not supported on this machine")
        return False
    plan.active.append("seccomp")
    return True


# --------------------------------------------------------------------------
# Processes (keeper side)

def become_subreaper() -> bool:
    """Orphans of the submission become the keeper's children."""
    if _libc is None:
        return False
    try:
        _call("prctl", PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        return True
    except OSError:
        return False


def die_with_parent() -> None:
    """The inmate dies if the keeper does (its PID namespace with it)."""
    if _libc is not None:
        _call("prctl", PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def kill_children(deadline: float = 5.0) -> None:
    """Kill every child of this process until none is left (orphans keep
    arriving while their parents die: a subreaper must loop)."""
    me = str(os.getpid())
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        children = _children_of(me)
        if not children:
            return
        for pid in children:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        _reap()


def _children_of(ppid: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                data = handle.read()
        except OSError:
            continue
        # The command name may hold spaces and parentheses: split after it.
        fields = data[data.rfind(b")") + 2:].split()
        if len(fields) > 1 and fields[1].decode() == ppid:
            found.append(int(entry))
    return found


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            time.sleep(0.01)
            return


def parent_of(pid: int) -> int | None:
    """The parent pid of ``pid`` (None if it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            data = handle.read()
    except OSError:
        return None
    fields = data[data.rfind(b")") + 2:].split()
    return int(fields[1]) if len(fields) > 1 else None


def wait_status(pid: int) -> int:
    """Wait for ``pid``; its exit status as multiprocessing reports it
    (negative: the signal that killed it). EINTR-safe."""
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except ChildProcessError:
            return 0
    if os.WIFSIGNALED(status):
        return -os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


def readable_by(uid: int | None, gid: int | None, path: str) -> str | None:
    """None if the user ``uid`` could read ``path`` and search every folder
    above it; else the first path it could not (for the preflight's
    message). Without a uid (no privilege drop) everything is readable."""
    if uid is None:
        return None
    current = Path(path)
    for folder in [*reversed(current.parents), current]:
        try:
            info = folder.stat()
        except OSError:
            return str(folder)
        need = stat.S_IXOTH if folder.is_dir() else stat.S_IROTH
        if info.st_uid == uid:
            need <<= 6
        elif info.st_gid == gid:
            need <<= 3
        if not info.st_mode & need:
            return str(folder)
    return None


__all__ = ["JailError", "JailPlan", "LAYERS", "apply_landlock",
           "apply_seccomp", "new_session_keyring",
           "become_subreaper", "build_root", "default_readable",
           "die_with_parent", "drop_privileges", "enter_namespaces",
           "kernel_calls", "kill_children", "landlock_abi", "parent_of",
           "python_paths", "readable_by", "wait_status"]
