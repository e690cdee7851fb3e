"""Run probes on untrusted student code in an isolated, limited worker.

The grading parent never executes student code. A warm fork server (the
``multiprocessing`` 'forkserver', preloaded with torch and the worker) forks
one worker process per submission, so torch's import is paid once. The
worker, before it runs any student code:

- starts a new session (the parent kills its whole process group),
- sets resource limits (address space, processes, file size, CPU, cores),
- reads stdin from /dev/null, writes stdout/stderr to a file in a fresh
  temporary working directory (read back and truncated after every probe,
  so a flood of output costs neither the parent nor the pipe), and sees a
  scrubbed environment,
- when started as root, drops to an unprivileged user
  (``$AUTOGRADER_WORKER_USER``, default ``autograder-worker``, else
  ``nobody``).

Results stream back one probe at a time as length-prefixed messages: a JSON
header plus safetensors bytes. The parent never unpickles or evaluates
anything the worker sends; it caps and validates every message. It enforces
each probe's timeout, and on a timeout, crash or memory failure kills the
worker, reports that probe and starts a fresh worker for the rest.
"""
from __future__ import annotations

import ctypes
import io
import json
import multiprocessing
import multiprocessing.forkserver
import multiprocessing.popen_forkserver
import multiprocessing.util
import os
import pickle
import pwd
import resource
import select
import shutil
import signal
import socket
import stat
import struct
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any


import torch
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from multiprocessing import connection, forkserver, resource_tracker, spawn
from multiprocessing.context import ForkServerProcess
from autograder import jail
from autograder.protocol import (CRASH, ENVIRONMENT, ERROR, IMPORT_ERROR,
                                 MEMORY, NOT_RUN, OK, TIMEOUT, Probe,
                                 ProbeResult)

MAX_MESSAGE_BYTES = 64 * 1024 * 1024
# Bounds on what a (possibly forged) frame may make the parent build: the
# JSON header's size, tensors per result, shape entries per result.
MAX_HEADER_BYTES = 1024 * 1024
MAX_OUTPUTS = 64
MAX_SHAPE_INTS = 200_000
MAX_TEXT_CHARS = 200_000
MAX_RETAINED_BYTES = 512 * 1024 * 1024   # all frames of one worker
_LENGTH = struct.Struct(">Q")        # frame: 8-byte length, then payload
_HEADER_LENGTH = struct.Struct(">I")  # payload: header length, JSON, tensors
_STATUSES = {OK, ERROR, TIMEOUT, MEMORY, CRASH, IMPORT_ERROR, NOT_RUN}
# (ENVIRONMENT is the parent's verdict only: a worker cannot claim it)
_EXTRA_PROCESSES = 64    # RLIMIT_NPROC headroom over the user's processes
_FILE_LIMIT = 64 * 1024 * 1024
_KILL_GRACE = 5.0        # seconds to wait for a killed worker to be reaped
DEFAULT_USER = "autograder-worker"
GRADER_HOME = Path(__file__).resolve().parent.parent   # kit or source root


# --------------------------------------------------------------------------
# Wire format (both directions)

def encode_probes(probes: list[Probe]) -> bytes:
    """Probes as bytes for the worker: plain fields pickled, tensors as
    safetensors. (Pickling tensors directly would route them through
    torch's shared-memory reductions, giving the worker write access to the
    parent's tensors.)"""
    tensors: dict[str, torch.Tensor] = {}
    shared: dict[int, str] = {}   # a tensor in several probes goes once
    metas = []
    for i, probe in enumerate(probes):
        meta = {f.name: getattr(probe, f.name) for f in fields(Probe)}
        state_keys = {}
        for key, value in probe.state.items():
            name = shared.setdefault(id(value), f"{i}/state/{key}")
            tensors[name] = value
            state_keys[key] = name
        for j, value in enumerate(probe.args):
            tensors[f"{i}/arg/{j}"] = value
        kwargs = {}
        for key, value in probe.kwargs.items():
            if isinstance(value, torch.Tensor):
                tensors[f"{i}/kw/{key}"] = value
            else:
                kwargs[key] = value
        meta.update(state=state_keys, args=len(probe.args),
                    kwargs=kwargs, tensor_kwargs=[
                        k for k, v in probe.kwargs.items()
                        if isinstance(v, torch.Tensor)])
        metas.append(meta)
    blob = st_save({k: v.detach().cpu().contiguous().clone()
                    for k, v in tensors.items()})
    return pickle.dumps((metas, blob))


