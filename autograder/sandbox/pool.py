"""Run probes on untrusted student code in an isolated, limited worker.

The grading parent never executes student code. A warm fork server (the
``multiprocessing`` 'forkserver', preloaded with torch and the worker) forks
one worker process per submission, so torch's import is paid once. This
module holds the public API (``Sandbox``, ``run_probes``) and the fork
server; the rest lives along its seams:

- ``autograder/sandbox/wire.py``: the messages both ways and their bounds,
- ``autograder/sandbox/worker_jail.py``: the worker process (keeper and inmate)
  locking itself up (``autograder/sandbox/jail.py``) and running the probes,
- ``autograder/sandbox/supervisor.py``: the parent's side of a run (timeouts,
  failures, a fresh worker after one),
- ``autograder/sandbox/cpython_internals.py``: what is taken from CPython's
  private multiprocessing code, checked by a test.
"""
from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.forkserver
import os
import pwd
import shutil
import stat
import tempfile
import threading
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

from autograder.sandbox import cpython_internals, jail, parent_clock
from autograder.sandbox.limits import LIMITS
from autograder.sandbox.protocol import Probe, ProbeResult
from autograder.sandbox.supervisor import supervise
from autograder.sandbox.worker_jail import SCRATCH, WorkerSettings
from autograder.sandbox.worker_uids import WorkerUids

DEFAULT_USER = "autograder-worker"
GRADER_HOME = Path(__file__).resolve().parents[2]   # kit or source root


def _resolve_user() -> tuple[int, int] | None:
    """(uid, gid) to drop to, or None when not running as root."""
    if os.geteuid() != 0:
        return None
    name = os.environ.get("AUTOGRADER_WORKER_USER", DEFAULT_USER)
    for candidate in (name, "nobody"):
        try:
            entry = pwd.getpwnam(candidate)
            return entry.pw_uid, entry.pw_gid
        except KeyError:
            continue
    raise RuntimeError(f"no user {name!r} or 'nobody' to run workers as")


KIT_PACKAGES = ("autograder", "kit", "kinds")   # the kit's own, installed


def unreadable_home(home: Path = GRADER_HOME) -> list[str]:
    """What of the grader the worker must never read: the checkout (it
    holds the solution, the values and the outputs), or, for a grader
    installed among the Python installation's packages (``pip install``:
    ``home`` is site-packages, torch beside it), the kit's own packages
    (their corpora quote the reference's lines); the rest of
    site-packages stays readable. A course's homework folder is never
    bound (only the system's and Python's folders are)."""
    real = os.path.realpath(home)
    if any(os.path.realpath(path) == real for path in jail.python_paths()):
        return [str(home / name) for name in KIT_PACKAGES
                if (home / name).exists()]
    return [str(home)]


