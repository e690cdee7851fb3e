"""The wire format between the grading parent and a worker, both directions.

Parent to worker: the probes, as one pickled argument of the worker process
(plain fields pickled, tensors as safetensors bytes; the parent is trusted);
the hidden cases' probes in the same encoding, as one frame the parent
sends when the worker asks for them (``supervisor.Attempt``).

Worker to parent: one message per event (the jail started, the inmate is
locked up, the import finished, a reach-in the audit caught, a shape
record, one result per probe), each a frame of a
``multiprocessing.connection.Connection`` over a socket pair. A frame's
payload is a 4-byte header length, a JSON header and safetensors bytes.
The parent never unpickles or evaluates anything the worker sends, and a
hostile worker can make it allocate no more than the bounds below nor keep
it waiting past a deadline (see ``Receiver``).
"""
from __future__ import annotations

import json
import math
import os
import pickle
import socket
import struct
import threading
from dataclasses import fields
from multiprocessing.connection import Connection
from typing import Any, Callable

import torch
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from autograder.sandbox import parent_clock
from autograder.sandbox.limits import LIMITS
from autograder.sandbox.protocol import (CRASH, ERROR, IMPORT_ERROR, MEMORY,
                                         NOT_RUN, OK, TIMEOUT, FusedCall,
                                         Probe, ProbeResult)

# Bounds on what a (possibly forged) frame may make the parent build:
# LIMITS (autograder/sandbox/limits.py).
_HEADER_LENGTH = struct.Struct(">I")      # payload: header length, JSON, ...
_STATUSES = {OK, ERROR, TIMEOUT, MEMORY, CRASH, IMPORT_ERROR, NOT_RUN}
# (ENVIRONMENT is the parent's verdict only: a worker cannot claim it)


class BadMessage(Exception):
    """The worker sent something that is not a valid message."""


class TooLarge(BadMessage):
    """A frame, or all of a worker's frames, went over a size bound."""


class Closed(Exception):
    """The worker closed its end between two frames (it ended or died)."""


class TimedOut(Exception):
    """The deadline passed before a whole frame arrived."""


# --------------------------------------------------------------------------
# Parent to worker

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


# --------------------------------------------------------------------------
# Worker to parent: payloads

def encode_payload(header: dict[str, Any],
                   tensors: list[torch.Tensor] = ()) -> bytes:
    """One message's payload: header length, JSON header, safetensors."""
    head = json.dumps(header).encode()
    body = st_save({str(i): t for i, t in enumerate(tensors)}) \
        if tensors else b""
    return _HEADER_LENGTH.pack(len(head)) + head + body


def frame_writer(conn: Connection | int) -> Callable[[str], None]:
    """A function writing one header-only frame (its JSON text) on the
    worker's end of the channel (``conn``, or its descriptor), at once and
    whole: the audit's findings and the shape records, written while
    student code runs. What it calls is taken now, as default values (a
    later patch of ``os``, ``Connection`` or ``json`` changes nothing it
    does; replacing them raises an audit event); a lock keeps two
    threads' frames apart. A channel that refuses the write (closed; a
    Windows pipe handle, which is no descriptor) loses the frame and
    never fails the code that made it."""
    if os.name == "nt" and not isinstance(conn, int):
        # A pipe handle is no descriptor: the connection's own send,
        # taken now (check's plain child on Windows, the student's own
        # machine; the jailed grader is POSIX).
        def send(text: str, _send: Callable = conn.send_bytes,
                 _lock: Any = threading.RLock(),
                 _encode: Callable = str.encode) -> None:
            head = _encode(text)
            with _lock:
                try:
                    _send(len(head).to_bytes(4, "big") + head)
                except OSError:
                    pass
        return send
    fd = conn if isinstance(conn, int) else conn.fileno()

    def write(text: str, _write: Callable = os.write, _fd: int = fd,
              _lock: Any = threading.RLock(),
              _encode: Callable = str.encode) -> None:
        head = _encode(text)
        payload = len(head).to_bytes(4, "big") + head
        frame = len(payload).to_bytes(4, "big", signed=True) + payload
        with _lock:
            try:
                while frame:
                    frame = frame[_write(_fd, frame):]
            except OSError:
                pass
    return write