def decode_probes(data: bytes) -> list[Probe]:
    """Inverse of ``encode_probes`` (runs in the worker; the data comes
    from the trusted parent)."""
    metas, blob = pickle.loads(data)
    tensors = st_load(blob)
    probes = []
    for i, meta in enumerate(metas):
        meta = dict(meta)
        meta["state"] = {k: tensors[name]
                         for k, name in meta["state"].items()}
        meta["args"] = [tensors[f"{i}/arg/{j}"] for j in range(meta["args"])]
        for key in meta.pop("tensor_kwargs"):
            meta["kwargs"][key] = tensors[f"{i}/kw/{key}"]
        probes.append(Probe(**meta))
    return probes


def encode_message(header: dict[str, Any],
                   tensors: list[torch.Tensor] = ()) -> bytes:
    """One frame: length, header length, JSON header, safetensors bytes."""
    head = json.dumps(header).encode()
    body = st_save({str(i): t for i, t in enumerate(tensors)}) \
        if tensors else b""
    payload = _HEADER_LENGTH.pack(len(head)) + head + body
    return _LENGTH.pack(len(payload)) + payload


class BadMessage(Exception):
    """The worker sent something that is not a valid message."""


def decode_payload(payload: bytes) -> tuple[dict[str, Any],
                                            list[torch.Tensor]]:
    """Header and tensors of one frame's payload; raises BadMessage."""
    try:
        (size,) = _HEADER_LENGTH.unpack_from(payload)
        if size > MAX_HEADER_BYTES or size > len(payload) - 4:
            raise BadMessage(f"header of {size} bytes")
        header = json.loads(payload[4:4 + size].decode())
        body = payload[4 + size:]
        if not isinstance(header, dict):
            raise BadMessage("header is not an object")
        n = header.get("n_outputs", 0)
        if not isinstance(n, int) or n < 0 or n > MAX_OUTPUTS:
            raise BadMessage("bad n_outputs")
        tensors = st_load(body) if body else {}
        if set(tensors) != {str(i) for i in range(n)}:
            raise BadMessage("tensor keys do not match n_outputs")
        outputs = [tensors[str(i)] for i in range(n)]
        if any(t.dtype != torch.float32 for t in outputs):
            raise BadMessage("outputs must be float32")
        return header, outputs
    except BadMessage:
        raise
    except Exception as exc:   # noqa: BLE001 - any decoding failure
        raise BadMessage(f"{type(exc).__name__}: {exc}") from None


def result_to_message(result: ProbeResult) -> bytes:
    """A worker-side ProbeResult as one frame."""
    header = {"kind": "result", "id": result.id, "status": result.status,
              "message": result.message, "output_kind": result.output_kind,
              "attributes": result.attributes,
              "shapes": {str(k): v for k, v in result.shapes.items()},
              "stdout": result.stdout, "seconds": result.seconds,
              "phase": result.phase, "exception": result.exception,
              "line": result.line, "n_outputs": len(result.outputs)}
    return encode_message(header, result.outputs)


def result_from_header(header: dict[str, Any], outputs: list[torch.Tensor],
                       expected_id: str) -> ProbeResult:
    """Validate a result header from the worker; raises BadMessage."""
    def want(key: str, kinds: Any, default: Any = "") -> Any:
        value = header.get(key, default)
        if not isinstance(value, kinds) or isinstance(value, bool) and \
                kinds in (int, float, (int, float)):
            raise BadMessage(f"field {key!r} has the wrong type")
        if isinstance(value, str) and len(value) > MAX_TEXT_CHARS:
            value = value[:MAX_TEXT_CHARS] + "\n[... cut]"
        return value

    if header.get("id") != expected_id:
        raise BadMessage(f"expected the result of probe {expected_id!r}")
    status = want("status", str)
    if status not in _STATUSES:
        raise BadMessage(f"unknown status {status!r}")
    line = header.get("line")
    if line is not None and (not isinstance(line, int)
                             or isinstance(line, bool)):
        raise BadMessage("field 'line' has the wrong type")
    return ProbeResult(
        id=expected_id, status=status, message=want("message", str),
        outputs=outputs if status == OK else [],
        output_kind=want("output_kind", str),
        attributes=want("attributes", dict, {}),
        shapes=_valid_shapes(want("shapes", dict, {})),
        stdout=want("stdout", str),
        seconds=float(want("seconds", (int, float), 0.0)),
        phase=want("phase", str), exception=want("exception", str),
        line=line)


