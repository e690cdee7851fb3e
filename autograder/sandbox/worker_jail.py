"""What runs in the worker process: the keeper and the inmate.

The fork server forks the worker process (the keeper) from a warm copy of
the grader with torch imported. The keeper starts a new session (the parent
kills its whole process group), reads stdin from /dev/null, sends its own
fd-level output to the staff log (``KEEPER_LOG``: the grader's failures are
never shown as the student's output), closes every inherited descriptor
but its result channel, scrubs the environment and enters the jail's
namespaces (``autograder/sandbox/jail.py``). It forks the inmate, tells
the parent
the inmate's pid, and when the inmate ends kills what it left and exits
with its status. Meanwhile it watches the inmate's disk use: the scratch
folder's size without a mount namespace (a tmpfs bounds it otherwise) and,
in every mode, the files the submission's processes hold open after
unlinking them (no folder shows them; a tmpfs's size counts only those in
it, a memfd counts nowhere).

The worker's folder (``settings.workdir``) holds the keeper's files; the
inmate may write only in its ``scratch`` subfolder, which is all it sees of
it (a private tmpfs there with a mount namespace).

The inmate, before any student code, sets resource limits (address space,
processes, file size, CPU), builds its own view of the filesystem, drops
privilege (to ``settings.uid`` when started as root) and applies Landlock;
then it runs the probes (``autograder/sandbox/worker.py``) and sends one
message per result (``autograder/sandbox/wire.py``), its captured output
attached.
"""
from __future__ import annotations

import functools
import io
import os
try:
    import resource
except ImportError:   # Windows: only check's plain child runs there
    resource = None   # type: ignore[assignment]
import shutil
import signal
import stat
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

import torch

from autograder.sandbox import jail, memlimit, wire
from autograder.sandbox.limits import LIMITS
from autograder.sandbox.protocol import Probe

OUTPUT_FILE = ".autograder-output"
KEEPER_LOG = ".autograder-keeper"      # the keeper's stderr: staff only
VERDICT_FILE = ".autograder-verdict"   # why the keeper killed the inmate
SCRATCH = "scratch"                    # the inmate's folder in workdir
# The keeper's watch of the scratch folder (limits.py says each).
_WATCH_SECONDS = LIMITS.watch_seconds
_DESCENDANTS_EVERY = LIMITS.descendants_every
_MAX_ENTRIES = LIMITS.scratch_entries
_WATCH_EVERY = 8     # results between two looks at the grader's state
# How the parent opens the worker's files (never through a link the
# submission put there). These readers also serve check's plain child
# (autograder/sandbox/plain.py) where os lacks flags (Windows).
_NO_LINK = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | \
    getattr(os, "O_BINARY", 0)


@dataclass
class WorkerSettings:
    """What the parent decided about the worker's environment."""

    memory_mb: int
    output_limit: int
    cpu_seconds: int
    workdir: str
    uid: int | None = None    # drop to this uid/gid when not None
    gid: int | None = None
    # No other worker runs as ``uid`` (held for this run): every process
    # of it is the submission's, wherever it was re-parented.
    own_uid: bool = False
    readable: list[str] = field(default_factory=list)   # what it may read
    namespaces: bool = True   # try the namespace layers of the jail
    landlock: bool = True     # try Landlock

    @classmethod
    def for_probes(cls, probes: list[Probe], workdir: str, *,
                   memory_mb: int, output_limit: int, jobs: int = 1,
                   **options: Any) -> WorkerSettings:
        """The settings of a worker answering ``probes`` in ``workdir``:
        ``memory_mb`` below what the container's cgroup has left for one
        of ``jobs`` workers (over it the kernel's OOM killer would act
        first: autograder/sandbox/memlimit.py), CPU time for the probes'
        timeouts and a margin (``LIMITS``); ``options``: the other
        fields."""
        return cls(
            memory_mb=memlimit.worker_allowance_mb(memory_mb, share=jobs),
            output_limit=output_limit,
            cpu_seconds=int(sum(p.timeout for p in probes))
            + LIMITS.cpu_grace_seconds,
            workdir=workdir, **options)

    @property
    def scratch(self) -> str:
        """The inmate's working folder (the only one it may write)."""
        return os.path.join(self.workdir, SCRATCH)

    def jail_plan(self) -> jail.JailPlan:
        """The jail these settings ask for: the scratch folder writable,
        ``readable`` readable, the uid/gid to drop to."""
        return jail.JailPlan(workdir=self.scratch, readable=self.readable,
                             uid=self.uid, gid=self.gid,
                             namespaces=self.namespaces)