def send(conn: Connection, header: dict[str, Any],
         tensors: list[torch.Tensor] = ()) -> None:
    """Send one message on the worker's end of the channel."""
    conn.send_bytes(encode_payload(header, tensors))


def decode_payload(payload: bytes) -> tuple[dict[str, Any],
                                            list[torch.Tensor]]:
    """Header and tensors of one frame's payload; raises BadMessage."""
    try:
        (size,) = _HEADER_LENGTH.unpack_from(payload)
        if size > LIMITS.header_bytes or size > len(payload) - 4:
            raise BadMessage(f"header of {size} bytes")
        header = json.loads(payload[4:4 + size].decode())
        body = payload[4 + size:]
        if not isinstance(header, dict):
            raise BadMessage("header is not an object")
        n = header.get("n_outputs", 0)
        if not isinstance(n, int) or n < 0 or n > LIMITS.outputs:
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


def result_payload(result: ProbeResult) -> tuple[dict[str, Any],
                                                 list[torch.Tensor]]:
    """A worker-side ProbeResult as a message's header and tensors."""
    header = {"kind": "result", "id": result.id, "status": result.status,
              "message": result.message, "output_kind": result.output_kind,
              "attributes": result.attributes,
              "stdout": result.stdout, "seconds": result.seconds,
              "phase": result.phase, "exception": result.exception,
              "line": result.line, "n_outputs": len(result.outputs),
              "changed": result.changed}
    tensors = list(result.outputs)
    if result.again is not None:
        # Its tensors follow the first call's; n_outputs counts both.
        again = result.again
        header["again"] = {"status": again.status, "message": again.message,
                           "output_kind": again.output_kind,
                           "phase": again.phase,
                           "exception": again.exception, "line": again.line,
                           "n_outputs": len(again.outputs)}
        header["n_outputs"] += len(again.outputs)
        tensors += again.outputs
    if result.repeat:
        # Probe.again's same-order repeat: one tensor after the second
        # call's, counted in n_outputs too.
        header["n_repeat"] = 1
        header["n_outputs"] += 1
        tensors.append(result.repeat[0])
    fused, room = [], LIMITS.outputs - len(tensors)
    for call in result.fused[:LIMITS.fused_calls]:
        if len(call.tensors) <= min(room, 4):
            fused.append(call)
            room -= len(call.tensors)
    values = result.values[:max(0, room)]
    if values:
        # Probe.trace_values: last, counted in n_outputs too.
        header["value_lines"] = [line for line, _ in values]
        header["n_outputs"] += len(values)
        tensors += [tensor for _, tensor in values]
    if fused:
        # Probe.trace_values' fused calls: after the values, counted too.
        header["fused"] = [{"line": c.line, "scale": c.scale,
                            "is_causal": c.is_causal,
                            "dropout_p": c.dropout_p, "mask": c.mask,
                            "n": len(c.tensors)} for c in fused]
        header["n_outputs"] += sum(len(c.tensors) for c in fused)
        tensors += [t for c in fused for t in c.tensors]
    return header, tensors


