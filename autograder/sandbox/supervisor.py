"""The grading parent's side of a run: workers, timeouts and restarts.

``supervise`` runs a submission's probes in order, one worker process per
attempt. Each ``Attempt`` starts a worker (``worker_jail.keeper_main``),
receives its messages (``wire.Receiver``) and enforces each probe's timeout
and the submission's total time. On a timeout, crash or memory failure it
kills the worker and reports that probe; ``supervise`` then starts a fresh
worker for the rest, skipping probes whose checks are already lost. The
total time is shared among the checks (``time_shares``): a check past its
share waits until those within theirs have run, so the total never runs
out on a check that kept to its share.

What the keeper (the grader's own code in the worker) prints is never the
student's output: it goes to this process's stderr (the staff log), and a
traceback there makes the run a grader failure (``ENVIRONMENT``: no score,
regrade), never a student's error.
"""
from __future__ import annotations

import os
import signal
import sys
from dataclasses import replace
from multiprocessing.process import BaseProcess
from typing import Any, Callable, Iterator

import torch

from autograder.sandbox import audit, jail, memlimit, parent_clock, wire
from autograder.sandbox.cpython_internals import WorkerProcess
from autograder.sandbox.limits import LIMITS
from autograder.sandbox.protocol import (CRASH, ENVIRONMENT, IMPORT_ERROR,
                                         MEMORY, NOT_RUN, TIMEOUT, Probe,
                                         ProbeResult)
from autograder.sandbox.shape_table import ShapeTable, TooManyRecords
from autograder.sandbox.time_shares import TimeShares
from autograder.sandbox.worker_jail import (WorkerSettings, keeper_main,
                                            read_keeper_log, read_leftover,
                                            scratch_verdict)

_LOST_BECAUSE = {TIMEOUT: "timed out", MEMORY: "used too much memory",
                 CRASH: "crashed the worker"}
Starter = Callable[[BaseProcess], None]   # starts a worker process


GRADER_FAILURE = ("the grader's own worker process failed (its error is in "
                  "the staff log, not shown here); this is not the "
                  "submission's fault: regrade it")


def supervise(start: Starter, source: str, filename: str,
              probes: list[Probe], settings: WorkerSettings,
              deadline: float, limit: float, *,
              results_bytes: int = LIMITS.retained_bytes,
              attempt: Callable[..., Attempt] | None = None
              ) -> tuple[list[ProbeResult], list[str] | None, list[str]]:
    """One result per probe, in order, the jail's layers (None if no
    worker reported them) and the layers it could not build, each with
    the failing call. ``deadline`` (``parent_clock.now()``) ends the
    whole run, whose length is ``limit`` seconds. The parent receives at
    most ``results_bytes`` of results for the submission as a whole
    (``wire.Budget``), however many workers it takes. ``attempt``: the
    worker's kind (default the jailed ``Attempt``; ``check``'s plain child
    where the jail cannot run: autograder/sandbox/plain.py)."""
    make_attempt = attempt or Attempt
    results: dict[int, ProbeResult] = {}
    reach_ins: list[str] = []     # every worker's, for every result
    budget = wire.Budget(results_bytes)
    shares = TimeShares(probes, limit)   # the total, per check
    lost: dict[str, ProbeResult] = {}   # check -> the failure losing it
    layers = None
    refused: list[str] = []
    # Public probes first: a worker gets the hidden ones only after every
    # public one answered (``Attempt``). A worker runs the probes of one
    # ``Probe.process`` only, the lowest first.
    pending = sorted(range(len(probes)), key=lambda i: probes[i].hidden)
    while pending:
        todo = _next_batch(pending, probes, results, lost, deadline,
                           limit, shares)
        if not todo:
            break
        attempt = make_attempt(start, source, filename,
                               [probes[i] for i in todo], settings,
                               deadline, limit, budget, shares)
        got = 0
        failure = None
        try:
            for result in attempt.results():
                results[todo[got]] = result
                got += 1
                if result.status == MEMORY:
                    break      # a fresh worker for the rest
                if got < len(todo) and shares.must_wait(probes[todo[got]]):
                    break      # the rest in a fresh worker, in share order
        except Failure as exc:
            failure = exc
        finally:
            output = attempt.close()
            layers = attempt.layers if attempt.layers is not None \
                else layers
            refused = attempt.refused or refused
            # Charged to every task: caught at import, in the grader's
            # state, or after the last result this worker gave.
            reach_ins += [r for r in getattr(attempt, "unattributed",
                                             list)()
                          if r not in reach_ins]
            staff = read_keeper_log(settings.workdir)
        if _staff_log(staff, filename):
            # The grader failed, not the submission: no score for it.
            _grader_failed(results, probes, todo, got, GRADER_FAILURE)
            break
        if failure is not None and failure.status == ENVIRONMENT:
            # The grader's failure: no score, so no more workers for it.
            _grader_failed(results, probes, todo, got, failure.message)
            break
        if failure is not None:
            _failed_attempt(results, probes, todo, got, failure, attempt,
                            _cap_text(output, settings.output_limit), shares)
        _mark_lost(results, probes, todo, lost)
        if not attempt.imported:
            _same_import(results, probes, todo)
        pending = [i for i in pending if i not in results]
    for i in range(len(probes)):
        results.setdefault(i, ProbeResult(probes[i].id, NOT_RUN,
                                          "skipped: " + GRADER_FAILURE))
        results[i].reach_ins = list(reach_ins)
    return [results[i] for i in range(len(probes))], layers, refused