class _CappedStream(io.TextIOBase):
    """sys.stdout/sys.stderr replacement: keeps the first ``limit``
    characters of a probe's output and counts the rest (a submission that
    prints 100 MB costs only its own formatting time)."""

    def __init__(self, limit: int, fileno: int):
        super().__init__()
        self.limit, self._fileno = limit, fileno
        self.parts: list[str] = []
        self.kept = self.dropped = 0

    def write(self, text: str) -> int:
        text = str(text)
        room = self.limit - self.kept
        if room > 0:
            self.parts.append(text[:room])
            self.kept += min(room, len(text))
        self.dropped += max(0, len(text) - max(room, 0))
        return len(text)

    def fileno(self) -> int:
        return self._fileno

    def isatty(self) -> bool:
        return False

    @property
    def encoding(self) -> str:
        return "utf-8"

    def take(self) -> str:
        """The output so far (with a truncation note) and a fresh start."""
        text = _with_note("".join(self.parts), self.dropped, "characters")
        self.parts, self.kept, self.dropped = [], 0, 0
        return text


def count_processes(uid: int) -> int:
    """How many processes ``uid`` runs (from /proc)."""
    count = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                count += os.stat(f"/proc/{entry}").st_uid == uid
            except OSError:
                pass
    return count


def _vm_size_bytes() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def _set_limits(settings: WorkerSettings) -> None:
    memory = _vm_size_bytes() + settings.memory_mb * 1024 * 1024
    uid = settings.uid if settings.uid is not None else os.getuid()
    nproc = count_processes(uid) + LIMITS.extra_processes
    limits = {resource.RLIMIT_AS: memory, resource.RLIMIT_NPROC: nproc,
              resource.RLIMIT_FSIZE: LIMITS.file_bytes,
              resource.RLIMIT_CORE: 0,
              resource.RLIMIT_CPU: settings.cpu_seconds}
    for which, value in limits.items():
        _, hard = resource.getrlimit(which)
        if hard != resource.RLIM_INFINITY:
            value = min(value, hard)
        hard_value = value + LIMITS.cpu_hard_extra_seconds \
            if which == resource.RLIMIT_CPU else value
        if hard != resource.RLIM_INFINITY:
            hard_value = min(hard_value, hard)
        resource.setrlimit(which, (value, hard_value))
    # Over the file-size limit, writes fail (EFBIG) instead of killing us.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    # Processes the submission forks are reaped at once: no zombies
    # holding RLIMIT_NPROC slots of the worker user.
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    # When the machine runs out, the kernel kills student code first,
    # never the grading parent (which would die printing nothing); the
    # supervisor tells such a kill as the grader's failure (memlimit).
    try:
        with open("/proc/self/oom_score_adj", "w") as adjust:
            adjust.write("1000")
    except OSError:
        pass


class _FdOutput:
    """fd-level stdout/stderr (C code, os.write, subprocesses) go to a
    file; after each probe the worker reads what is new and empties it."""

    def __init__(self, path: str, limit: int):
        self.limit = limit
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND
        writer = os.open(path, flags, 0o600)
        self.reader = os.open(path, os.O_RDONLY)
        self.reader_truncate = writer   # kept: fd 1 may get closed

    def attach(self) -> None:
        """Make this file fd 1 and 2 (in the inmate only: the keeper's own
        output goes to the staff log)."""
        os.dup2(self.reader_truncate, 1)
        os.dup2(self.reader_truncate, 2)

    def take(self) -> str:
        """What was written since the last call (truncated), then empty."""
        try:
            size = os.fstat(self.reader).st_size
            data = os.pread(self.reader, self.limit, 0) if size else b""
            os.ftruncate(self.reader_truncate, 0)
        except OSError:   # the submission closed or replaced its fds
            return ""
        return _with_note(data.decode(errors="replace"), size - len(data),
                          "bytes")