def result_from_header(header: dict[str, Any], outputs: list[torch.Tensor],
                       expected_id: str) -> ProbeResult:
    """Validate a result header from the worker; raises BadMessage."""
    def want(key: str, kinds: Any, default: Any = "") -> Any:
        value = header.get(key, default)
        if not isinstance(value, kinds) or isinstance(value, bool) and \
                kinds in (int, float, (int, float)):
            raise BadMessage(f"field {key!r} has the wrong type")
        if isinstance(value, str) and len(value) > LIMITS.text_chars:
            value = value[:LIMITS.text_chars] + "\n[... cut]"
        return value

    if header.get("id") != expected_id:
        raise BadMessage(f"expected the result of probe {expected_id!r}")
    outputs, fused = _split_fused(header.get("fused"), outputs)
    outputs, values = _split_values(header.get("value_lines"), outputs)
    n_repeat = header.get("n_repeat", 0)
    if not isinstance(n_repeat, int) or isinstance(n_repeat, bool) or \
            n_repeat not in (0, 1) or n_repeat > len(outputs):
        raise BadMessage("bad n_repeat")
    repeat = outputs[len(outputs) - n_repeat:]
    outputs = outputs[:len(outputs) - n_repeat]
    again = None
    if header.get("again") is not None:
        raw = header["again"]
        if not isinstance(raw, dict):
            raise BadMessage("field 'again' has the wrong type")
        n_again = raw.get("n_outputs", 0)
        if not isinstance(n_again, int) or isinstance(n_again, bool) or \
                not 0 <= n_again <= len(outputs):
            raise BadMessage("bad n_outputs of the second call")
        split = len(outputs) - n_again
        outputs, again_outputs = outputs[:split], outputs[split:]
        # One level only: the second call's own "again" is ignored.
        again = result_from_header({**raw, "id": expected_id, "again": None,
                                    "changed": []},
                                   again_outputs, expected_id)
    status = want("status", str)
    if status not in _STATUSES:
        raise BadMessage(f"unknown status {status!r}")
    line = header.get("line")
    if line is not None and (not isinstance(line, int)
                             or isinstance(line, bool)):
        raise BadMessage("field 'line' has the wrong type")
    changed = want("changed", list, [])
    if not all(isinstance(name, str) for name in changed):
        raise BadMessage("field 'changed' has the wrong type")
    return ProbeResult(
        id=expected_id, status=status, message=want("message", str),
        outputs=outputs if status == OK else [],
        output_kind=want("output_kind", str),
        attributes=want("attributes", dict, {}),
        stdout=want("stdout", str),
        seconds=float(want("seconds", (int, float), 0.0)),
        phase=want("phase", str), exception=want("exception", str),
        line=line, again=again, repeat=repeat if status == OK else [],
        changed=[name[:LIMITS.name_chars]
                 for name in changed[:LIMITS.wire_changed_names]],
        values=values, fused=fused)


def _split_fused(raw: Any, outputs: list[torch.Tensor]
                 ) -> tuple[list[torch.Tensor], list[FusedCall]]:
    """The fused calls' records (``ProbeResult.fused``) off the end of a
    frame's tensors, within the recorder's caps; raises BadMessage."""
    if raw is None:
        return outputs, []
    if not isinstance(raw, list) or len(raw) > LIMITS.fused_calls:
        raise BadMessage("field 'fused' is malformed")
    calls, total = [], 0
    for entry in raw:
        ok = isinstance(entry, dict) and all(
            isinstance(entry.get(k), int) and
            not isinstance(entry.get(k), bool) for k in ("line", "n"))
        scale = entry.get("scale") if ok else None
        dropout = entry.get("dropout_p") if ok else None
        if not ok or not 0 <= entry["line"] or not 3 <= entry["n"] <= 4 \
                or not (scale is None or _finite(scale)) \
                or not _finite(dropout) \
                or not isinstance(entry.get("is_causal"), bool) \
                or entry.get("mask") not in ("", "bool", "float") \
                or (entry["n"] == 4) != bool(entry["mask"]):
            raise BadMessage("field 'fused' is malformed")
        calls.append(FusedCall(entry["line"], scale, entry["is_causal"],
                               float(dropout), entry["mask"]))
        total += entry["n"]
    if total > len(outputs):
        raise BadMessage("field 'fused' is malformed")
    split = len(outputs) - total
    kept = outputs[split:]
    if any(t.numel() > LIMITS.value_numel for t in kept):
        raise BadMessage("recorded fused calls over their caps")
    at = 0
    for call, entry in zip(calls, raw):
        call.tensors = kept[at:at + entry["n"]]
        at += entry["n"]
    return outputs[:split], calls


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and \
        not isinstance(value, bool) and math.isfinite(value)