def _next_batch(pending: list[int], probes: list[Probe],
                results: dict[int, ProbeResult],
                lost: dict[str, ProbeResult], deadline: float, limit: float,
                shares: TimeShares) -> list[int]:
    """The probes the next worker runs: of those still to run, the lowest
    ``Probe.process``'s, the checks within their time share first."""
    todo = _still_to_run(pending, probes, results, lost, deadline, limit,
                         shares)
    if not todo:
        return todo
    process = min(probes[i].process for i in todo)
    todo = [i for i in todo if probes[i].process == process]
    # The checks within their share first; those past it after them.
    return [i for i in todo if not shares.must_wait(probes[i])] or todo


def _failed_attempt(results: dict[int, ProbeResult], probes: list[Probe],
                    todo: list[int], got: int, failure: Failure,
                    attempt: Attempt, output: str,
                    shares: TimeShares) -> None:
    """A worker that failed at probe ``todo[got]``: its result, and the
    time shares of those its import failure settles with it."""
    _probe_failed(results, probes, todo, got, failure, attempt.imported,
                  output)
    # The failing probe's time is charged by the attempt; those an
    # import failure settles with it never ran.
    for i in todo[got + 1:]:
        if i in results:
            shares.settle(probes[i])


def _still_to_run(pending: list[int], probes: list[Probe],
                  results: dict[int, ProbeResult],
                  lost: dict[str, ProbeResult], deadline: float,
                  limit: float, shares: TimeShares) -> list[int]:
    """The pending probes a fresh worker should run; the others get their
    result here: past the total time limit, or every check they serve
    already lost to a timeout, the memory limit or a crash (hidden probes
    too: only the worker sees them without their checks)."""
    todo = []
    for i in pending:
        groups = probes[i].groups
        if parent_clock.now() >= deadline:
            results[i] = ProbeResult(
                probes[i].id, TIMEOUT, "skipped: the submission used"
                f" up its total time limit of {limit:g} s")
        elif groups and all(g in lost for g in groups):
            why = _LOST_BECAUSE[lost[groups[0]].status]
            results[i] = ProbeResult(
                probes[i].id, NOT_RUN,
                f"skipped: an earlier call of this check {why}")
        else:
            todo.append(i)
            continue
        shares.settle(probes[i])
    return todo


def _grader_failed(results: dict[int, ProbeResult], probes: list[Probe],
                   todo: list[int], got: int, message: str) -> None:
    """The grader's own failure during the probe after the ``got``
    answered ones: that probe says so (no score), the rest are skipped."""
    index = todo[min(got, len(todo) - 1)]
    results[index] = ProbeResult(probes[index].id, ENVIRONMENT, message)
    for i in todo:
        results.setdefault(i, ProbeResult(probes[i].id, NOT_RUN,
                                          "skipped: " + message))


def _probe_failed(results: dict[int, ProbeResult], probes: list[Probe],
                  todo: list[int], got: int, failure: Failure,
                  imported: bool, output: str) -> None:
    """The submission's failure during the probe after the ``got``
    answered ones (its output attached). Before the import finished, every
    later probe would fail the same way: no restart. Otherwise only this
    probe."""
    hit = todo[got:got + 1] if imported else todo[got:]
    for i in hit:
        results[i] = ProbeResult(probes[i].id, failure.status,
                                 failure.message,
                                 phase="" if imported else "import")
    results[hit[0]].stdout = output


def _same_import(results: dict[int, ProbeResult], probes: list[Probe],
                 todo: list[int]) -> None:
    """The import failed (or hung) in this worker: it would fail the same
    way in another, so every probe of the run gets its result (the probes
    of another ``Probe.process`` are not imported again)."""
    failed = results.get(todo[-1])
    if failed is None:
        return
    for i, probe in enumerate(probes):
        results.setdefault(i, replace(failed, id=probe.id, stdout=""))