def _with_note(text: str, dropped: int, unit: str) -> str:
    if dropped > 0:
        text += f"\n[... {dropped} more {unit} of output cut]"
    return text


def _close_fds(keep: set[int]) -> None:
    """Close every fd but ``keep``: the fork server hands its children the
    write end of its liveness pipe and the resource tracker's pipe, and
    student code writing there could stop the server or make the (root)
    tracker unlink shared memory."""
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass   # the fd of the listdir itself


def _oom_first() -> None:
    """Where memory runs out, the kernel's OOM killer takes the worker
    (and what it forks), never the grading parent or the fork server."""
    try:
        with open("/proc/self/oom_score_adj", "w") as adj:
            adj.write("1000")
    except OSError:
        pass


def _isolate(settings: WorkerSettings, result_fd: int) -> _FdOutput:
    """The keeper's part: its own session, stdin from /dev/null, output to
    a file, no inherited descriptor, a scrubbed environment."""
    os.setsid()
    _oom_first()
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    log = os.open(os.path.join(settings.workdir, KEEPER_LOG),
                  os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW,
                  0o600)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    output = _FdOutput(os.path.join(settings.workdir, OUTPUT_FILE),
                       settings.output_limit)
    _close_fds({0, 1, 2, result_fd, output.reader, output.reader_truncate})
    home = settings.scratch
    _empty(home)   # a fresh worker after a failure starts clean
    os.chdir(home)
    os.environ.clear()   # secrets in the grader's environment stay there
    os.environ.update(PATH="/usr/local/bin:/usr/bin:/bin", HOME=home,
                      TMPDIR=home, LANG="C.UTF-8", OMP_NUM_THREADS="1")
    tempfile.tempdir = home
    # Forking from this process later is safe only if no parallel torch op
    # has started an OpenMP pool; one thread also keeps memory modest.
    torch.set_num_threads(1)
    # torch reads /proc/cpuinfo on first use; the inmate has no /proc.
    torch.backends.cpu.get_cpu_capability()
    return output


def _lock_up(settings: WorkerSettings, plan: jail.JailPlan) -> None:
    """The inmate's part, before any student code: limits, its own view of
    the filesystem, no privilege, Landlock."""
    _set_limits(settings)
    if "mount-namespace" in plan.active:
        jail.build_root(plan)
    else:
        os.chdir(plan.workdir)
    jail.drop_privileges(plan)
    jail.new_session_keyring(plan)
    if settings.landlock:
        jail.apply_landlock(plan, plan.readable)
    jail.apply_seccomp(plan)