def _valid_shapes(raw: dict[str, Any]) -> dict[int, list[list[list[int]]]]:
    shapes = {}
    budget = MAX_SHAPE_INTS
    for key, entries in raw.items():
        budget -= 1 + sum(1 + len(shape) for entry in entries
                          if isinstance(entry, list) for shape in entry
                          if isinstance(shape, list)) \
            if isinstance(entries, list) else 1
        if budget < 0:
            raise BadMessage("too many shapes")
        ok = key.isdigit() and isinstance(entries, list) and all(
            isinstance(entry, list) and all(
                isinstance(shape, list) and all(
                    isinstance(d, int) and not isinstance(d, bool)
                    for d in shape) for shape in entry) for entry in entries)
        if not ok:
            raise BadMessage("malformed shapes")
        shapes[int(key)] = entries
    return shapes


# --------------------------------------------------------------------------
# The worker process

@dataclass
class WorkerSettings:
    """What the parent decided about the worker's environment."""

    memory_mb: int
    output_limit: int
    cpu_seconds: int
    workdir: str
    uid: int | None = None    # drop to this uid/gid when not None
    gid: int | None = None
    readable: list[str] = field(default_factory=list)   # what it may read
    namespaces: bool = True   # try the namespace layers of the jail
    landlock: bool = True     # try Landlock


class _CappedStream(io.TextIOBase):
    """sys.stdout/sys.stderr replacement: keeps the first ``limit``
    characters of a probe's output and counts the rest (a submission that
    prints 100 MB costs only its own formatting time)."""

    def __init__(self, limit: int, fileno: int):
        super().__init__()
        self.limit, self._fileno = limit, fileno
        self.parts: list[str] = []
        self.kept = self.dropped = 0

    def write(self, text: str) -> int:
        text = str(text)
        room = self.limit - self.kept
        if room > 0:
            self.parts.append(text[:room])
            self.kept += min(room, len(text))
        self.dropped += max(0, len(text) - max(room, 0))
        return len(text)

    def fileno(self) -> int:
        return self._fileno

    def isatty(self) -> bool:
        return False

    @property
    def encoding(self) -> str:
        return "utf-8"

    def take(self) -> str:
        """The output so far (with a truncation note) and a fresh start."""
        text = _with_note("".join(self.parts), self.dropped, "characters")
        self.parts, self.kept, self.dropped = [], 0, 0
        return text


def _count_processes(uid: int) -> int:
    count = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                count += os.stat(f"/proc/{entry}").st_uid == uid
            except OSError:
                pass
    return count


def _vm_size_bytes() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def _set_limits(settings: WorkerSettings) -> None:
    memory = _vm_size_bytes() + settings.memory_mb * 1024 * 1024
    uid = settings.uid if settings.uid is not None else os.getuid()
    nproc = _count_processes(uid) + _EXTRA_PROCESSES
    limits = {resource.RLIMIT_AS: memory, resource.RLIMIT_NPROC: nproc,
              resource.RLIMIT_FSIZE: _FILE_LIMIT, resource.RLIMIT_CORE: 0,
              resource.RLIMIT_CPU: settings.cpu_seconds}
    for which, value in limits.items():
        _, hard = resource.getrlimit(which)
        if hard != resource.RLIM_INFINITY:
            value = min(value, hard)
        hard_value = value + 5 if which == resource.RLIMIT_CPU else value
        if hard != resource.RLIM_INFINITY:
            hard_value = min(hard_value, hard)
        resource.setrlimit(which, (value, hard_value))
    # Over the file-size limit, writes fail (EFBIG) instead of killing us.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    # Processes the submission forks are reaped at once: no zombies
    # holding RLIMIT_NPROC slots of the worker user.
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)


