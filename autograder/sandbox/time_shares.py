"""The submission's total time, shared among the checks its probes serve.

Every probe has its own time limit, and the submission as a whole has one
(``Sandbox.run``'s ``total_seconds``) that bounds the parent. Spent in
probe order, the total would go to whichever check came first: code that
runs just under the probe limit on every call of one class would use it
all, and every later probe, of classes that did nothing wrong, would be
skipped and charged. So each check (``Probe.groups``; a probe serving
none counts as the check "") has an equal share of the total. A probe all
of whose checks used their share waits (``supervise`` stops its worker
and runs it later) while any check within its share still has a probe to
run: the total runs out on the checks that spent it, never on one that
kept to its share. An honest but slow check loses nothing by waiting: it
runs, later, on the time the others left.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from autograder.sandbox.protocol import Probe

_NONE = ("",)   # the checks of a probe tagged with none


def _groups(probe: Probe) -> tuple[str, ...]:
    return probe.groups or _NONE


class TimeShares:
    """Seconds each check of a run has used, against its share.

    ``probes``: every probe of the run; ``limit``: the total in seconds."""

    def __init__(self, probes: Iterable[Probe], limit: float):
        self.limit = limit
        self.waiting: Counter[str] = Counter(
            g for p in probes for g in _groups(p))
        self.share = limit / max(1, len(self.waiting))
        self.used = dict.fromkeys(self.waiting, 0.0)

    def over_share(self, probe: Probe) -> bool:
        """Whether every check ``probe`` serves used its share (a probe
        that a check within its share needs is that check's)."""
        return all(self.used.get(g, 0.0) >= self.share
                   for g in _groups(probe))

    def must_wait(self, probe: Probe) -> bool:
        """Whether ``probe`` should run only after the waiting probes of
        the checks within their share."""
        return self.over_share(probe) and any(
            n > 0 and self.used[g] < self.share
            for g, n in self.waiting.items())

    def charge(self, probe: Probe, seconds: float) -> None:
        """``probe`` ended (answered or failed) after ``seconds``: its
        checks used them."""
        for g in _groups(probe):
            self.used[g] = self.used.get(g, 0.0) + max(0.0, seconds)
        self.settle(probe)

    def settle(self, probe: Probe) -> None:
        """``probe`` has its result (run, or skipped): its checks wait for
        one probe fewer."""
        for g in _groups(probe):
            self.waiting[g] -= 1