def keeper_main(source: str, filename: str, encoded: bytes,
                results: Connection, settings: WorkerSettings) -> None:
    """Entry point of the worker process (runs in the forked child): the
    keeper. It enters the jail's namespaces, forks the inmate that runs the
    submission, tells the parent the inmate's pid, and when the inmate ends
    kills whatever it left and exits with its status."""
    output = _isolate(settings, results.fileno())
    plan = settings.jail_plan()
    jail.enter_namespaces(plan)
    if "pid-namespace" not in plan.active and jail.become_subreaper():
        plan.active.append("subreaper")
    go_r, go_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(go_w)
        try:
            output.attach()
            jail.die_with_parent()
            os.read(go_r, 1)    # the parent knows our pid: go
            os.close(go_r)
            _inmate_main(source, filename, encoded, results, output,
                         settings, plan)
        finally:
            os._exit(1)
    os.close(go_r)
    # /proc, opened now: the inmate's new root (it shares our mount
    # namespace) has none, and a descriptor opened before the fork would
    # be the inmate's way out of its view.
    proc = os.open("/proc", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    home = os.open(settings.workdir,
                   os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    signal.signal(signal.SIGTERM, lambda *_: os.kill(pid, signal.SIGKILL))
    wire.send(results, {"kind": "jail", "pid": pid})
    os.write(go_w, b"x")
    os.close(go_w)
    status = _watch(pid, settings, proc, home,
                    "mount-namespace" not in plan.active)
    if "pid-namespace" not in plan.active:
        jail.kill_children()
    if status < 0:   # report the inmate's death as our own
        if -status not in (signal.SIGKILL, signal.SIGSTOP):
            # (SIGKILL's action cannot be set: EINVAL. That was the
            # keeper's traceback once shown as a looping class's output.)
            signal.signal(-status, signal.SIG_DFL)
        os.kill(os.getpid(), -status)
    os._exit(status if status >= 0 else 1)


def _watch(pid: int, settings: WorkerSettings, proc: int, home: int,
           folder: bool = True) -> int:
    """Wait for the inmate while bounding its scratch space: the folder
    (when ``folder``: no tmpfs bounds it) as the tmpfs of a mount namespace
    would (``jail.SCRATCH_BYTES``, and a number of files), plus the files
    its processes hold open after unlinking them, in every mode (read
    through ``proc``, a descriptor of /proc). Over it, kill the inmate and
    say why in ``VERDICT_FILE`` (in ``home``, a descriptor of the worker's
    folder: with a mount namespace its path shows the inmate's root).
    Every other process of the submission that is not parked is killed
    as the descendants are counted (``unparked``)."""
    killed = False
    tick = 0
    holders = [pid]
    looked: dict[int, tuple[bytes, int]] = {}   # for ``unparked``
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            if os.WIFSIGNALED(status):
                return -os.WTERMSIG(status)
            return os.WEXITSTATUS(status)
        if tick % _DESCENDANTS_EVERY == 0:
            holders = submission_processes(
                proc, os.getpid(), settings.uid if settings.own_uid else None)
            for other in unparked(proc, holders, pid, looked):
                try:
                    os.kill(other, signal.SIGKILL)
                except OSError:   # ended meanwhile
                    pass
        tick += 1
        used, entries = _usage(settings.scratch) if folder else (0, 0)
        used += held_unlinked(proc, holders)
        if not killed and (used > jail.SCRATCH_BYTES or
                           entries > _MAX_ENTRIES):
            killed = True
            os.kill(pid, signal.SIGKILL)
            fd = os.open(VERDICT_FILE, os.O_WRONLY | os.O_CREAT |
                         os.O_TRUNC | os.O_NOFOLLOW, 0o600, dir_fd=home)
            os.write(fd, b"scratch")
            os.close(fd)
        time.sleep(_WATCH_SECONDS)


# Signals no process can block (SIGKILL, SIGSTOP) and those glibc keeps
# for itself (32, 33): a parked process blocks every other one.
_UNBLOCKABLE = sum(1 << (n - 1) for n in (9, 19, 32, 33))
_EVERY_SIGNAL = (1 << 64) - 1
# Where a parked process waits (``park_forks``: sigwait); "0" where the
# kernel does not say (no symbols, or not to this keeper).
_PARK_WAITS = (b"do_sigtimedwait", b"0")


def unparked(proc: int, pids: list[int], inmate: int,
             looked: dict[int, tuple[bytes, int]]) -> list[int]:
    """The processes of ``pids`` other than ``inmate`` that are not parked
    (``park_forks``): every signal blocked, asleep in the park's wait, and
    no CPU time since the keeper last looked (``looked``: pid -> start
    time and CPU ticks then, updated). A child forked past Python's fork
    hooks (libc's ``fork()`` through ``ctypes``, a raw ``clone``) or a
    program a child started runs student code on, beside the inmate and
    after its answers: the keeper kills it."""
    found = []
    for pid in pids:
        if pid == inmate:
            continue
        try:
            stat = _read(proc, f"{pid}/stat")
            status = _read(proc, f"{pid}/status", 8192)
        except OSError:   # ended meanwhile
            continue
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) < 20 or fields[0] in (b"Z", b"X"):
            continue
        now = (fields[19], int(fields[11]) + int(fields[12]))
        before = looked.get(pid, now)
        looked[pid] = now
        try:
            wchan = _read(proc, f"{pid}/wchan", 64)
        except OSError:
            wchan = b"0"
        blocked = next((int(line.split()[1], 16) for line in
                        status.splitlines() if line.startswith(b"SigBlk:")),
                       0)
        parked = (blocked | _UNBLOCKABLE) == _EVERY_SIGNAL and \
            wchan.startswith(_PARK_WAITS) and fields[0] == b"S" and \
            (before[0] != now[0] or before[1] == now[1])
        if not parked:
            found.append(pid)
    return found


def _read(proc: int, path: str, limit: int = 4096) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC, dir_fd=proc)
    try:
        return os.read(fd, limit)
    finally:
        os.close(fd)