OUTPUT_FILE = ".autograder-output"


class _FdOutput:
    """fd-level stdout/stderr (C code, os.write, subprocesses) go to a
    file; after each probe the worker reads what is new and empties it."""

    def __init__(self, path: str, limit: int):
        self.limit = limit
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND
        writer = os.open(path, flags, 0o600)
        self.reader = os.open(path, os.O_RDONLY)
        os.dup2(writer, 1)
        os.dup2(writer, 2)
        self.reader_truncate = writer   # kept: fd 1 may get closed

    def take(self) -> str:
        """What was written since the last call (truncated), then empty."""
        try:
            size = os.fstat(self.reader).st_size
            data = os.pread(self.reader, self.limit, 0) if size else b""
            os.ftruncate(self.reader_truncate, 0)
        except OSError:   # the submission closed or replaced its fds
            return ""
        return _with_note(data.decode(errors="replace"), size - len(data),
                          "bytes")


def _with_note(text: str, dropped: int, unit: str) -> str:
    if dropped > 0:
        text += f"\n[... {dropped} more {unit} of output cut]"
    return text


def _close_fds(keep: set[int]) -> None:
    """Close every fd but ``keep``: the fork server hands its children the
    write end of its liveness pipe and the resource tracker's pipe, and
    student code writing there could stop the server or make the (root)
    tracker unlink shared memory."""
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass   # the fd of the listdir itself


def _isolate(settings: WorkerSettings, result_fd: int) -> _FdOutput:
    """The keeper's part: its own session, stdin from /dev/null, output to
    a file, no inherited descriptor, a scrubbed environment."""
    os.setsid()
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    output = _FdOutput(os.path.join(settings.workdir, OUTPUT_FILE),
                       settings.output_limit)
    _close_fds({0, 1, 2, result_fd, output.reader, output.reader_truncate})
    os.chdir(settings.workdir)
    home = settings.workdir
    os.environ.clear()   # secrets in the grader's environment stay there
    os.environ.update(PATH="/usr/local/bin:/usr/bin:/bin", HOME=home,
                      TMPDIR=home, LANG="C.UTF-8", OMP_NUM_THREADS="1")
    tempfile.tempdir = home
    # Forking from this process later is safe only if no parallel torch op
    # has started an OpenMP pool; one thread also keeps memory modest.
    torch.set_num_threads(1)
    # torch reads /proc/cpuinfo on first use; the inmate has no /proc.
    torch.backends.cpu.get_cpu_capability()
    return output


def _lock_up(settings: WorkerSettings, plan: jail.JailPlan) -> None:
    """The inmate's part, before any student code: limits, its own view of
    the filesystem, no privilege, Landlock."""
    _set_limits(settings)
    if "mount-namespace" in plan.active:
        jail.build_root(plan)
    jail.drop_privileges(plan)
    if settings.landlock:
        jail.apply_landlock(plan, plan.readable)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _worker_main(source: str, filename: str, encoded: bytes,
                 results: Any, settings: WorkerSettings) -> None:
    """Entry point of the worker process (runs in the forked child): the
    keeper. It enters the jail's namespaces, forks the inmate that runs the
    submission, tells the parent the inmate's pid, and when the inmate ends
    kills whatever it left and exits with its status."""
    result_fd = results.fileno()
    output = _isolate(settings, result_fd)
    plan = jail.JailPlan(workdir=settings.workdir,
                         readable=settings.readable, uid=settings.uid,
                         gid=settings.gid, namespaces=settings.namespaces)
    jail.enter_namespaces(plan)
    if "pid-namespace" not in plan.active and jail.become_subreaper():
        plan.active.append("subreaper")
    go_r, go_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(go_w)
        try:
            jail.die_with_parent()
            os.read(go_r, 1)    # the parent knows our pid: go
            os.close(go_r)
            _inmate_main(source, filename, encoded, result_fd, output,
                         settings, plan)
        finally:
            os._exit(1)
    os.close(go_r)
    signal.signal(signal.SIGTERM, lambda *_: os.kill(pid, signal.SIGKILL))
    _write_all(result_fd, encode_message({"kind": "jail", "pid": pid}))
    os.write(go_w, b"x")
    os.close(go_w)
    status = jail.wait_status(pid)
    if "pid-namespace" not in plan.active:
        jail.kill_children()
    if status < 0:   # report the inmate's death as our own
        signal.signal(-status, signal.SIG_DFL)
        os.kill(os.getpid(), -status)
    os._exit(status if status >= 0 else 1)