class Sandbox:
    """The warm fork server and the defaults for running submissions.

    Use as a context manager for batch grading; threads may call ``run``
    concurrently (one worker process per call).
    """

    def __init__(self, *, memory_mb: int = LIMITS.memory_mb,
                 output_limit: int = LIMITS.output_chars,
                 preload: bool = True, fork_server_from_here: bool = False,
                 namespaces: bool | None = None, landlock: bool = True):
        """``fork_server_from_here``: start the fork server by forking this
        process instead of a fresh interpreter, so that it shares this
        process's torch pages (about 150 MB less in all, what lets grading
        fit Gradescope's 768 MB). Only for a process that has run no torch
        operation yet and holds nothing secret: the server, and every
        worker, starts as a copy of this process (create the Sandbox before
        loading test values).

        ``namespaces`` and ``landlock`` turn jail layers off (tests that
        prove an attack is real without them; AUTOGRADER_NO_NAMESPACES=1
        where a machine refuses namespaces). The privilege drop as root
        and the limits always apply."""
        self.memory_mb, self.output_limit = memory_mb, output_limit
        self.context = multiprocessing.get_context("forkserver")
        self.start_lock = threading.Lock()
        self.user = _resolve_user()
        # As root, each running worker's own uid (the account's if free).
        # An account chosen by AUTOGRADER_WORKER_USER may have rights of its
        # own (the preflight's remedy for an unreadable Python): its
        # workers all run as it, as a spare uid could not read the same.
        self.uids = None if self.user is None else WorkerUids(
            self.user, range(0) if os.environ.get("AUTOGRADER_WORKER_USER")
            else range(*LIMITS.spare_uids))
        # The worker reads the Python installation, never the grader's
        # checkout (solution, values, other submissions' outputs).
        self.readable = jail.default_readable(exclude=unreadable_home())
        self.namespaces = not os.environ.get("AUTOGRADER_NO_NAMESPACES") \
            if namespaces is None else namespaces
        self.landlock = landlock
        self.total_seconds = LIMITS.total_seconds   # the rubric's, if set
        # Results the parent receives (and keeps until the submission is
        # judged) per submission, across all its workers: with --jobs
        # submissions at a time, what the parent may hold for all of them.
        self.results_mb = LIMITS.results_mb
        # Workers that may run at once (``grade --jobs``): they share what
        # the container's memory cgroup has left (memlimit).
        self.jobs = 1
        self.layers: list[str] = []    # the jail's layers, once a run told
        self.refused: list[str] = []   # layers that failed: "layer: call"
        self.fallback = ""   # why the preflight turned namespaces off
        if preload:
            self.context.set_forkserver_preload(
                ["torch", "autograder.sandbox.worker",
                 "autograder.sandbox.pool"])
        if fork_server_from_here:
            cpython_internals.fork_server_from_here()
        multiprocessing.forkserver.ensure_running()

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Stop the fork server (a later ``run`` would restart it)."""
        cpython_internals.stop_fork_server()

    def start(self, process: BaseProcess) -> None:
        """Start a worker; if the fork server died (it is a process like
        any other), start a new one and retry once."""
        with self.start_lock:
            try:
                process.start()
            except OSError:
                self.close()
                # A fresh interpreter, started with the minimal environment
                # only: it and its workers never hold the grader's secrets.
                from autograder.sandbox.cleanenv import KEEP
                saved = dict(os.environ)
                os.environ.clear()
                os.environ.update({k: saved[k] for k in KEEP if k in saved})
                try:
                    multiprocessing.forkserver.ensure_running()
                finally:
                    os.environ.update(saved)
                process.start()

    def run(self, source: str, filename: str, probes: list[Probe], *,
            memory_mb: int | None = None, output_limit: int | None = None,
            total_seconds: float | None = None) -> list[ProbeResult]:
        """One result per probe, in order; never raises because of what
        the submission does. ``total_seconds`` bounds the wall clock of all
        the probes together (default ``self.total_seconds``)."""
        with self._worker_user() as user:
            return self._run(source, filename, probes, user, memory_mb,
                             output_limit, total_seconds)

    def _worker_user(self) -> contextlib.AbstractContextManager:
        """The (uid, gid) one run's workers drop to: None when not root.
        A test may set ``user`` to another account: it is then used as
        is, shared by the runs."""
        if self.uids is None or self.user != self.uids.account:
            return contextlib.nullcontext(self.user)
        return self.uids.take()

    def _run(self, source: str, filename: str, probes: list[Probe],
             user: tuple[int, int] | None, memory_mb: int | None,
             output_limit: int | None, total_seconds: float | None
             ) -> list[ProbeResult]:
        settings = self._settings(probes, memory_mb, output_limit, user)
        limit = total_seconds or self.total_seconds
        try:
            results, layers, refused = supervise(
                self.start, source, filename, list(probes), settings,
                parent_clock.now() + limit, limit,
                results_bytes=self.results_mb << 20)
        finally:
            shutil.rmtree(settings.workdir, ignore_errors=True)
        if layers is not None:
            self.layers, self.refused = layers, refused
        return results

    def _settings(self, probes: list[Probe], memory_mb: int | None,
                  output_limit: int | None,
                  user: tuple[int, int] | None) -> WorkerSettings:
        # The keeper's files (output, staff log) in workdir; the inmate's
        # in its scratch subfolder, which the worker user owns: it may
        # pass through workdir (0711) but list or read nothing there.
        workdir = tempfile.mkdtemp(prefix="autograder-worker-")
        scratch = os.path.join(workdir, SCRATCH)
        os.mkdir(scratch, 0o700)
        uid = gid = None
        if user is not None:
            uid, gid = user
            os.chmod(workdir, 0o711)
            os.chown(scratch, uid, gid)
        return WorkerSettings.for_probes(
            probes, workdir, memory_mb=memory_mb or self.memory_mb,
            output_limit=output_limit or self.output_limit, jobs=self.jobs,
            uid=uid, gid=gid, own_uid=uid is not None and
            self.uids is not None and self.uids.holds(uid),
            readable=self.readable,
            namespaces=self.namespaces, landlock=self.landlock)


def exposed_to_others(path: Path) -> bool:
    """Whether a user with no special rights could read ``path``: the file
    is world-readable and every folder above it world-searchable. The worker
    user is such a user, so staff files must not be exposed when grading as
    root (the Gradescope setup locks them; a checkout usually is not)."""
    path = Path(path).resolve()
    try:
        if not path.stat().st_mode & stat.S_IROTH:
            return False
        return all(parent.stat().st_mode & stat.S_IXOTH
                   for parent in path.parents)
    except OSError:
        return False


_default: Sandbox | None = None
_default_lock = threading.Lock()


def default_sandbox() -> Sandbox:
    """The module-level Sandbox, created on first use."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Sandbox()
        return _default


def run_probes(source: str, filename: str, probes: list[Probe], *,
               memory_mb: int = LIMITS.memory_mb,
               output_limit: int = LIMITS.output_chars,
               total_seconds: float | None = None) -> list[ProbeResult]:
    """Run ``probes`` on the submission ``source`` in an isolated worker.

    Returns one ProbeResult per probe, in order, always: student behaviour
    (exceptions, exits, signals, hangs, memory hogs, floods of output,
    malformed messages) becomes a status, never an exception here.
    """
    return default_sandbox().run(source, filename, probes,
                                 memory_mb=memory_mb,
                                 output_limit=output_limit,
                                 total_seconds=total_seconds)