def descendants(proc: int, pid: int) -> list[int]:
    """Every live process descended from ``pid`` (read from ``proc``, a
    descriptor of /proc)."""
    return _scan(proc, pid, None)


def submission_processes(proc: int, keeper: int, uid: int | None
                         ) -> list[int]:
    """The processes whose held files the scratch bound counts: every
    descendant of ``keeper`` (the inmate, its children, and the orphans
    re-parented to the keeper, a subreaper, without a PID namespace: a
    grandchild whose parent exits leaves the inmate's tree but not the
    keeper's), and, when ``uid`` is given (a uid no other worker runs
    as), every process of it wherever it went (read from ``proc``)."""
    return _scan(proc, keeper, uid)


def _scan(proc: int, pid: int, uid: int | None) -> list[int]:
    """The descendants of ``pid``, then the processes of ``uid`` outside
    them, in one pass over ``proc``."""
    parents: dict[int, list[int]] = {}
    owned: list[int] = []
    for entry in os.listdir(proc):
        if not entry.isdigit():
            continue
        try:
            if uid is not None and \
                    os.stat(entry, dir_fd=proc).st_uid == uid:
                owned.append(int(entry))
            data = _read(proc, f"{entry}/stat")
        except OSError:
            continue
        # The command name may hold spaces and parentheses: split after it.
        fields = data[data.rfind(b")") + 2:].split()
        if len(fields) > 1:
            parents.setdefault(int(fields[1]), []).append(int(entry))
    found, seen, stack = [], {pid}, [pid]
    while stack:
        for child in parents.get(stack.pop(), ()):
            if child not in seen:
                seen.add(child)
                found.append(child)
                stack.append(child)
    return found + [p for p in owned if p not in seen]


def held_unlinked(proc: int, pids: list[int]) -> int:
    """Bytes of the regular files that ``pids`` hold open with no name left
    (unlinked, ``O_TMPFILE``, memfd), each file counted once, and of the
    nameless shared memory they keep mapped with no descriptor left (a
    memfd mapped with libc's ``mmap``, its descriptor closed, is in no fd
    folder: ``mapped_unlinked``). A process whose descriptors the keeper
    may not list (the submission made itself non-dumpable) counts as over
    the bound: hiding is no way around it."""
    seen: set[tuple[int, int]] = set()
    held = 0
    mapped: dict[tuple[int, int], int] = {}
    for pid in pids:
        mapped_unlinked(proc, pid, mapped)
        try:
            folder = os.open(f"{pid}/fd", os.O_RDONLY | os.O_DIRECTORY |
                             os.O_CLOEXEC, dir_fd=proc)
        except FileNotFoundError:   # ended meanwhile
            continue
        except OSError:
            if _released(proc, pid):
                continue
            return jail.SCRATCH_BYTES + 1
        try:
            fds = os.listdir(folder)
        except FileNotFoundError:   # reaped since it was opened
            continue
        finally:
            os.close(folder)
        for fd in fds:
            try:
                info = os.stat(f"{pid}/fd/{fd}", dir_fd=proc)
            except OSError:
                continue
            key = (info.st_dev, info.st_ino)
            if stat.S_ISREG(info.st_mode) and info.st_nlink == 0 and \
                    key not in seen:
                seen.add(key)
                held += info.st_blocks * 512
    # A mapped file already counted through a descriptor is not again.
    return held + sum(size for key, size in mapped.items()
                      if key not in seen)


