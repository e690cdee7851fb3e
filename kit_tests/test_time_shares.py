"""The submission's total time shared among its checks, and a lost check's
probes skipped, hidden ones too (autograder/sandbox/time_shares.py and
supervisor.supervise).

``supervise`` runs here with a stand-in attempt on a stand-in clock: each
probe "takes" the seconds the test gives it, so the policy is tested
without a worker and without wall-clock time (load-proof)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from autograder.sandbox import parent_clock, supervisor
from autograder.sandbox.protocol import (NOT_RUN, TIMEOUT, Probe,
                                         ProbeResult)
from autograder.sandbox.time_shares import TimeShares

HANG = -1.0   # a probe that runs to its time limit


def probe(pid: str, group: str, hidden: bool = False) -> Probe:
    return Probe(pid, "C", {}, groups=(group,), hidden=hidden, timeout=10.0)


class Clock:
    def __init__(self):
        self.t = 0.0

    def now(self) -> float:
        return self.t


def run(probes: list[Probe], seconds: dict[str, float], limit: float,
        tmp_path, monkeypatch) -> tuple[list[ProbeResult], list[str]]:
    """supervise's results and the probes run, in order: probe ``p`` takes
    ``seconds[p.id]`` (HANG: its time limit, then a timeout); past the
    total's end it is cut there, as the worker's deadline cuts it."""
    clock = Clock()
    monkeypatch.setattr(parent_clock, "now", clock.now)
    ran: list[str] = []

    class Fake:
        imported, layers, refused = True, None, []

        def __init__(self, start, source, filename, todo, settings,
                     deadline, limit, budget, shares):
            public = [p for p in todo if not p.hidden]
            self.probes = public + [p for p in todo if p.hidden]
            self.deadline, self.shares = deadline, shares

        def results(self):
            for p in self.probes:
                ran.append(p.id)
                took = p.timeout if seconds[p.id] == HANG else seconds[p.id]
                start = clock.t
                clock.t = min(start + took, self.deadline)
                self.shares.charge(p, clock.t - start)
                if seconds[p.id] == HANG or clock.t >= self.deadline:
                    raise supervisor.Failure(TIMEOUT, f"{p.id} timed out")
                yield ProbeResult(p.id, "ok")

        def close(self):
            return ""

    settings = SimpleNamespace(workdir=str(tmp_path), output_limit=1000)
    results, _, _ = supervisor.supervise(
        lambda process: None, "", "s.py", probes, settings, limit, limit,
        attempt=Fake)
    return results, ran


def test_a_lost_check_skips_its_hidden_probes_and_no_other(tmp_path,
                                                           monkeypatch):
    probes = [probe("a1", "a"), probe("b1", "b"),
              probe("a2", "a", hidden=True), probe("b2", "b", hidden=True)]
    results, ran = run(probes, {"a1": HANG, "b1": 1, "a2": HANG, "b2": 1},
                       300, tmp_path, monkeypatch)
    assert ran == ["a1", "b1", "b2"]
    status = {r.id: (r.status, r.message) for r in results}
    assert status["a1"][0] == TIMEOUT
    assert status["a2"] == (NOT_RUN, "skipped: an earlier call of this "
                                     "check timed out")
    assert status["b1"][0] == status["b2"][0] == "ok"


def test_a_check_past_its_share_waits_and_spends_the_total_alone(
        tmp_path, monkeypatch):
    # Three checks share 30 s (10 each). a's calls take 9 s each, under
    # the probe limit: run in order they would use the total, and b's and
    # c's probes after them would be skipped and charged.
    probes = [probe(f"a{k}", "a") for k in range(1, 6)] + [
        probe("b1", "b"), probe("c1", "c", hidden=True)]
    seconds = {**{f"a{k}": 9.0 for k in range(1, 6)}, "b1": 1, "c1": 1}
    results, ran = run(probes, seconds, 30, tmp_path, monkeypatch)
    # a passes its share on its second call: b and c run next.
    assert ran[:4] == ["a1", "a2", "b1", "c1"]
    status = {r.id: r.status for r in results}
    assert status["b1"] == status["c1"] == "ok"
    assert status["a1"] == status["a2"] == status["a3"] == "ok"
    # The total ran out on a's calls: a alone loses.
    assert status["a4"] == status["a5"] == TIMEOUT


def test_a_check_within_its_share_never_waits(tmp_path, monkeypatch):
    probes = [probe("a1", "a"), probe("a2", "a"), probe("b1", "b")]
    results, ran = run(probes, {"a1": 4, "a2": 4, "b1": 1}, 30, tmp_path,
                       monkeypatch)
    assert ran == ["a1", "a2", "b1"]
    assert all(r.status == "ok" for r in results)


@pytest.mark.parametrize("used, other_waiting, waits", [
    (16.0, True, True),      # past its share, another check still waits
    (14.0, True, False),     # within its share
    (16.0, False, False),    # past it, but nobody else waits
])
def test_must_wait(used, other_waiting, waits):
    a, b = probe("a1", "a"), probe("b1", "b")
    shares = TimeShares([a, a, b], limit=30.0)
    assert shares.share == 15.0
    shares.charge(a, used)
    if not other_waiting:
        shares.charge(b, 1.0)
    assert shares.must_wait(a) is waits


def test_a_probe_a_check_within_its_share_needs_never_waits():
    shared = Probe("ab", "C", {}, groups=("a", "b"))
    other = probe("c1", "c")
    shares = TimeShares([shared, shared, other], limit=30.0)
    shares.charge(Probe("a0", "C", {}, groups=("a",)), 20.0)
    assert not shares.must_wait(shared)      # b is within its share
