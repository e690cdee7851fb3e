"""autograder/sandbox/worker_uids.py: a uid of its own for every running
worker, so that a fork bomb's processes never fill the process count a
neighbour's worker needs (RLIMIT_NPROC counts every process of a uid)."""
from __future__ import annotations

import os
from contextlib import ExitStack

import pytest

from autograder.sandbox import worker_uids
from autograder.sandbox.worker_uids import NoSpareUid, WorkerUids

ACCOUNT = (990, 991)
SPARE = range(61_000, 61_004)


def uids(tmp_path, accounts=(), running=(), mapped=None) -> WorkerUids:
    return WorkerUids(ACCOUNT, SPARE, tmp_path,
                      has_account=lambda uid: uid in accounts,
                      running=lambda: set(running),
                      mapped=lambda: mapped or [range(0, 1 << 32)])


def test_the_account_first_then_a_spare_uid_per_running_worker(tmp_path):
    pool = uids(tmp_path)
    with pool.take() as first, pool.take() as second, \
            pool.take() as third:
        assert first == ACCOUNT
        assert [second, third] == [(61_000, 991), (61_001, 991)]
    with pool.take() as again:   # released: the account is free again
        assert again == ACCOUNT


def test_a_spare_uid_when_asked(tmp_path):
    pool = uids(tmp_path)
    with pool.take(spare=True) as spare, pool.take() as account:
        assert spare == (61_000, 991) and account == ACCOUNT


def test_a_uid_with_an_account_or_a_process_is_never_handed_out(tmp_path):
    pool = uids(tmp_path, accounts={61_000}, running={61_001})
    with pool.take(), pool.take() as spare:
        assert spare[0] == 61_002


def test_an_account_still_running_processes_is_skipped(tmp_path):
    # Left by an earlier run (a keeper killed mid-sweep): their count
    # would be the next worker's.
    pool = uids(tmp_path, running={ACCOUNT[0]})
    with pool.take() as first:
        assert first == (61_000, 991)


def test_no_spare_free_is_said_when_a_spare_is_asked(tmp_path):
    pool = uids(tmp_path, mapped=[range(0, 1000)])
    with pytest.raises(NoSpareUid):
        with pool.take(spare=True):
            pass


def test_another_process_holding_a_uid_keeps_it(tmp_path):
    # Two graders (here two pools on one lock folder) never share a uid.
    mine, theirs = uids(tmp_path), uids(tmp_path)
    with theirs.take() as held:
        with mine.take() as got:
            assert held == ACCOUNT and got == (61_000, 991)


def test_only_uids_this_namespace_maps_are_used(tmp_path):
    pool = uids(tmp_path, mapped=[range(0, 61_001)])
    with pool.take(), pool.take() as spare, pool.take() as shared:
        assert spare[0] == 61_000
        assert shared == ACCOUNT   # none left: the account's, shared


def test_every_uid_busy_shares_the_account(tmp_path):
    pool = uids(tmp_path)
    with ExitStack() as stack:
        taken = [stack.enter_context(pool.take()) for _ in range(6)]
    assert [uid for uid, _ in taken] == \
        [ACCOUNT[0], *SPARE, ACCOUNT[0]]


def test_a_shared_account_ending_frees_nothing(tmp_path):
    # The run that shared the account never held it: its end leaves the
    # account busy for the one holding it.
    pool = WorkerUids(ACCOUNT, SPARE, None, has_account=lambda uid: False,
                      running=set, mapped=lambda: [range(0, 1 << 32)])
    with ExitStack() as holders:
        for _ in range(1 + len(SPARE) - 1):
            holders.enter_context(pool.take())
        with pool.take() as last_spare:
            with pool.take() as shared:
                assert shared == ACCOUNT
        assert last_spare[0] == SPARE[-1]
        with pool.take() as next_one:   # the spare just freed
            assert next_one[0] == SPARE[-1]


def test_a_lock_folder_someone_else_made_is_not_used(tmp_path):
    target = tmp_path / "elsewhere"
    target.mkdir()
    (tmp_path / worker_uids.LOCK_FOLDER).symlink_to(target)
    assert worker_uids.lock_folder(str(tmp_path)) is None
    loose = tmp_path / "loose"
    (loose / worker_uids.LOCK_FOLDER).mkdir(parents=True)
    os.chmod(loose / worker_uids.LOCK_FOLDER, 0o777)
    assert worker_uids.lock_folder(str(loose)) is None
    (tmp_path / "fresh").mkdir()
    fresh = worker_uids.lock_folder(str(tmp_path / "fresh"))
    assert fresh is not None and oct(fresh.stat().st_mode & 0o777) == "0o700"
    open_to_all = tmp_path / "open"
    open_to_all.mkdir()
    os.chmod(open_to_all, 0o777)   # no sticky bit: a folder anyone swaps
    assert worker_uids.lock_folder(str(open_to_all)) is None
    # The first usable base is taken.
    assert worker_uids.lock_folder(str(open_to_all),
                                   str(tmp_path / "fresh")) == fresh


def test_without_a_lock_folder_uids_are_kept_apart_in_this_process():
    pool = WorkerUids(ACCOUNT, SPARE, None, has_account=lambda uid: False,
                      running=set, mapped=lambda: [range(0, 1 << 32)])
    with pool.take() as first, pool.take() as second:
        assert first != second


@pytest.mark.skipif(not os.path.exists("/proc/self/uid_map"),
                    reason="no /proc/self/uid_map (not Linux)")
def test_the_machine_answers_each_question():
    assert os.getuid() in worker_uids.running_uids()
    assert any(os.getuid() in r for r in worker_uids.mapped_uids())
    assert worker_uids.has_account(0)   # root's is in every passwd