_MAPS_LIMIT = 8 << 20   # bytes of one process's maps read (torch: ~50 KiB)


def mapped_unlinked(proc: int, pid: int,
                    found: dict[tuple[int, int], int]) -> None:
    """Add to ``found`` ((device, inode) -> bytes) the mappings of ``pid``
    that have no name left: a memfd, a deleted file, shared anonymous
    memory (``/dev/zero (deleted)``), each once per inode as the furthest
    byte mapped (an upper bound of what it holds; no correct submission
    maps any). Private mappings count too: a read-only MAP_PRIVATE
    mapping keeps the whole file alive after its descriptor closes. Read
    from /proc/PID/maps, which shows mappings whose descriptor is closed;
    a process that is gone adds nothing (an unreadable one is refused by
    its fd folder already)."""
    try:
        fd = os.open(f"{pid}/maps", os.O_RDONLY | os.O_CLOEXEC, dir_fd=proc)
    except OSError:
        return
    try:
        data, chunk = b"", b"x"
        while chunk and len(data) < _MAPS_LIMIT:
            chunk = os.read(fd, 1 << 16)
            data += chunk
    except OSError:
        return
    finally:
        os.close(fd)
    for line in data.split(b"\n"):
        if not (line.endswith(b" (deleted)") or b" /memfd:" in line):
            continue
        fields = line.split(None, 5)
        if len(fields) < 6:
            continue
        try:
            start, end = (int(x, 16) for x in fields[0].split(b"-"))
            major, minor = (int(x, 16) for x in fields[3].split(b":"))
            key = (os.makedev(major, minor), int(fields[4]))
            furthest = int(fields[2], 16) + end - start
        except ValueError:
            continue
        found[key] = max(found.get(key, 0), furthest)


def _released(proc: int, pid: int) -> bool:
    """Whether ``pid`` has ended or is ending: a zombie, or a process past
    releasing its memory on the way out (its files go next). The kernel
    gives the fd folder of such a process to root, so a keeper that is
    not root may not list it; that is no hiding. A live process has
    memory (its ``stat`` shows a nonzero vsize), non-dumpable or not."""
    try:
        data = _read(proc, f"{pid}/stat")
    except FileNotFoundError:
        return True
    except OSError:
        return False
    # The command name may hold spaces and parentheses: split after it.
    fields = data[data.rfind(b")") + 2:].split()
    # fields[0] is the state (stat's 3rd field), fields[20] the vsize (23rd)
    return len(fields) > 20 and (fields[0] in (b"Z", b"X") or
                                 fields[20] == b"0")


# (O_DIRECTORY and the like are POSIX's: 0 where the platform has none,
# as the module is imported there too)
_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | \
    getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
# Folders opened and not yet read at once: more than an honest scratch
# holds (each an open descriptor of the keeper's).
_MAX_PENDING = 512


def _usage(folder: str) -> tuple[int, int]:
    """Bytes allocated and entries under ``folder`` (not following links),
    counting stops past the limits. Read through folder descriptors, so a
    path of any length is counted (nested names past PATH_MAX too). A
    folder the keeper may not read (the inmate, same uid as an
    unprivileged keeper, may chmod its own) or cannot count counts as over
    the limit: hiding files is no way around the bound; only an entry
    removed meanwhile is skipped."""
    over = jail.SCRATCH_BYTES + 1
    used = entries = 0
    try:
        stack = [os.open(folder, _DIR_FLAGS)]
    except FileNotFoundError:
        return 0, 0
    except OSError:
        return over, 0
    try:
        while stack and used <= jail.SCRATCH_BYTES and \
                entries <= _MAX_ENTRIES:
            if len(stack) > _MAX_PENDING:
                return over, entries
            fd = stack.pop()
            try:
                with os.scandir(fd) as found:
                    for entry in found:
                        entries += 1
                        try:
                            info = entry.stat(follow_symlinks=False)
                            if stat.S_ISDIR(info.st_mode):
                                stack.append(os.open(entry.name, _DIR_FLAGS,
                                                     dir_fd=fd))
                        except FileNotFoundError:   # removed meanwhile
                            continue
                        used += info.st_blocks * 512
            finally:
                os.close(fd)
    except FileNotFoundError:
        pass
    except OSError:
        return over, entries
    finally:
        for fd in stack:
            os.close(fd)
    return used, entries


