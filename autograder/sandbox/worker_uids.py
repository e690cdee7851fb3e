"""A uid of its own for every running worker (when grading as root).

The kernel counts RLIMIT_NPROC per user: every process and thread of the
uid, whoever started it. Were all workers one user, a fork bomb in one
submission would fill the count that a neighbour graded at the same time
(``grade --jobs``, or another grader on the machine) needs for a thread or
a fork, and the neighbour would lose points for it. So each worker runs as
a uid no other running worker has: the worker account's when it is free,
else one of ``LIMITS.spare_uids`` that has no account and runs no process
(the jail needs no account: it gives the inmate its scratch folder and
reads only world-readable files).

A uid is held with an exclusive ``flock`` on a file named after it in a
folder only root may write, so that graders in other processes never pick
the same one; the lock goes with the process, whatever kills it.
"""
from __future__ import annotations

import fcntl
import os
import pwd
import stat
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from autograder.sandbox.limits import LIMITS

LOCK_FOLDER = "autograder-worker-uids"


def has_account(uid: int) -> bool:
    """Whether ``uid`` is some user's in the password database."""
    try:
        pwd.getpwuid(uid)
    except KeyError:
        return False
    return True


def running_uids() -> set[int]:
    """The uids of every process on the machine (from /proc)."""
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                found.add(os.stat(f"/proc/{entry}").st_uid)
            except OSError:   # it ended meanwhile
                pass
    return found


def mapped_uids(proc: Path = Path("/proc/self")) -> list[range]:
    """The uids this process may become: its user namespace's map (a
    rootless container maps only some); everything where there is none."""
    try:
        lines = (proc / "uid_map").read_text().splitlines()
    except OSError:
        return [range(0, 1 << 32)]
    ranges = []
    for line in lines:
        fields = line.split()
        if len(fields) == 3 and all(f.isdigit() for f in fields):
            ranges.append(range(int(fields[0]),
                                int(fields[0]) + int(fields[2])))
    return ranges


def lock_folder(base: str | None = None) -> Path | None:
    """The shared folder of uid locks: ours (root's), mode 700, no link.
    None when another user made it first (their locks would be theirs to
    hold): the uids are then kept apart within this process only."""
    folder = Path(base or tempfile.gettempdir()) / LOCK_FOLDER
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
        info = os.lstat(folder)
    except OSError:
        return None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or \
            info.st_mode & 0o022:
        return None
    return folder


class WorkerUids:
    """Hands out a uid no other running worker has, for one run."""

    def __init__(self, account: tuple[int, int],
                 spare: range = range(*LIMITS.spare_uids),
                 folder: Path | None | str = "",
                 has_account: Callable[[int], bool] = has_account,
                 running: Callable[[], set[int]] = running_uids,
                 mapped: Callable[[], list[range]] = mapped_uids):
        self.account = account
        maps = mapped()
        self.spare = [uid for uid in spare
                      if any(uid in m for m in maps)]
        self.folder = lock_folder() if folder == "" else \
            (Path(folder) if folder else None)
        self._has_account, self._running = has_account, running
        self._mine: set[int] = set()     # held by this process's runs
        self._lock = threading.Lock()

    @contextmanager
    def take(self, spare: bool = False) -> Iterator[tuple[int, int]]:
        """(uid, gid) for one run, held until it ends (``spare``: never
        the account's). The worker account's group always: the gid grants
        nothing (no file of the grader's is group-readable by it)."""
        uid, handle = self._claim(spare)
        try:
            yield uid, self.account[1]
        finally:
            with self._lock:
                self._mine.discard(uid)
            if handle is not None:
                os.close(handle)   # releases the flock

    def _claim(self, spare: bool) -> tuple[int, int | None]:
        running: set[int] | None = None
        first = [] if spare else [self.account[0]]
        for uid in (*first, *self.spare):
            if uid != self.account[0]:
                if self._has_account(uid):
                    continue
                if running is None:
                    running = self._running()
                if uid in running:
                    continue
            claimed, handle = self._hold(uid)
            if claimed:
                return uid, handle
        # Every uid busy (a thousand workers at once): share the
        # account's, as before there was a uid per worker.
        return self.account[0], None

    def _hold(self, uid: int) -> tuple[bool, int | None]:
        with self._lock:
            if uid in self._mine:
                return False, None
            handle = None
            if self.folder is not None:
                try:
                    handle = os.open(self.folder / str(uid),
                                     os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW
                                     | os.O_CLOEXEC, 0o600)
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    if handle is not None:
                        os.close(handle)
                    return False, None
            self._mine.add(uid)
            return True, handle


__all__ = ["WorkerUids", "has_account", "lock_folder", "mapped_uids",
           "running_uids"]