def _split_values(lines: Any, outputs: list[torch.Tensor]
                  ) -> tuple[list[torch.Tensor],
                             list[tuple[int, torch.Tensor]]]:
    """The recorded values (``Probe.trace_values``) off the end of a
    frame's tensors, within the recorder's caps; raises BadMessage."""
    if lines is None:
        return outputs, []
    if not isinstance(lines, list) or len(lines) > LIMITS.values \
            or len(lines) > len(outputs) or not all(
                isinstance(n, int) and not isinstance(n, bool) and n >= 0
                for n in lines):
        raise BadMessage("field 'value_lines' is malformed")
    split = len(outputs) - len(lines)
    kept = outputs[split:]
    sizes = [t.numel() for t in kept]
    if any(n > LIMITS.value_numel for n in sizes) or \
            sum(sizes) > LIMITS.values_numel:
        raise BadMessage("recorded values over their caps")
    return outputs[:split], list(zip(lines, kept))


# --------------------------------------------------------------------------
# Worker to parent: the parent's end

def channel() -> tuple[Connection, Connection]:
    """(parent's end, worker's end) of a result channel: a socket pair,
    because only a socket's blocked read can be ended from another thread
    (``shutdown``), which is what bounds a frame that stops half-way.
    (Descriptors a worker attaches to a frame are dropped by the kernel:
    the parent reads with plain ``read``, no ancillary data.)"""
    parent, worker = socket.socketpair()
    return Connection(parent.detach()), Connection(worker.detach())


class Budget:
    """Bytes of results the parent may receive (and so keep) for one
    submission, across all its workers: a fresh worker after a failure
    does not get a fresh budget for the same submission."""

    def __init__(self, limit: int | None = None):
        self._limit = limit      # None: LIMITS.retained_bytes, read when used
        self.used = 0
        self._lock = threading.Lock()

    @property
    def limit(self) -> int:
        """Bytes allowed in all."""
        return LIMITS.retained_bytes if self._limit is None else self._limit

    @property
    def left(self) -> int:
        """Bytes still allowed."""
        return self.limit - self.used

    def take(self, size: int) -> None:
        """Count ``size`` bytes received."""
        with self._lock:
            self.used += size


