"""The wire format (autograder/sandbox/wire.py): every bound a hostile
worker meets, and the parent's end of a channel on forged frames."""
from __future__ import annotations

import struct
import threading
import time
from dataclasses import replace

import pytest
import torch

from autograder.sandbox import parent_clock, wire
from autograder.sandbox.limits import LIMITS
from autograder.sandbox.protocol import OK, ProbeResult

GOOD = {"kind": "result", "id": "p", "status": OK, "n_outputs": 0}


def payload(header: dict, tensors: list[torch.Tensor] = ()) -> bytes:
    return wire.encode_payload(header, tensors)


# ---------------------------------------------------------------- payloads

def test_result_round_trip():
    result = ProbeResult("p", OK, "fine", outputs=[torch.ones(2, 3)],
                         output_kind="tensor", shapes={12: [[[2, 3]]]},
                         stdout="hi", line=7)
    header, outputs = wire.decode_payload(payload(
        *wire.result_payload(result)))
    back = wire.result_from_header(header, outputs, "p")
    # Shapes never ride on a result: the parent rebuilds them from the
    # records streamed while the probe ran (test_shape_stream.py).
    assert "shapes" not in header and back.shapes == {}
    assert back.line == 7
    assert torch.equal(back.outputs[0], torch.ones(2, 3))


def test_result_validation_rejects_bad_headers():
    assert wire.result_from_header(GOOD, [], "p").status == OK
    for bad in ({**GOOD, "id": "q"}, {**GOOD, "status": "great"},
                {**GOOD, "status": "environment"},
                {**GOOD, "message": 3}, {**GOOD, "line": "7"},
                {**GOOD, "seconds": True}):
        with pytest.raises(wire.BadMessage):
            wire.result_from_header(bad, [], "p")


def test_payload_decoding_rejects_garbage():
    good = payload({"kind": "result", "n_outputs": 1}, [torch.ones(2)])
    header, outputs = wire.decode_payload(good)
    assert torch.equal(outputs[0], torch.ones(2))
    for bad in (b"", b"\x00\x00\x00\x05{{{{{", good[:-3],
                b"\x00\x00\x00\x02[]",
                payload({"n_outputs": 2}, [torch.ones(2)]),
                payload({"n_outputs": 1},
                        [torch.ones(2, dtype=torch.int64)])):
        with pytest.raises(wire.BadMessage):
            wire.decode_payload(bad)


def test_header_size_is_bounded():
    text = "x" * LIMITS.header_bytes
    with pytest.raises(wire.BadMessage, match="header of"):
        wire.decode_payload(payload({"message": text}))
    # Just under the bound is fine.
    header, _ = wire.decode_payload(payload(
        {"m": "x" * (LIMITS.header_bytes - 20)}))
    assert len(header["m"]) == LIMITS.header_bytes - 20


def test_output_count_is_bounded():
    n = LIMITS.outputs
    ones = [torch.ones(1) for _ in range(n + 1)]
    assert len(wire.decode_payload(payload({"n_outputs": n},
                                           ones[:n]))[1]) == n
    with pytest.raises(wire.BadMessage, match="n_outputs"):
        wire.decode_payload(payload({"n_outputs": n + 1}, ones))


def test_text_fields_are_cut():
    long = "y" * (LIMITS.text_chars + 10)
    result = wire.result_from_header({**GOOD, "message": long,
                                      "stdout": long}, [], "p")
    for text in (result.message, result.stdout):
        assert text == "y" * LIMITS.text_chars + "\n[... cut]"


def test_probe_encoding_round_trip_leaves_parent_tensors_alone():
    from kit_tests.test_sandbox import mh
    probe = mh(inspect=True, kwargs={"return_attention": True,
                                     "mask": torch.ones(3)})
    probe = replace(probe, seed=7)
    [back] = wire.decode_probes(wire.encode_probes([probe]))
    assert back.id == probe.id and back.seed == 7 and back.inspect
    assert torch.equal(back.args[0], probe.args[0])
    assert torch.equal(back.kwargs["mask"], torch.ones(3))
    assert back.kwargs["return_attention"] is True
    assert set(back.state) == set(probe.state)
    assert not probe.args[0].is_shared()


