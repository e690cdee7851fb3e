"""A worker uid of a test's own (as root).

A test that fills a uid's process count on purpose (a fork bomb), or that
must know which uid its worker ran as, runs its workers as a spare uid it
holds through the sandbox's own allocator (autograder/sandbox/
worker_uids.py): no other worker, in this test process or another, is
given that uid meanwhile.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest


@contextmanager
def own_worker_user(sandbox, monkeypatch: pytest.MonkeyPatch
                    ) -> Iterator[tuple[int, int] | None]:
    """Within the block ``sandbox``'s workers run as a spare uid held for
    this test; yields (uid, gid), or None when not root (the workers run
    as the grader's user)."""
    if sandbox.user is None:
        yield None
        return
    with sandbox.uids.take(spare=True) as user:
        with monkeypatch.context() as patch:
            patch.setattr(sandbox, "user", user)
            yield user