class Receiver:
    """The parent's end of one worker's channel, within bounds and time.

    ``Connection.recv_bytes(maxlength)`` reads a frame's length first and
    raises before allocating when it is over ``maxlength`` (CPython 3.8-3.13;
    ``autograder.sandbox.cpython_internals`` checks that the code relied on is
    unchanged), so allocation is bounded. It blocks until the whole frame is
    there, though, so a frame that stops half-way would hold the parent
    forever: a watchdog thread shuts the socket down at the deadline, which
    ends the blocked read."""

    def __init__(self, conn: Connection, budget: Budget | None = None):
        """``budget``: the bytes this channel may still deliver, shared by
        every worker of one submission (default: a fresh one of
        LIMITS.retained_bytes)."""
        self.conn = conn
        self.budget = budget if budget is not None else Budget()
        self.received = 0   # bytes of this channel's frames so far
        self._watchdog = _Watchdog(conn.fileno())

    def _budget(self) -> int:
        return max(0, min(LIMITS.message_bytes, self.budget.left))

    def receive(self, deadline: float) -> tuple[dict[str, Any],
                                                list[torch.Tensor]]:
        """The next message (header, tensors) by ``deadline``, a time on
        the parent's clock (``parent_clock.now()``: the parent's own stalls
        are not the worker's time, see autograder/sandbox/parent_clock.py;
        a frame already waiting when the parent looks is never late).
        Raises TimedOut, Closed, TooLarge or BadMessage; after a TimedOut
        the channel is still usable, after the others it is not."""
        while True:
            remaining = deadline - parent_clock.now()
            if remaining > 0 and self.conn.poll(remaining):
                break
            if self.conn.poll(0):   # already there: the parent was late
                break
            # Reading the clock again counts a stall during the poll.
            if deadline - parent_clock.now() <= 0:
                raise TimedOut()
        budget = self._budget()
        self._watchdog.arm(deadline)
        try:
            payload = self.conn.recv_bytes(budget)
        except (EOFError, OSError) as exc:
            if self._watchdog.disarm():
                raise TimedOut() from None
            if isinstance(exc, EOFError):
                raise Closed() from None
            if not self.conn.readable or self.conn.closed:  # over budget
                if budget < LIMITS.message_bytes:
                    raise TooLarge(f"an oversized message (over the "
                                   f"{budget / 2 ** 20:.1f} MB left of the "
                                   f"{self.budget.limit >> 20} MB of "
                                   f"results a submission may send in all)"
                                   ) from None
                raise TooLarge(f"an oversized message (over "
                               f"{LIMITS.message_bytes >> 20} MB)") from None
            raise Closed() from None   # end of file inside a frame
        if self._watchdog.disarm():
            # The frame completed as the deadline passed, but the socket
            # is shut down now: nothing more can come.
            raise TimedOut()
        self.received += len(payload) + 4
        self.budget.take(len(payload) + 4)
        return decode_payload(payload)

    def send(self, data: bytes, deadline: float) -> None:
        """Send the worker one frame (the hidden probes it asked for) by
        ``deadline`` (on the parent's clock, as ``receive``): a worker
        that stops reading cannot hold the parent either. Raises TimedOut
        or Closed; after either the channel is unusable."""
        self._watchdog.arm(deadline)
        try:
            self.conn.send_bytes(data)
        except OSError:
            if self._watchdog.disarm():
                raise TimedOut() from None
            raise Closed() from None
        if self._watchdog.disarm():
            raise TimedOut()

    def close(self) -> None:
        """Stop the watchdog and close the parent's end."""
        self._watchdog.close()
        self.conn.close()


class _Watchdog:
    """Shuts a socket down when an armed deadline passes (see Receiver).
    One thread per channel, started on first use; arming and disarming
    take a lock, and wake the thread only for an earlier deadline."""

    def __init__(self, fd: int):
        self._fd = fd
        self._cond = threading.Condition()
        self._deadline: float | None = None
        self._fired = self._closed = False
        self._thread: threading.Thread | None = None
        self._wakes: float | None = None   # when the thread next wakes

    def arm(self, deadline: float) -> None:
        """Shut the socket down at ``deadline`` (on the parent's clock, so
        the parent's own stalls move it) unless disarmed first."""
        with self._cond:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._watch, name="autograder-watchdog",
                    daemon=True)
                self._thread.start()
            self._deadline = deadline
            # A thread asleep until an earlier time re-reads the deadline
            # when it wakes: waking it on every frame would cost a context
            # switch per frame.
            if self._wakes is None or deadline < self._wakes:
                self._cond.notify()

    def disarm(self) -> bool:
        """Stop watching; whether the deadline fired."""
        with self._cond:
            self._deadline = None
            return self._fired

    def close(self) -> None:
        """End the thread."""
        with self._cond:
            self._closed = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join()

    def _watch(self) -> None:
        with self._cond:
            while not self._closed:
                if self._deadline is None:
                    self._wakes = None
                    self._cond.wait()
                    continue
                # The clock's seconds never run faster than monotonic
                # ones: waiting this long never overshoots the deadline.
                remaining = self._deadline - parent_clock.now()
                if remaining > 0:
                    self._wakes = self._deadline
                    self._cond.wait(remaining)
                    continue
                self._fired, self._deadline = True, None
                # A socket object on the same descriptor, detached again:
                # shutdown acts on the socket, closing stays with the owner.
                sock = socket.socket(fileno=self._fd)
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                finally:
                    sock.detach()