def _empty(folder: str) -> None:
    """Remove what an earlier worker left in ``folder`` (no links
    followed)."""
    try:
        found = list(os.scandir(folder))
    except OSError:
        return
    for entry in found:
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path, ignore_errors=True)
        else:
            try:
                os.unlink(entry.path)
            except OSError:
                pass


def scratch_verdict(workdir: str) -> str | None:
    """Why the keeper killed the inmate (runs in the parent), if it did."""
    path = os.path.join(workdir, VERDICT_FILE)
    try:
        fd = os.open(path, os.O_RDONLY | _NO_LINK)
    except OSError:
        return None
    try:
        return os.read(fd, 64).decode(errors="replace")
    finally:
        os.close(fd)
        os.unlink(path)


def _inmate_main(source: str, filename: str, encoded: bytes,
                 results: Connection, output: _FdOutput,
                 settings: WorkerSettings, plan: jail.JailPlan) -> None:
    """Runs the submission, locked up (see ``_lock_up``)."""
    # Imported before the jail hides the grader's files (serve_probes
    # then finds it loaded).
    from autograder.sandbox import worker  # noqa: F401

    me = os.getpid()

    def send(header: dict, tensors: list[torch.Tensor] = ()) -> None:
        if os.getpid() != me:    # a process the submission forked
            os._exit(0)
        wire.send(results, header, tensors)

    try:
        os.setsid()   # its own group: kill(0) reaches only the submission
        _lock_up(settings, plan)
    except Exception as exc:   # noqa: BLE001 - the grader's failure
        send({"kind": "jailed", "layers": plan.active,
              "refused": plan.refused,
              "error": f"{type(exc).__name__}: {exc}"})
        os._exit(1)
    send({"kind": "jailed", "layers": plan.active, "refused": plan.refused})
    park_forks()
    serve_probes(source, filename, encoded, results, output,
                 settings.output_limit, send)
    os._exit(0)


def park_forks() -> None:
    """Make every process this one forks (``os.fork``) stop where it
    starts: it waits, using no CPU, to be killed with the inmate. It keeps
    its process slot, so a fork bomb meets the process limit after a few
    forks; a copy that ran the probe on (the whole forward again, in every
    copy) cost the submission its own items under load, a wall-clock
    verdict, and, run as the grader's user without namespaces, its
    neighbours' CPU.

    No handler of the submission's can leave the park (a wait in
    ``signal.pause()`` ran the inherited Python handler, which raised;
    CPython reports an error of a fork hook and goes on, and ``os.fork()``
    returned 0 in a child that kept running). The child's hooks, in this
    order, after the interpreter's own: every signal blocked (a C call: no
    Python code runs before it, so no handler can stop it); every handler
    reset to the default (Python, so best effort: with every signal
    blocked none could run anyway); then a wait in C that returns for no
    signal (``sigwait`` on the empty set: glibc repeats it on EINTR, and
    every signal stays blocked and pending). Only SIGKILL ends it, which
    is how the keeper, the PID namespace or the subreaper end it.

    A child forked past these hooks (libc's ``fork()`` through ``ctypes``,
    a raw ``clone``) never parks: the keeper kills every process of the
    submission but the inmate that is not parked so (``unparked``)."""
    os.register_at_fork(after_in_child=functools.partial(
        signal.pthread_sigmask, signal.SIG_BLOCK, signal.valid_signals()))
    os.register_at_fork(after_in_child=_default_handlers)
    os.register_at_fork(after_in_child=functools.partial(signal.sigwait,
                                                         ()))