def _inmate_main(source: str, filename: str, encoded: bytes, result_fd: int,
                 output: _FdOutput, settings: WorkerSettings,
                 plan: jail.JailPlan) -> None:
    """Runs the submission, locked up (see ``_lock_up``)."""
    from autograder.worker import execute_probes

    me = os.getpid()

    def send(data: bytes) -> None:
        if os.getpid() != me:    # a process the submission forked
            os._exit(0)
        _write_all(result_fd, data)

    try:
        os.setsid()   # its own group: kill(0) reaches only the submission
        _lock_up(settings, plan)
    except Exception as exc:   # noqa: BLE001 - the grader's failure
        send(encode_message({"kind": "jailed", "layers": plan.active,
                             "error": f"{type(exc).__name__}: {exc}"}))
        os._exit(1)
    send(encode_message({"kind": "jailed", "layers": plan.active}))
    probes = decode_probes(encoded)
    stream = _CappedStream(settings.output_limit, 1)
    sys.stdout = sys.stderr = stream

    def ready() -> None:
        send(encode_message({"kind": "ready"}))

    for result in execute_probes(source, filename, probes, on_import=ready):
        result.stdout = stream.take() + output.take()
        send(result_to_message(result))
    os._exit(0)


# --------------------------------------------------------------------------
# The parent side

class _Popen(multiprocessing.popen_forkserver.Popen):
    """The forkserver Popen without re-running the parent's ``__main__``
    in the worker: multiprocessing would re-execute the grader's main
    script (e.g. ``python grade.py``, ``python -m kit.bench``) in every
    child, which is slow, and breaks scripts without a main guard.
    (Mirrors ``popen_forkserver.Popen._launch`` of CPython 3.8-3.12.)"""

    def _launch(self, process_obj: Any) -> None:
        prep_data = spawn.get_preparation_data(process_obj._name)
        prep_data.pop("init_main_from_path", None)
        prep_data.pop("init_main_from_name", None)
        buf = io.BytesIO()
        multiprocessing.context.set_spawning_popen(self)
        try:
            multiprocessing.reduction.dump(prep_data, buf)
            multiprocessing.reduction.dump(process_obj, buf)
        finally:
            multiprocessing.context.set_spawning_popen(None)
        self.sentinel, w = forkserver.connect_to_new_process(self._fds)
        _parent_w = os.dup(w)
        self.finalizer = multiprocessing.util.Finalize(
            self, multiprocessing.util.close_fds, (_parent_w, self.sentinel))
        with open(w, "wb", closefd=True) as f:
            f.write(buf.getbuffer())
        self.pid = forkserver.read_signed(self.sentinel)


class _WorkerProcess(ForkServerProcess):
    @staticmethod
    def _Popen(process_obj: Any) -> _Popen:
        return _Popen(process_obj)


def _read_leftover(path: str, limit: int) -> str:
    try:
        # O_NOFOLLOW: the submission may have replaced the file by a link.
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return ""
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return ""
        size = os.fstat(fd).st_size
        data = os.pread(fd, limit, 0)
    finally:
        os.close(fd)
    return _with_note(data.decode(errors="replace"), size - len(data),
                      "bytes")


class _Failure(Exception):
    """The worker failed while ``probe`` was pending."""

    def __init__(self, status: str, message: str):
        super().__init__(message)
        self.status, self.message = status, message