# ---------------------------------------------------------------- channel

@pytest.fixture
def pair():
    """(Receiver, the raw worker end) of a fresh channel."""
    mine, theirs = wire.channel()
    receiver = wire.Receiver(mine)
    yield receiver, theirs
    receiver.close()
    if not theirs.closed:
        theirs.close()


def raw(conn, data: bytes) -> None:
    """Bytes on the channel as a forger writes them."""
    import os
    os.write(conn.fileno(), data)


# Deadlines for messages already on the channel, and how long a receive
# may block before the test fails instead of hanging: generous, so that a
# loaded machine (CI's fresh-root suite runs at load 35) delays but never
# fails them. What a deadline test checks is that the wait ends near its
# deadline, long before PAST_DEADLINE_S.
PAST_DEADLINE_S = 10.0


def soon(seconds: float = 30.0) -> float:
    return parent_clock.now() + seconds


def receive_within(receiver, deadline: float,
                   limit: float = PAST_DEADLINE_S):
    """``receiver.receive(deadline)``, failing (not hanging) if it is still
    blocked ``limit`` seconds later."""
    box = {}

    def go():
        try:
            box["value"] = receiver.receive(deadline)
        except BaseException as exc:   # noqa: B902 - re-raised below
            box["error"] = exc
    thread = threading.Thread(target=go, daemon=True)
    thread.start()
    thread.join(limit)
    assert not thread.is_alive(), "receive() blocked past its deadline"
    if "error" in box:
        raise box["error"]
    return box["value"]


def test_messages_arrive_in_order(pair):
    receiver, theirs = pair
    wire.send(theirs, {"kind": "jail", "pid": 5})
    wire.send(theirs, {"kind": "result", "n_outputs": 1}, [torch.ones(3)])
    assert receiver.receive(soon())[0] == {"kind": "jail", "pid": 5}
    header, [out] = receiver.receive(soon())
    assert header["kind"] == "result" and torch.equal(out, torch.ones(3))


def test_silence_times_out_at_the_deadline(pair):
    receiver, _ = pair
    start = time.monotonic()
    with pytest.raises(wire.TimedOut):
        receiver.receive(soon(0.3))
    waited = time.monotonic() - start
    assert 0.25 < waited < PAST_DEADLINE_S, waited


def _stall(seconds: float) -> None:
    """The parent stalls: this thread holds the interpreter lock in C
    (a sleep called through ``ctypes.PyDLL``), so no other thread runs."""
    import ctypes
    ctypes.PyDLL(None).usleep(int(seconds * 1_000_000))


def _in_thread(call) -> tuple[threading.Thread, dict]:
    box: dict = {}

    def go():
        try:
            box["value"] = call()
        except BaseException as exc:   # noqa: B902 - the test reads it
            box["error"] = exc
    thread = threading.Thread(target=go, daemon=True)
    thread.start()
    return thread, box


def test_a_stall_of_the_parent_while_it_waits_is_not_the_workers_time(
        pair):
    receiver, theirs = pair
    thread, box = _in_thread(lambda: receiver.receive(soon(0.5)))
    time.sleep(0.1)          # the receive is waiting
    _stall(1.5)              # past its deadline, on the parent's side
    time.sleep(0.2)          # the receive looks again before the frame
    wire.send(theirs, {"kind": "ready"})
    thread.join(PAST_DEADLINE_S)
    assert box.get("value") == ({"kind": "ready"}, []), box


def test_a_stall_of_the_parent_while_it_sends_is_not_the_workers_time(
        pair):
    receiver, theirs = pair
    data = b"x" * (16 << 20)   # far over a socket's buffer: send blocks
    thread, box = _in_thread(lambda: receiver.send(data, soon(0.5)))
    time.sleep(0.1)          # the send is blocked on the full buffer
    _stall(1.5)              # past its deadline, on the parent's side
    assert theirs.recv_bytes() == data   # the worker reads it all
    thread.join(PAST_DEADLINE_S)
    assert box == {"value": None}, box


