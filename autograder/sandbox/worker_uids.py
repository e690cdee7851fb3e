"""A uid of its own for every running worker (when grading as root).

The kernel counts RLIMIT_NPROC per user: every process and thread of the
uid, whoever started it. Were all workers one user, a fork bomb in one
submission would fill the count that a neighbour graded at the same time
(``grade --jobs``, or another grader on the machine) needs for a thread or
a fork, and the neighbour would lose points for it. So each worker runs as
a uid no other running worker has: the worker account's when it is free,
else one of ``LIMITS.spare_uids`` that has no account (the jail needs
none: it gives the inmate its scratch folder, and everything else it
reads is world-readable; ``preflight.prove_spare_uids`` checks that with
the canary before a batch uses them). A uid that runs a process (left by
an earlier run, or anyone's) is skipped.

A uid is held with an exclusive ``flock`` on a file named after it in a
folder only root may write (under /run), so that graders in other
processes never pick the same one; the lock goes with the process,
whatever kills it. When every uid is busy, or no such folder can be had,
workers share the account as they did before.
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


class NoSpareUid(RuntimeError):
    """Every spare uid is busy (or there is none here)."""


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


def lock_folder(*bases: str) -> Path | None:
    """The shared folder of uid locks in the first of ``bases`` (default
    /run, then the temp folder) that no other user can write: ours,
    mode 700, no link. None when there is none (another user made it
    first: their locks would be theirs to hold); the uids are then kept
    apart within this process only."""
    for base in bases or ("/run", tempfile.gettempdir()):
        try:
            parent = os.stat(base)
            if parent.st_mode & 0o002 and not parent.st_mode & stat.S_ISVTX:
                continue   # anyone could swap our folder for a link
            folder = Path(base) / LOCK_FOLDER
            folder.mkdir(mode=0o700, exist_ok=True)
            info = os.lstat(folder)
        except OSError:
            continue
        if stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid() \
                and not info.st_mode & 0o077:
            return folder
    return None


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
        """(uid, gid) for one run, held until it ends. The worker
        account's group always: the gid grants nothing (no file of the
        grader's is group-readable by it). ``spare``: never the account's
        (NoSpareUid when none is free)."""
        uid, handle = self._claim(spare)
        try:
            yield uid, self.account[1]
        finally:
            if handle is not None:   # closing it releases the flock
                self._release(uid, handle)

    def holds(self, uid: int) -> bool:
        """Whether a run of this process holds ``uid`` now (taken and
        locked: no other worker, here or in another grader, runs as it),
        not the account shared unheld."""
        with self._lock:
            return uid in self._mine

    def _claim(self, spare: bool) -> tuple[int, int | None]:
        """A free uid and its lock's descriptor (-1: no lock folder);
        None for the account shared unheld (every uid busy)."""
        for uid in ([] if spare else [self.account[0]]) + self.spare:
            if uid != self.account[0] and self._has_account(uid):
                continue
            handle = self._hold(uid)
            if handle is None:
                continue
            if uid not in self._running():   # none left by anyone
                return uid, handle
            self._release(uid, handle)
        if spare:
            raise NoSpareUid("no spare worker uid is free here")
        return self.account[0], None

    def _hold(self, uid: int) -> int | None:
        with self._lock:
            if uid in self._mine:
                return None
            handle = -1
            if self.folder is not None:
                try:
                    handle = os.open(self.folder / str(uid),
                                     os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW
                                     | os.O_CLOEXEC, 0o600)
                except OSError:
                    return None
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    os.close(handle)
                    return None
            self._mine.add(uid)
            return handle

    def _release(self, uid: int, handle: int) -> None:
        with self._lock:
            self._mine.discard(uid)
        if handle >= 0:
            os.close(handle)


__all__ = ["LOCK_FOLDER", "NoSpareUid", "WorkerUids", "has_account",
           "lock_folder", "mapped_uids", "running_uids"]
