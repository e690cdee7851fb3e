"""``check``'s plain child process: the student's code where the Linux
jail cannot run.

``check`` is a preview: a student runs their own code on their own
machine. The grader's jail (autograder/sandbox/jail.py) needs Linux's
namespaces or Landlock, seccomp, ``prctl``, ``/proc``, ``fork`` and
``resource``; macOS, Windows, WSL1 or a container may lack some. There
``check`` runs the same probes in a plain child process: the worker loop
of the jail's inmate (``worker_jail.serve_probes``), the same wire and the
same supervisor (per-probe and total time limits, a fresh child after a
failure), hence the same verdicts, without the jail's walls. Forked from
a fork server where the machine has ``fork``, spawned where it does not.

``grade`` and ``gradescope`` never come here: a score is written only
after a canary passed through the real jail (autograder/sandbox/preflight.py).
"""
from __future__ import annotations

import multiprocessing
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

from autograder.sandbox import jail, parent_clock, wire
from autograder.sandbox.limits import LIMITS
from autograder.sandbox.protocol import CRASH, Probe, ProbeResult
from autograder.sandbox.supervisor import Attempt, Failure, supervise
from autograder.sandbox.worker_jail import (KEEPER_LOG, OUTPUT_FILE, SCRATCH,
                                            WorkerSettings, _FdOutput,
                                            _with_note, serve_probes)

# The one line ``check`` prints when it used the plain child.
NOTE = ("note: your code ran in a plain child process, not the grader's "
        "Linux jail ({reason}): the same checks and time limits, the same "
        "verdicts")


def jail_missing() -> str:
    """Why the grader's jail cannot run on this machine ("" if it can):
    the first thing it needs that is missing, found by trying it, not by
    the platform's name."""
    if not hasattr(os, "fork"):
        return "this system has no fork (Windows)"
    for module in ("resource", "pwd"):
        try:
            __import__(module)
        except ImportError:
            return f"this Python has no {module} module"
    if not jail.kernel_calls():
        return "this system has no Linux prctl/unshare"
    for path in ("/proc/self/status", "/proc/self/fd"):
        if not os.path.exists(path):
            return f"this system has no {path}"
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return "this Python has no fork server"
    return ""


def start_method() -> str:
    """A fork server where the machine forks (torch is imported once), a
    fresh interpreter per child where it cannot (Windows)."""
    if hasattr(os, "fork") and \
            "forkserver" in multiprocessing.get_all_start_methods():
        return "forkserver"
    return "spawn"


