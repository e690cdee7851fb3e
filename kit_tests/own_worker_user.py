"""A worker user of a test's own (as root).

Every worker runs as the one worker user, and RLIMIT_NPROC counts every
process of a user: a test whose submission fills the process count (a fork
bomb) would make a fork or a thread of another test's worker, in another
test process of a parallel run, fail. Such tests, and those whose
submission must fork, run their workers as a uid no other test uses (the
jail needs no account for it).
"""
from __future__ import annotations

import os
import pwd

import pytest


def unused_uid() -> int:
    """A uid with no account and no process."""
    running = set()
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit():
                running.add(os.stat(f"/proc/{entry}").st_uid)
        except OSError:   # it ended meanwhile
            pass
    return next(uid for uid in range(61_000, 62_000)
                if uid not in running and not _has_account(uid))


def _has_account(uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
    except KeyError:
        return False
    return True


def own_worker_user(sandbox, monkeypatch: pytest.MonkeyPatch
                    ) -> tuple[int, int] | None:
    """Make ``sandbox``'s workers run as an unused uid for this test (with
    the worker user's group); returns (uid, gid), or None when not root
    (the workers run as the grader's user)."""
    if sandbox.user is None:
        return None
    user = (unused_uid(), sandbox.user[1])
    monkeypatch.setattr(sandbox, "user", user)
    return user
