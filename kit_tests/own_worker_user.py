"""A worker uid of a test's own (as root).

A test that fills a uid's process count on purpose (a fork bomb), or that
must know which uid its worker ran as, runs its workers as a spare uid it
holds through the sandbox's own allocator (autograder/sandbox/
worker_uids.py): no other worker, in this test process or another, is
given that uid meanwhile.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import pytest

from autograder.sandbox.worker_uids import NoSpareUid


@contextmanager
def own_worker_user(sandbox, monkeypatch: pytest.MonkeyPatch
                    ) -> Iterator[tuple[int, int] | None]:
    """Within the block ``sandbox``'s workers run as a spare uid held for
    this test; yields (uid, gid), or None when not root (the workers run
    as the grader's user)."""
    if sandbox.user is None:
        yield None
        return
    with ExitStack() as held:
        try:
            user = held.enter_context(sandbox.uids.take(spare=True))
        except NoSpareUid:
            # The account's count is every parallel test's: never fill it.
            pytest.skip("no spare worker uid here (a uid map without "
                        "them, or AUTOGRADER_WORKER_USER set)")
        with monkeypatch.context() as patch:
            patch.setattr(sandbox, "user", user)
            yield user
