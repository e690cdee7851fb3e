"""A worker that has already ended, judged by the supervisor: one helper
for the tests of who is at fault for a worker's death (the OOM killer,
the student's code, the memory limit)."""
from __future__ import annotations

from pathlib import Path

from autograder.sandbox import memlimit, supervisor
from autograder.sandbox.protocol import Probe


class _Dead:
    """A worker process that has ended with ``exitcode`` (-signal when a
    signal ended it)."""

    def __init__(self, exitcode: int):
        self.exitcode, self.pid = exitcode, None

    def join(self, timeout=None) -> None:
        return None


def death(tmp_path: Path, monkeypatch, exitcode: int, oom_before: int = 0,
          oom_after: int = 1, memory_mb: int = 300) -> supervisor.Failure:
    """The supervisor's failure for a worker (limit ``memory_mb``) that
    ended with ``exitcode`` after importing the submission, while the
    container's OOM-kill count went from ``oom_before`` to
    ``oom_after``."""
    attempt = object.__new__(supervisor.Attempt)
    attempt.process = _Dead(exitcode)
    attempt.workdir, attempt.imported = str(tmp_path), True
    attempt.oom_kills, attempt.memory_mb = oom_before, memory_mb
    monkeypatch.setattr(memlimit, "oom_kills", lambda *a: oom_after)
    return attempt._death(Probe("p1", "SelfAttention", {}))