def test_frame_that_stops_half_way_times_out(pair):
    receiver, theirs = pair
    raw(theirs, struct.pack("!i", 100) + b"{")   # 1 of 100 bytes, then
    start = time.monotonic()                    # nothing: poll says ready
    with pytest.raises(wire.TimedOut):
        receive_within(receiver, soon(0.3))
    waited = time.monotonic() - start
    assert waited < PAST_DEADLINE_S, waited
    with pytest.raises((wire.TimedOut, wire.Closed)):   # unusable after
        receive_within(receiver, soon(0.5))


def test_length_that_stops_half_way_times_out(pair):
    receiver, theirs = pair
    raw(theirs, b"\x00\x00")
    start = time.monotonic()
    with pytest.raises(wire.TimedOut):
        receive_within(receiver, soon(0.3))
    waited = time.monotonic() - start
    assert waited < PAST_DEADLINE_S, waited


def test_oversized_length_is_refused_before_allocating(pair):
    receiver, theirs = pair
    # A terabyte announced: refused from the length alone (allocating it
    # would raise MemoryError, reading it would time out).
    raw(theirs, struct.pack("!iQ", -1, 1 << 40))
    with pytest.raises(wire.TooLarge, match="oversized"):
        receiver.receive(soon())
    mine, theirs2 = wire.channel()
    small = wire.Receiver(mine)
    raw(theirs2, struct.pack("!i", LIMITS.message_bytes + 1))
    with pytest.raises(wire.TooLarge, match="oversized"):
        small.receive(soon())
    small.close()
    theirs2.close()


def test_total_of_a_worker_is_bounded(pair, monkeypatch):
    receiver, theirs = pair
    monkeypatch.setattr(wire, "LIMITS", replace(LIMITS, retained_bytes=3000))
    message = payload({"pad": "z" * 1000})
    sent = []

    def flood():
        for _ in range(4):
            theirs.send_bytes(message)
            sent.append(1)
    thread = threading.Thread(target=flood)
    thread.start()
    receiver.receive(soon())
    receiver.receive(soon())
    with pytest.raises(wire.TooLarge, match="MB of results"):
        receiver.receive(soon())
    thread.join()


def test_closing_between_frames_is_closed(pair):
    receiver, theirs = pair
    wire.send(theirs, {"kind": "ready"})
    theirs.close()
    assert receiver.receive(soon()) == ({"kind": "ready"}, [])
    with pytest.raises(wire.Closed):
        receiver.receive(soon())


def test_closing_inside_a_frame_is_closed(pair):
    receiver, theirs = pair
    raw(theirs, struct.pack("!i", 50) + b"abc")
    theirs.close()
    with pytest.raises(wire.Closed):
        receiver.receive(soon())


def test_malformed_payload_is_a_bad_message(pair):
    receiver, theirs = pair
    theirs.send_bytes(b"\x00\x00\x00\x03abc")
    with pytest.raises(wire.BadMessage):
        receiver.receive(soon())


def test_many_frames_keep_one_watchdog_thread(pair):
    receiver, theirs = pair
    before = threading.active_count()
    for i in range(200):
        wire.send(theirs, {"i": i})
        assert receiver.receive(soon())[0] == {"i": i}
    assert threading.active_count() <= before + 1


def test_descriptors_sent_by_the_worker_do_not_reach_the_parent(pair):
    import os
    import socket
    receiver, theirs = pair
    before = len(os.listdir("/proc/self/fd"))
    r, w = os.pipe()
    sock = socket.socket(fileno=theirs.fileno())
    try:   # a frame with 10 descriptors attached (SCM_RIGHTS)
        data = payload({"kind": "ready"})
        socket.send_fds(sock, [struct.pack("!i", len(data)) + data],
                        [r, w] * 5)
    finally:
        sock.detach()
    os.close(r)
    os.close(w)
    assert receiver.receive(soon()) == ({"kind": "ready"}, [])
    # Connection's plain reads make the kernel drop passed descriptors.
    assert len(os.listdir("/proc/self/fd")) <= before