class PlainSandbox:
    """The ``Sandbox`` interface (``run``, ``layers``, a context manager)
    with plain child processes. ``reason``: why the jail is not used."""

    plain = True

    def __init__(self, reason: str, *, memory_mb: int = LIMITS.memory_mb,
                 output_limit: int = LIMITS.output_chars):
        self.reason = reason
        self.memory_mb, self.output_limit = memory_mb, output_limit
        self.total_seconds = LIMITS.total_seconds
        self.results_mb = LIMITS.results_mb   # as the jailed sandbox's
        self.jobs = 1
        # What preflight and describe_jail read of a sandbox.
        self.layers: list[str] = []
        self.refused = [f"jail: {reason}"]
        self.fallback = ""
        self.namespaces = self.landlock = False
        self.user = None
        self.readable: list[str] = []
        self.method = start_method()
        self.context = multiprocessing.get_context(self.method)
        if self.method == "forkserver":
            self.context.set_forkserver_preload(
                ["torch", "autograder.sandbox.worker",
                 "autograder.sandbox.plain"])

    def __enter__(self) -> PlainSandbox:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Stop the fork server, if this sandbox used one."""
        if self.method == "forkserver":
            from autograder.sandbox.cpython_internals import \
                stop_fork_server
            stop_fork_server()

    def start(self, process: BaseProcess) -> None:
        """Start a child (``supervisor.Starter``)."""
        process.start()

    def run(self, source: str, filename: str, probes: list[Probe], *,
            memory_mb: int | None = None, output_limit: int | None = None,
            total_seconds: float | None = None) -> list[ProbeResult]:
        """One result per probe, in order, as ``Sandbox.run``."""
        limit = total_seconds or self.total_seconds
        if self.method == "spawn":
            # A child costs an interpreter and torch's import here: the
            # student's own check keeps one (``Probe.process`` keeps a
            # grade's compared calls apart, which only the grader needs).
            probes = [replace(p, process=0) for p in probes]
        settings = self._settings(probes, memory_mb, output_limit)
        context = self.context

        def attempt(*args: Any) -> PlainAttempt:
            return PlainAttempt(*args, context=context)

        try:
            results, _, _ = supervise(
                self.start, source, filename, list(probes), settings,
                parent_clock.now() + limit, limit,
                results_bytes=self.results_mb << 20, attempt=attempt)
        finally:
            shutil.rmtree(settings.workdir, ignore_errors=True)
        return results

    def _settings(self, probes: list[Probe], memory_mb: int | None,
                  output_limit: int | None) -> WorkerSettings:
        workdir = tempfile.mkdtemp(prefix="autograder-check-")
        os.mkdir(os.path.join(workdir, SCRATCH), 0o700)
        return WorkerSettings.for_probes(
            probes, workdir, memory_mb=memory_mb or self.memory_mb,
            output_limit=output_limit or self.output_limit, jobs=self.jobs,
            namespaces=False, landlock=False)


class PlainAttempt(Attempt):
    """One plain child answering a run of probes (``supervisor.Attempt``
    with another process, and a kill that needs no /proc or SIGKILL)."""

    def __init__(self, *args: Any, context: Any):
        self.context = context
        super().__init__(*args)

    def new_process(self, args: tuple) -> BaseProcess:
        return self.context.Process(target=plain_main, args=args,
                                    name="autograder-check", daemon=True)

    def kill(self) -> None:
        """Kill the child and, where there are process groups, what it
        started (it leads its own)."""
        self.killed = True
        pid = self.process.pid
        if pid is None:
            return
        if hasattr(os, "killpg") and hasattr(signal, "SIGKILL"):
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            self.process.kill()   # TerminateProcess on Windows
        except (OSError, ValueError):
            pass

    def _death(self, probe: Probe) -> Failure:
        if hasattr(signal, "SIGKILL"):
            return super()._death(probe)
        # Windows: no signals to classify, only an exit code.
        self.process.join(LIMITS.kill_grace_seconds)
        code = self.process.exitcode
        if code is None:
            self.kill()
            return Failure(CRASH, f"the worker closed its result pipe "
                           f"during {self._during(probe)}")
        return Failure(CRASH, f"the submission exited (code {code}) during "
                       f"{self._during(probe)}")


class _Output(_FdOutput):
    """The inmate's fd-level output capture, read without ``pread``
    (Windows has none)."""

    def take(self) -> str:
        try:
            size = os.fstat(self.reader).st_size
            os.lseek(self.reader, 0, os.SEEK_SET)
            data = os.read(self.reader, self.limit) if size else b""
            os.ftruncate(self.reader_truncate, 0)
        except OSError:   # the submission closed or replaced its fds
            return ""
        return _with_note(data.decode(errors="replace"), size - len(data),
                          "bytes")


def plain_main(source: str, filename: str, encoded: bytes,
               results: Connection, settings: WorkerSettings) -> None:
    """Entry point of the plain child: run the submission's probes as the
    jail's inmate does, with the limits this machine offers."""
    import torch

    me = os.getpid()

    def send(header: dict, tensors: list = ()) -> None:
        if os.getpid() != me:    # a process the submission forked
            os._exit(0)
        wire.send(results, header, tensors)

    if hasattr(os, "setsid"):
        os.setsid()   # its own group: the parent kills what it starts
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    # Until the submission runs, what this process prints is the
    # grader's (the staff log the supervisor reads), never the student's.
    log = os.open(os.path.join(settings.workdir, KEEPER_LOG),
                  os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    output = _Output(os.path.join(settings.workdir, OUTPUT_FILE),
                     settings.output_limit)
    os.chdir(settings.scratch)
    os.environ.update(TMPDIR=settings.scratch, OMP_NUM_THREADS="1")
    tempfile.tempdir = settings.scratch
    torch.set_num_threads(1)
    refused = _set_limits(settings)
    send({"kind": "jail", "pid": me})
    send({"kind": "jailed", "layers": [], "refused": refused})
    output.attach()
    serve_probes(source, filename, encoded, results, output,
                 settings.output_limit, send)
    sys.stdout.flush()
    os._exit(0)


def _set_limits(settings: WorkerSettings) -> list[str]:
    """The jailed inmate's resource limits, each where the machine has it;
    the ones it does not, named."""
    try:
        import resource
    except ImportError:
        return ["limits: this system has no resource limits (the time "
                "limits still hold)"]
    wanted = {"RLIMIT_CPU": settings.cpu_seconds,
              "RLIMIT_FSIZE": LIMITS.file_bytes, "RLIMIT_CORE": 0}
    try:
        from autograder.sandbox.worker_jail import _vm_size_bytes
        wanted["RLIMIT_AS"] = _vm_size_bytes() + \
            settings.memory_mb * 1024 * 1024
    except OSError:   # no /proc: no address-space limit
        pass
    missing = []
    for name, value in wanted.items():
        which = getattr(resource, name, None)
        try:
            _, hard = resource.getrlimit(which)
            if hard != resource.RLIM_INFINITY:
                value = min(value, hard)
            resource.setrlimit(which, (value, hard))
        except (TypeError, ValueError, OSError):
            missing.append(name)
    if hasattr(signal, "SIGXFSZ"):
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    return [f"limits: {name} refused here" for name in missing]


class PlainUnavailable(Exception):
    """Even the plain child cannot run a known-correct module here; the
    message is in a student's words (cause, remedy: no staff command).
    ``batch.check_file`` reports it as a usage error (exit status 2): the
    sandbox never imports the batch engine above it."""


@contextmanager
def for_check(sandbox: Any) -> Iterator[Any]:
    """The sandbox ``check`` grades in, its canary passed: ``sandbox``
    (jailed, or already plain), or, where the jailed canary fails, a plain
    one. Prints the one line saying so; raises :class:`PlainUnavailable`
    when even the plain child cannot run a known-correct module."""
    from autograder.sandbox.preflight import (PreflightError,
                                              remembered_preflight)
    if not getattr(sandbox, "plain", False):
        try:
            remembered_preflight(sandbox)
        except PreflightError:
            pass
        else:
            yield sandbox
            return
        reason = "the jail could not start here"
        with PlainSandbox(reason) as fallback:
            with for_check(fallback) as used:
                yield used
        return
    try:
        remembered_preflight(sandbox)
    except PreflightError as exc:
        raise PlainUnavailable(student_error(exc.cause or str(exc),
                                             str(exc))) from None
    print(NOTE.format(reason=sandbox.reason), file=sys.stderr, flush=True)
    yield sandbox


def this_python() -> str:
    """This interpreter as a student's remedy names it (quoted if it has a
    space): their own Python, not a bare ``python`` that may be another."""
    return f'"{sys.executable}"' if " " in sys.executable \
        else sys.executable


def student_error(cause: str, details: str = "") -> str:
    """Why ``check`` cannot run at all, in a student's words: the cause
    and what the student can do on their own machine (``details``: the
    preflight's whole message, searched for a missing package)."""
    import re
    missing = re.search(r"No module named '([\w.]+)'", f"{cause}\n{details}")
    if missing:
        package = missing.group(1).split(".")[0]
        cause = f"{cause.strip()} (No module named {missing.group(1)!r})"
        remedy = (f"install the package {package!r} into this Python: "
                  f"{this_python()} -m pip install {package}")
    else:
        remedy = ("reinstall the homework's environment (`make install`, "
                  "see README.md); if it persists, ask on the course forum "
                  "with this message")
    return ("the check cannot run on this machine: a known-correct canary "
            "module failed before your code ran, so nothing was graded.\n"
            f"  cause: {cause.strip()[:800]}\n  remedy: {remedy}")


def check_failed(internal_error: str = "") -> str:
    """Why ``check`` gave no preview when the grader's own code failed
    after its canary passed, in a student's words: the machine's cause
    where one was named (never a traceback, never a staff remedy)."""
    cause = ""
    if internal_error.startswith("the grader's environment failed"):
        # its first line, without the staff's remedy in parentheses
        cause = internal_error.splitlines()[0].split(" (")[0][:400]
    remedy = ("close other programs to free memory, then run it again"
              if "out-of-memory" in cause else
              "run it again (the next run first proves the check works "
              "here); if it fails again, reinstall the homework's "
              "environment (`make install`, see README.md) or ask on the "
              "course forum with this message")
    return ("the check itself failed while grading your file: this is not "
            "your code's fault, and it is no score.\n"
            + (f"  cause: {cause}\n" if cause else "")
            + f"  remedy: {remedy}")


__all__ = ["NOTE", "check_failed", "PlainAttempt", "PlainSandbox",
           "PlainUnavailable", "for_check",
           "jail_missing", "plain_main", "start_method", "student_error"]