class _Attempt:
    """One worker process answering a run of probes."""

    def __init__(self, sandbox: Sandbox, source: str, filename: str,
                 probes: list[Probe], settings: WorkerSettings,
                 deadline: float, limit: float):
        self.probes = probes
        self.total_deadline, self.total_seconds = deadline, limit
        self.imported = False
        self.killed = False
        ctx = sandbox.context
        self.workdir, self.limit = settings.workdir, settings.output_limit
        results_r, results_w = ctx.Pipe(duplex=False)
        self.process = _WorkerProcess(
            target=_worker_main, name="autograder-worker", daemon=True,
            args=(source, filename, encode_probes(probes), results_w,
                  settings))
        sandbox.start(self.process)
        results_w.close()
        self.fd = os.dup(results_r.fileno())
        results_r.close()
        self.buffer = bytearray()
        self.frames = 0
        self.received = 0
        self.inmate: int | None = None     # the process running student code
        self.layers: list[str] | None = None

    def results(self):
        """Yield ProbeResults in order; raise _Failure when the worker
        fails, for the next pending probe."""
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
            elif kind == "result":
                try:
                    result = result_from_header(header, outputs, probe.id)
                except BadMessage as exc:
                    raise _Failure(CRASH, f"the worker sent a malformed "
                                   f"result for probe {probe.id} ({exc})")
                if result.status != IMPORT_ERROR and \
                        result.phase != "import":
                    self.imported = True
                yield result
                index += 1
            else:
                raise _Failure(CRASH, "the worker sent an unexpected "
                               f"message before probe {probe.id}")
            if index < len(self.probes):
                deadline = self._deadline(self.probes[index])

    def _deadline(self, probe: Probe) -> float:
        return min(time.monotonic() + probe.timeout, self.total_deadline)

    def _accept_jail(self, header: dict[str, Any]) -> None:
        pid = header.get("pid")
        if header.get("kind") != "jail" or not isinstance(pid, int) or \
                isinstance(pid, bool) or pid <= 0:
            raise _Failure(ENVIRONMENT, "the worker did not start its jail")
        self.inmate = pid

    def _accept_jailed(self, header: dict[str, Any]) -> None:
        layers = header.get("layers")
        if header.get("kind") != "jailed" or not isinstance(layers, list) \
                or not set(map(str, layers)) <= set(jail.LAYERS):
            raise _Failure(ENVIRONMENT, "the worker did not report its jail")
        self.layers = [str(layer) for layer in layers]
        error = header.get("error")
        if error:
            raise _Failure(ENVIRONMENT, f"the grader could not lock up the "
                           f"worker: {str(error)[:500]}")

    def _next_message(self, deadline: float, probe: Probe):
        self.frames += 1
        while True:
            if len(self.buffer) >= _LENGTH.size:
                (size,) = _LENGTH.unpack_from(self.buffer)
                if size > MAX_MESSAGE_BYTES:
                    raise _Failure(CRASH, f"the worker sent an oversized "
                                   f"message ({size} bytes) during probe "
                                   f"{probe.id}")
                end = _LENGTH.size + size
                if len(self.buffer) >= end:
                    payload = bytes(self.buffer[_LENGTH.size:end])
                    del self.buffer[:end]
                    try:
                        return decode_payload(payload)
                    except BadMessage as exc:
                        raise _Failure(CRASH, f"the worker sent a malformed "
                                       f"message during probe {probe.id} "
                                       f"({exc})") from None
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise _Failure(TIMEOUT, self._timeout_message(probe))
            ready, _, _ = select.select([self.fd], [], [], remaining)
            if not ready:
                continue
            chunk = os.read(self.fd, 1 << 20)
            if not chunk:
                raise self._death(probe)
            self.received += len(chunk)
            if self.received > MAX_RETAINED_BYTES:
                raise _Failure(CRASH, f"the worker sent more than "
                               f"{MAX_RETAINED_BYTES >> 20} MB of results")
            self.buffer += chunk

    def _during(self, probe: Probe) -> str:
        return f"probe {probe.id}" if self.imported else "import"

    def _timeout_message(self, probe: Probe) -> str:
        if time.monotonic() >= self.total_deadline:
            return (f"the submission's total time limit of "
                    f"{self.total_seconds:g} s ran out during "
                    f"{self._during(probe)}")
        return (f"time limit of {probe.timeout:g} s exceeded during "
                f"{self._during(probe)} (an infinite loop?)")

    def _death(self, probe: Probe) -> _Failure:
        """Classify why the worker closed its result pipe."""
        self.process.join(_KILL_GRACE)
        code = self.process.exitcode
        during = self._during(probe)
        if code is None:
            self.kill()
            return _Failure(CRASH, f"the worker closed its result pipe "
                            f"during {during}")
        if code >= 0:
            return _Failure(CRASH, f"the submission exited (code {code}) "
                            f"during {during}")
        sig = -code
        if sig == signal.SIGKILL:
            return _Failure(MEMORY, f"the worker was killed (SIGKILL) "
                            f"during {during}, most likely out of memory")
        if sig == signal.SIGXCPU:
            return _Failure(TIMEOUT, f"CPU time limit exceeded during "
                            f"{during}")
        return _Failure(CRASH, f"the worker died from signal "
                        f"{signal.Signals(sig).name} during {during}")

    def kill(self) -> None:
        """Kill the inmate (its PID namespace dies with it; without one,
        the keeper kills what it left), then the keeper and its group."""
        self.killed = True
        pid = self.process.pid
        if self.inmate is not None and pid is not None and \
                jail.parent_of(self.inmate) == pid:
            try:
                os.kill(self.inmate, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            self.process.join(_KILL_GRACE)
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
        self.process.join(_KILL_GRACE)
        os.close(self.fd)
        try:
            self.process.close()
        except ValueError:
            pass
        return _read_leftover(os.path.join(self.workdir, OUTPUT_FILE),
                              self.limit)


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


def _fork_server_from_here(server: Any) -> None:
    """Start multiprocessing's fork server as a fork of this process.

    The same steps as ``ForkServer.ensure_running`` (a listening socket and
    an "alive" pipe the server watches), but the server is ``os.fork()``-ed
    rather than exec-ed, so it inherits this process's imported modules
    instead of importing torch again. Does nothing if a server runs.
    """
    with server._lock:
        resource_tracker.ensure_running()
        if server._forkserver_pid is not None:
            pid, _ = os.waitpid(server._forkserver_pid, os.WNOHANG)
            if not pid:
                return
            os.close(server._forkserver_alive_fd)
            server._forkserver_address = None
            server._forkserver_alive_fd = server._forkserver_pid = None
        with socket.socket(socket.AF_UNIX) as listener:
            address = connection.arbitrary_address("AF_UNIX")
            listener.bind(address)
            os.chmod(address, 0o600)
            listener.listen()
            alive_r, alive_w = os.pipe()
            pid = os.fork()
            if pid == 0:   # the server
                try:
                    # Keep only what the server needs: the parent's other
                    # descriptors (the alive pipe's write end above all)
                    # would keep it running after the parent is gone.
                    keep = {0, 1, 2, listener.fileno(), alive_r}
                    for fd in map(int, os.listdir("/proc/self/fd")):
                        if fd not in keep:
                            try:
                                os.close(fd)
                            except OSError:
                                pass
                    forkserver.main(listener.fileno(), alive_r,
                                    server._preload_modules)
                finally:
                    os._exit(0)
            os.close(alive_r)
        server._forkserver_address = address
        server._forkserver_alive_fd = alive_w
        server._forkserver_pid = pid


class Sandbox:
    """The warm fork server and the defaults for running submissions.

    Use as a context manager for batch grading; threads may call ``run``
    concurrently (one worker process per call).
    """

    def __init__(self, *, memory_mb: int = 1024, output_limit: int = 20_000,
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
        # The worker reads the Python installation, never the grader's
        # checkout (solution, values, other submissions' outputs).
        self.readable = jail.default_readable(exclude=[str(GRADER_HOME)])
        self.namespaces = not os.environ.get("AUTOGRADER_NO_NAMESPACES") \
            if namespaces is None else namespaces
        self.landlock = landlock
        self.total_seconds = 300.0    # per submission (the rubric's)
        self.layers: list[str] = []    # the jail's layers, once a run told
        if preload:
            self.context.set_forkserver_preload(
                ["torch", "autograder.worker", "autograder.sandbox"])
        if fork_server_from_here:
            _fork_server_from_here(multiprocessing.forkserver._forkserver)
        multiprocessing.forkserver.ensure_running()

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Stop the fork server (a later ``run`` would restart it)."""
        server = multiprocessing.forkserver._forkserver
        stop = getattr(server, "_stop", None)
        if stop is not None:
            stop()

    def start(self, process: multiprocessing.Process) -> None:
        """Start a worker; if the fork server died (it is a process like
        any other), start a new one and retry once."""
        with self.start_lock:
            try:
                process.start()
            except OSError:
                self.close()
                # A fresh interpreter, started with the minimal environment
                # only: it and its workers never hold the grader's secrets.
                from autograder.cleanenv import KEEP
                saved = dict(os.environ)
                os.environ.clear()
                os.environ.update({k: saved[k] for k in KEEP if k in saved})
                try:
                    forkserver.ensure_running()
                finally:
                    os.environ.update(saved)
                process.start()

    def run(self, source: str, filename: str, probes: list[Probe], *,
            memory_mb: int | None = None, output_limit: int | None = None,
            total_seconds: float | None = None) -> list[ProbeResult]:
        """One result per probe, in order; never raises because of what
        the submission does. ``total_seconds`` bounds the wall clock of all
        the probes together (default ``self.total_seconds``)."""
        settings = self._settings(probes, memory_mb, output_limit)
        limit = total_seconds or self.total_seconds
        try:
            return self._run(source, filename, list(probes), settings,
                             time.monotonic() + limit, limit)
        finally:
            shutil.rmtree(settings.workdir, ignore_errors=True)

    def _settings(self, probes: list[Probe], memory_mb: int | None,
                  output_limit: int | None) -> WorkerSettings:
        workdir = tempfile.mkdtemp(prefix="autograder-worker-")
        uid = gid = None
        if self.user is not None:
            uid, gid = self.user
            os.chown(workdir, uid, gid)
        return WorkerSettings(
            memory_mb=memory_mb or self.memory_mb,
            output_limit=output_limit or self.output_limit,
            cpu_seconds=int(sum(p.timeout for p in probes)) + 10,
            workdir=workdir, uid=uid, gid=gid, readable=self.readable,
            namespaces=self.namespaces, landlock=self.landlock)

    def _run(self, source: str, filename: str, probes: list[Probe],
             settings: WorkerSettings, deadline: float,
             limit: float) -> list[ProbeResult]:
        results: dict[int, ProbeResult] = {}
        lost: dict[str, ProbeResult] = {}   # check -> the failure losing it
        pending = list(range(len(probes)))
        while pending:
            todo = []
            for i in pending:
                groups = probes[i].groups
                if time.monotonic() >= deadline:
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
            if not todo:
                break
            attempt = _Attempt(self, source, filename,
                               [probes[i] for i in todo], settings,
                               deadline, limit)
            got = 0
            failure = None
            try:
                for result in attempt.results():
                    results[todo[got]] = result
                    got += 1
                    if result.status == MEMORY:
                        break      # a fresh worker for the rest
            except _Failure as exc:
                failure = exc
            finally:
                output = attempt.close()
                if attempt.layers is not None:
                    self.layers = attempt.layers
            if failure is not None:
                # Before the import finished, every later probe would fail
                # the same way: no restart. Otherwise only this probe.
                hit = todo[got:got + 1] if attempt.imported else todo[got:]
                for i in hit:
                    results[i] = ProbeResult(
                        probes[i].id, failure.status, failure.message,
                        phase="" if attempt.imported else "import")
                results[hit[0]].stdout = _cap_text(output,
                                                   settings.output_limit)
            for i in todo:
                result = results.get(i)
                # A crash after the import loses its checks as a timeout
                # does: sleeping to each limit and then crashing costs one
                # limit per check, not one per probe.
                if result is not None and result.status in _LOST_BECAUSE:
                    for group in probes[i].groups:
                        lost.setdefault(group, result)
            pending = [i for i in todo if i not in results]
        return [results[i] for i in range(len(probes))]


_LOST_BECAUSE = {TIMEOUT: "timed out", MEMORY: "used too much memory",
                 CRASH: "crashed the worker"}


def _cap_text(text: str, limit: int) -> str:
    if len(text) <= limit + 100:
        return text
    return text[:limit] + f"\n[... {len(text) - limit} more characters cut]"


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
               memory_mb: int = 1024, output_limit: int = 20_000,
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