def _default_handlers() -> None:
    for number in signal.valid_signals():
        if number not in (signal.SIGKILL, signal.SIGSTOP):
            try:
                signal.signal(number, signal.SIG_DFL)
            except (OSError, ValueError):   # one the OS will not set
                pass


def serve_probes(source: str, filename: str, encoded: bytes,
                 results: Connection, output: _FdOutput, limit: int,
                 send: Callable[..., None]) -> None:
    """Run the probes of ``encoded`` on the submission and ``send`` one
    message per result, its captured output attached (at most ``limit``
    characters of Python-level output): the jailed inmate's loop, and that
    of ``check``'s plain child (autograder/sandbox/plain.py), so both give
    the same verdicts."""
    from autograder.sandbox import audit
    from autograder.sandbox.shape_recorder import stream_sink
    from autograder.sandbox.worker import execute_probes

    probes = wire.decode_probes(encoded)
    stream = _CappedStream(limit, 1)
    sys.stdout = sys.stderr = stream
    # Before the submission loads: reach-ins and shape records written to
    # the parent at once, on the result channel, as frames of their own;
    # the worker keeps neither (the parent rebuilds the shape tables).
    write = wire.frame_writer(results)
    report = audit.Reporter(write)
    own = audit.install(filename, report)
    changes = audit.watch()
    # Encoding a result runs libraries that raise events (numpy's ctypes
    # types under safetensors): the grader's own work, not a reach-in.
    send = functools.partial(own, send)
    # The watch compares the grader's state before a traced probe's
    # result (where a forgery pays), every few results, and before the
    # last one known (the parent reads nothing after the last result).
    traced = {p.id for p in probes if p.trace_shapes or p.trace_values}
    known = [len(probes)]

    def ready() -> None:
        send({"kind": "ready"})

    def hidden() -> list:
        # The hidden cases' probes, asked for once every public probe has
        # answered (their results, output included, are sent already).
        send({"kind": "hidden"})
        more = wire.decode_probes(results.recv_bytes())
        traced.update(p.id for p in more if p.trace_shapes or p.trace_values)
        known[0] += len(more)
        return more

    for count, result in enumerate(execute_probes(
            source, filename, probes, on_import=ready, more=hidden,
            shape_sink=stream_sink(write))):
        if result.id in traced or count % _WATCH_EVERY == 0 or \
                count >= known[0] - 1:
            for name in changes():
                report(audit.STATE_CHANGED + name)
        result.stdout = stream.take() + output.take()
        send(*wire.result_payload(result))


def _read_start(fd: int, limit: int) -> bytes:
    """The first ``limit`` bytes of the file ``fd`` (``pread`` where the
    system has it)."""
    if hasattr(os, "pread"):
        return os.pread(fd, limit, 0)
    os.lseek(fd, 0, os.SEEK_SET)
    return os.read(fd, limit)


def read_keeper_log(workdir: str, limit: int = 20_000) -> str:
    """What the keeper (trusted code) printed, then empty it (runs in the
    parent): staff only, never the student's output."""
    path = os.path.join(workdir, KEEPER_LOG)
    try:
        fd = os.open(path, os.O_RDWR | _NO_LINK)
    except OSError:
        return ""
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return ""
        data = _read_start(fd, limit)
        os.ftruncate(fd, 0)
    finally:
        os.close(fd)
    return data.decode(errors="replace")


def read_leftover(workdir: str, limit: int) -> str:
    """The fd-level output a finished worker wrote after its last result
    (e.g. before it crashed), at most ``limit`` bytes (runs in the parent)."""
    try:
        # O_NOFOLLOW: the submission may have replaced the file by a link.
        fd = os.open(os.path.join(workdir, OUTPUT_FILE),
                     os.O_RDONLY | _NO_LINK)
    except OSError:
        return ""
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return ""
        size = os.fstat(fd).st_size
        data = _read_start(fd, limit)
    finally:
        os.close(fd)
    return _with_note(data.decode(errors="replace"), size - len(data),
                      "bytes")