def _mark_lost(results: dict[int, ProbeResult], probes: list[Probe],
               todo: list[int], lost: dict[str, ProbeResult]) -> None:
    """Record the checks lost by this worker's failures. A crash after the
    import loses its checks as a timeout does: sleeping to each limit and
    then crashing costs one limit per check, not one per probe."""
    for i in todo:
        result = results.get(i)
        if result is not None and result.status in _LOST_BECAUSE:
            for group in probes[i].groups:
                lost.setdefault(group, result)


def _staff_log(text: str, filename: str) -> bool:
    """Print what the keeper wrote to the grader's stderr (the staff log);
    whether it is a failure of the grader (a traceback)."""
    if not text.strip():
        return False
    lines = "\n".join("  " + line for line in text.rstrip().splitlines())
    print(f"grader (staff log): the worker for {filename!r} printed:\n"
          f"{lines}", file=sys.stderr, flush=True)
    return "Traceback (most recent call last)" in text


def _cap_text(text: str, limit: int) -> str:
    if len(text) <= limit + 100:
        return text
    return text[:limit] + f"\n[... {len(text) - limit} more characters cut]"


class Failure(Exception):
    """The worker failed while a probe was pending."""

    def __init__(self, status: str, message: str):
        super().__init__(message)
        self.status, self.message = status, message


class Attempt:
    """One worker process answering a run of probes.

    Hidden means hidden until published: the worker starts with the public
    probes only. Once it has answered all of them (their output and
    messages are on the wire, fixed) it asks for the rest (a ``hidden``
    message) and receives the hidden cases' probes under opaque ids
    (``h0``, ``h1``, ...: no case name), so neither import-time output nor
    anything reported for a public probe can carry hidden data, and all it
    prints from then on belongs to hidden probes (``grade.hidden_stdout``).
    A fresh worker after a failure starts over the same way."""

    def __init__(self, start: Starter, source: str, filename: str,
                 probes: list[Probe], settings: WorkerSettings,
                 deadline: float, limit: float,
                 budget: wire.Budget | None = None,
                 shares: TimeShares | None = None):
        public = [p for p in probes if not p.hidden]
        hidden = [p for p in probes if p.hidden]
        self.probes = public + hidden
        # What the worker calls each probe.
        self.wire_ids = [p.id for p in public] + \
            [f"h{k}" for k in range(len(hidden))]
        self.hidden_sent = False
        self._hidden = [replace(p, id=f"h{k}", groups=())
                        for k, p in enumerate(hidden)]
        self.total_deadline, self.total_seconds = deadline, limit
        # The total as the checks share it (``supervise``'s, one for every
        # worker of the run); the probe running, and since when.
        self.shares = shares or TimeShares(probes, limit)
        self.index, self.since = 0, 0.0
        self.imported = False
        self.killed = False
        self.workdir, self.limit = settings.workdir, settings.output_limit
        self.memory_mb = settings.memory_mb
        self.oom_kills = memlimit.oom_kills()   # the cgroup's, before
        mine, theirs = wire.channel()
        self.receiver = wire.Receiver(mine, budget)
        self.process = self.new_process(
            (source, filename, wire.encode_probes(public), theirs,
             settings))
        try:
            start(self.process)
        except BaseException:
            self.receiver.close()
            raise
        finally:
            theirs.close()
        self.frames = 0
        self.reach_ins: list[str] = []     # caught where no probe ran
        # Caught while a probe ran (after the import), in order, and how
        # many of them the results given so far carry.
        self.reach_since: list[str] = []
        self.reach_given = 0
        self.table = ShapeTable()          # the running probe's records
        self.inmate: int | None = None     # the process running student code
        self.layers: list[str] | None = None
        self.refused: list[str] = []

    def new_process(self, args: tuple) -> BaseProcess:
        """The worker process, not started: the jailed keeper."""
        return WorkerProcess(target=keeper_main, name="autograder-worker",
                             daemon=True, args=args)

    def results(self) -> Iterator[ProbeResult]:
        """Yield ProbeResults in order; raise Failure when the worker
        fails, for the next pending probe. Each probe's time, answered or
        failed, is charged to its checks (``shares``)."""
        self.since = parent_clock.now()
        try:
            yield from self._results()
        except Failure:
            if self.index < len(self.probes):
                self._charge(self.probes[self.index])
            raise

    def _charge(self, probe: Probe) -> None:
        now = parent_clock.now()
        self.shares.charge(probe, now - self.since)
        self.since = now

    def _results(self) -> Iterator[ProbeResult]:
        deadline = self._deadline(self.probes[0])
        index = 0
        while index < len(self.probes):
            probe = self.probes[index]
            header, outputs = self._next_message(deadline, probe)
            kind = header.get("kind")
            if self.frames == 1:   # the keeper's, before any student code
                self._accept_jail(header)
            elif self.frames == 2:   # the inmate's, before any student code
                self._accept_jailed(header)
            elif kind == "ready" and not self.imported:
                self.imported = True
            elif kind == "reach" and self.frames > 2:
                self._accept_reach(header)
            elif kind == "shape" and self.frames > 2:
                self._accept_shape(header, probe)
            elif kind == "hidden" and not self.hidden_sent and \
                    index == len(self.probes) - len(self._hidden):
                self._send_hidden(probe, deadline)
            elif kind == "result":
                try:
                    result = wire.result_from_header(
                        header, outputs, self.wire_ids[index])
                except wire.BadMessage as exc:
                    raise Failure(CRASH, f"the worker sent a malformed "
                                  f"result for probe {probe.id} ({exc})")
                result.id = probe.id
                if result.status != IMPORT_ERROR and \
                        result.phase != "import":
                    self.imported = True
                # The shapes are the records streamed while it ran,
                # never the worker's word at the end.
                shapes, forged = self.table.take()
                if probe.trace_shapes:
                    result.shapes, result.trace_forged = shapes, forged
                result.reach_here = list(self.reach_since)
                self.reach_given = len(self.reach_since)
                self._charge(probe)
                self.index = index = index + 1
                yield result
            else:
                raise Failure(CRASH, "the worker sent an unexpected "
                              f"message before probe {probe.id}")
            if index < len(self.probes):
                deadline = self._deadline(self.probes[index])

    def _accept_reach(self, header: dict[str, Any]) -> None:
        """A reach-in the worker's audit caught (``sandbox/audit.py``),
        kept, bounded. One an event showed while a probe ran (after the
        import) is charged to that probe and every later one of this
        worker, whose answers it could have changed (``reach_here``);
        the others (at import; a change the watch found in the grader's
        state, made at some earlier time) to every probe of the run."""
        what = header.get("what")
        if not isinstance(what, str) or \
                len(self.reach_ins) + len(self.reach_since) >= \
                audit.MAX_REPORTS:
            return
        what = what[:audit.MAX_WHAT]
        where = self.reach_since if self.imported and not \
            what.startswith(audit.STATE_CHANGED) else self.reach_ins
        if what not in where:
            where.append(what)

    def unattributed(self) -> list[str]:
        """The reach-ins no given result carries as its own: caught at
        import, in the grader's state, or after the last result (the
        probe they ran in failed): charged to every probe."""
        return self.reach_ins + self.reach_since[self.reach_given:]

    def _accept_shape(self, header: dict[str, Any], probe: Probe) -> None:
        """A shape record streamed while ``probe`` ran
        (``sandbox/shape_table.py``)."""
        try:
            self.table.accept(header)
        except TooManyRecords as exc:
            raise Failure(CRASH, f"the worker sent {exc} during probe "
                          f"{probe.id}") from None

    def _send_hidden(self, probe: Probe, deadline: float) -> None:
        """Answer the worker's request for the hidden probes, within the
        first one's deadline."""
        self.hidden_sent = True
        try:
            self.receiver.send(wire.encode_probes(self._hidden), deadline)
        except wire.TimedOut:
            raise Failure(TIMEOUT, self._timeout_message(probe)) from None
        except wire.Closed:
            raise self._death(probe) from None

    def _deadline(self, probe: Probe) -> float:
        # On the parent's clock: its own stalls are not the probe's time.
        return min(parent_clock.now() + probe.timeout, self.total_deadline)

    def _accept_jail(self, header: dict[str, Any]) -> None:
        pid = header.get("pid")
        if header.get("kind") != "jail" or not isinstance(pid, int) or \
                isinstance(pid, bool) or pid <= 0:
            raise Failure(ENVIRONMENT, "the worker did not start its jail")
        self.inmate = pid

    def _accept_jailed(self, header: dict[str, Any]) -> None:
        layers = header.get("layers")
        if header.get("kind") != "jailed" or not isinstance(layers, list) \
                or not set(map(str, layers)) <= set(jail.LAYERS):
            raise Failure(ENVIRONMENT, "the worker did not report its jail")
        self.layers = [str(layer) for layer in layers]
        refused = header.get("refused")
        if isinstance(refused, list):
            self.refused = [str(r)[:300] for r in refused[:10]]
        error = header.get("error")
        if error:
            raise Failure(ENVIRONMENT, f"the grader could not lock up the "
                          f"worker: {str(error)[:500]}")

    def _next_message(self, deadline: float, probe: Probe
                      ) -> tuple[dict[str, Any], list[torch.Tensor]]:
        self.frames += 1
        try:
            return self.receiver.receive(deadline)
        except wire.TimedOut:
            raise Failure(TIMEOUT, self._timeout_message(probe)) from None
        except wire.Closed:
            raise self._death(probe) from None
        except wire.TooLarge as exc:
            raise Failure(CRASH, f"the worker sent {exc} during probe "
                          f"{probe.id}") from None
        except wire.BadMessage as exc:
            raise Failure(CRASH, f"the worker sent a malformed message "
                          f"during probe {probe.id} ({exc})") from None

    def _during(self, probe: Probe) -> str:
        return f"probe {probe.id}" if self.imported else "import"

    def _timeout_message(self, probe: Probe) -> str:
        if parent_clock.now() >= self.total_deadline:
            return (f"the submission's total time limit of "
                    f"{self.total_seconds:g} s ran out during "
                    f"{self._during(probe)}")
        return (f"time limit of {probe.timeout:g} s exceeded during "
                f"{self._during(probe)} (an infinite loop?)")

    def _death(self, probe: Probe) -> Failure:
        """Classify why the worker closed its result pipe."""
        self.process.join(LIMITS.kill_grace_seconds)
        code = self.process.exitcode
        during = self._during(probe)
        if code is None:
            self.kill()
            return Failure(CRASH, f"the worker closed its result pipe "
                           f"during {during}")
        if scratch_verdict(self.workdir):
            return Failure(MEMORY, f"the submission's files grew past "
                           f"{LIMITS.scratch_bytes >> 20} MiB (or too many "
                           f"files) during {during}")
        if code >= 0:
            return Failure(CRASH, f"the submission exited (code {code}) "
                           f"during {during}")
        sig = -code
        # The cgroup's OOM count is shared by every worker (``--jobs``
        # runs several): it names this worker's death only when this
        # worker was killed (SIGKILL), never an exit or another signal.
        # Over its own limit an allocation fails (MemoryError, the
        # submission's); killed within it, the machine ran out: the
        # grader's failure, no score (the batch re-proves the canary).
        if sig == signal.SIGKILL and memlimit.oom_kills() > self.oom_kills:
            # (no probe named: the message reaches the student at once,
            # and a probe's id may name a hidden case)
            return Failure(ENVIRONMENT, f"the kernel's out-of-memory killer "
                           f"killed the worker while the "
                           f"submission stayed within its own limit of "
                           f"{self.memory_mb} MB: the grader's machine or "
                           f"container ran out of memory, not the "
                           f"submission; no score was written (give the "
                           f"grader more memory or fewer --jobs, and "
                           f"regrade)")
        if sig == signal.SIGKILL:
            return Failure(MEMORY, f"the worker was killed (SIGKILL) "
                           f"during {during}, most likely out of memory")
        if sig == signal.SIGXCPU:
            return Failure(TIMEOUT, f"CPU time limit exceeded during "
                           f"{during}")
        return Failure(CRASH, f"the worker died from signal "
                       f"{signal.Signals(sig).name} during {during}")

    def kill(self) -> None:
        """Kill the inmate (its PID namespace dies with it; without one,
        the keeper kills what it left), then the keeper and its group."""
        self.killed = True
        pid = self.process.pid
        if self.inmate is not None and pid is not None:
            if jail.parent_of(self.inmate) == pid:
                try:
                    os.kill(self.inmate, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            # Whether we killed the inmate or it had just ended, the keeper
            # is now killing what it left (without a PID namespace, a
            # subreaper's sweep): killing the keeper mid-sweep would hand
            # the rest to init, so let it finish first.
            self.process.join(LIMITS.kill_grace_seconds)
        if pid is not None:
            for kill in (lambda: os.killpg(pid, signal.SIGKILL),
                         lambda: os.kill(pid, signal.SIGKILL)):
                try:
                    kill()
                except (ProcessLookupError, PermissionError):
                    pass

    def close(self) -> str:
        """Kill leftovers, reap the worker; return the fd-level output it
        wrote after its last result (e.g. before it crashed)."""
        self.kill()
        self.process.join(LIMITS.kill_grace_seconds)
        self.receiver.close()
        try:
            self.process.close()
        except ValueError:
            pass
        return read_leftover(self.workdir, self.limit)
