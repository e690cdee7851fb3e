"""Shape records streamed to the parent as they are made
(autograder/sandbox/shape_recorder.py, shape_table.py) and reach-ins
charged where the parent can tell (supervisor.Attempt, checks/source.py).

The worker keeps no table: code that reaches the recorder through frames
(``logging.currentframe``, ``f_back``, ``f_locals``: no audit event) finds
nothing to blank, pre-fill or un-forge, and what it writes on the channel
itself only adds records the parent judges. Each attack beside its
control, through the real sandbox."""
from __future__ import annotations

import json
import os

import pytest
import torch

from autograder.sandbox import wire
from autograder.sandbox.limits import LIMITS
from autograder.sandbox.pool import Sandbox
from autograder.sandbox.protocol import CANARY_LINE, OK, Probe, canary_shape
from autograder.sandbox.shape_recorder import make_recorder, stream_sink
from autograder.sandbox.shape_table import (FORGED, MALFORMED, ShapeTable,
                                            TooManyRecords)


def _frames(data: bytes) -> list[dict]:
    found = []
    while data:
        size = int.from_bytes(data[:4], "big")
        payload, data = data[4:4 + size], data[4 + size:]
        head = int.from_bytes(payload[:4], "big")
        found.append(json.loads(payload[4:4 + head]))
    return found


# ------------------------------------------------------------ the table

def test_streamed_records_rebuild_the_table_the_recorder_made():
    read, write = os.pipe()
    streamed = make_recorder(stream_sink(wire.frame_writer(write)))
    local = ShapeTable()
    direct = make_recorder(local)
    for recorder in (streamed, direct):
        recorder.entered(5)               # before the call: not its own
        recorder.reset(canary_shape(77))
        recorder.entered(5)
        recorder.bound(6, torch.ones(2, 3), 4, torch.ones(1))
        recorder.bound(6, torch.ones(2, 3), 4, torch.ones(1))   # again
        assert recorder.returned(7, (torch.ones(2),)) is not None
    os.close(write)
    rebuilt = ShapeTable()
    for header in _frames(os.read(read, 1 << 16)):
        assert header["kind"] == "shape"
        rebuilt.accept(header)
    want = {CANARY_LINE: [[canary_shape(77)]], 5: [[]],
            6: [[[2, 3], [1]]], 7: [[[2]]]}
    assert rebuilt.take() == local.take() == (want, "")


def test_nothing_the_table_received_can_be_taken_back():
    table = ShapeTable()
    table.record(3, [[1]])          # before the call starts: dropped
    table.start()
    table.record(4, [[2]])
    table.forged()
    table.start()                   # a second start resets nothing
    table.accept({"kind": "shape", "line": 4, "shapes": []})
    shapes, problem = table.take()
    assert shapes == {4: [[[2]], []]} and problem == FORGED
    for bad in ({"line": -1, "shapes": []}, {"line": True, "shapes": []},
                {"line": 3, "shapes": [[1.5]]}, {"line": 3}):
        table.start()
        table.accept(bad)
        assert table.take()[1] == MALFORMED, bad


def test_a_flood_of_records_stops_the_worker():
    table = ShapeTable()
    table.start()
    for line in range(LIMITS.shape_frames):    # the control: at the cap
        table.record(1, [[line % 3]])
    with pytest.raises(TooManyRecords):
        table.record(1, [[0]])


class _Dim(int):
    """A dimension that works as an int everywhere but ``int()``."""

    def __int__(self):
        raise TypeError("a dimension")


class _Hidden(torch.Tensor):
    """A tensor subclass hiding its shape: every tensor computed from it
    is one too; its ``shape``'s dimensions refuse ``int()`` (the recorder
    once recorded "bound no tensor" for every line)."""

    @property
    def shape(self):
        return tuple(_Dim(n) for n in torch.Tensor.size(self))

    def size(self, *args):
        return self.shape


class _Plain(torch.Tensor):
    """The control: a subclass that tells its shape."""


def test_a_tensor_whose_shape_hides_is_read_through_torchs_own_type():
    # The attack's shape is read all the same; so is the controls'.
    for kind in (_Hidden, _Plain, torch.nn.Parameter):
        table = ShapeTable()
        recorder = make_recorder(table)
        recorder.reset(canary_shape(7))
        value = torch.ones(2, 3)
        value = kind(value) if kind is torch.nn.Parameter \
            else value.as_subclass(kind)
        recorder.bound(6, value * 2)
        recorder.returned(7, (value, 1))
        shapes, why = table.take()
        assert why == "", kind
        assert shapes[6] == [[[2, 3]]] and shapes[7] == [[[2, 3]]], kind


def test_a_tensor_whose_shape_cannot_be_read_is_a_forgery():
    # A tensor with no one shape (nested) stands for any tensor whose
    # size torch itself cannot give: no evidence, never "no tensor".
    table = ShapeTable()
    recorder = make_recorder(table)
    recorder.reset(canary_shape(7))
    recorder.bound(6, torch.nested.nested_tensor([torch.ones(2),
                                                  torch.ones(3)]))
    assert table.take()[1] == FORGED


# ------------------------------------------------------------ the sandbox

UNIT = '''
import logging
import os
import stat
import torch
import torch.nn as nn

TRICK = False


def _frames():
    frame = logging.currentframe()
    while frame is not None:
        yield frame
        frame = getattr(frame, "f_ba" "ck")


def blank():
    """Whatever looks like a recorder or its table, found through the
    frames, emptied, pre-filled or switched off."""
    for frame in _frames():
        for value in list(getattr(frame, "f_loc" "als").values()):
            for name in ("shapes", "values"):
                table = getattr(value, name, None)
                if isinstance(table, dict):
                    table.clear()
            for name in ("record", "bound", "entered", "sink", "forged",
                         "reset"):
                try:
                    setattr(value, name, lambda *a, **k: None)
                except Exception:
                    pass


def inject(line):
    """A record written on the channel itself: line ``line`` bound no
    tensor (claimed for the grader's stream, and to every socket)."""
    text = ('{"kind": "shape", "line": %d, "shapes": []}' % line).encode()
    payload = len(text).to_bytes(4, "big") + text
    frame = len(payload).to_bytes(4, "big") + payload
    for fd in range(3, 256):
        try:
            if stat.S_ISSOCK(os.fstat(fd).st_mode):
                os.write(fd, frame)
        except OSError:
            pass


class Unit(nn.Module):
    def __init__(self):
        super().__init__()
        if TRICK:
            blank()

    def forward(self, x):
        # YOUR CODE STARTS HERE
        s = x @ x.transpose(1, 2)
        out = s @ x
        if TRICK:
            blank()
            inject(OUT_LINE)
        return out
        # YOUR CODE ENDS HERE
'''


def _line(source: str, text: str) -> int:
    return next(i for i, line in enumerate(source.splitlines(), 1)
                if text in line)


def _traced(box: Sandbox, trick: bool) -> tuple[dict, str]:
    source = UNIT.replace("TRICK = False", f"TRICK = {trick}")
    source = source.replace("OUT_LINE", str(_line(UNIT, "out = s @ x")))
    probe = Probe("t", "Unit", {}, args=[torch.ones(2, 3, 4)],
                  trace_shapes=True, methods={"Unit": ("forward",)},
                  canary=4321)
    [result] = box.run(source, "unit.py", [probe])
    assert result.status == OK, result.message
    return result.shapes, result.trace_forged


def test_frames_reach_no_table_and_written_records_stay_written():
    with Sandbox() as box:
        control, forged = _traced(box, False)
        attack, attack_forged = _traced(box, True)
    s_line, out_line = _line(UNIT, "s = x @"), _line(UNIT, "out = s @ x")
    assert forged == "" and control[CANARY_LINE] == [[canary_shape(4321)]]
    assert control[s_line] == [[[2, 3, 3]]]
    assert control[out_line] == [[[2, 3, 4]]]
    # The attack found nothing to empty or switch off: every record the
    # control made is there; what it wrote itself is one more record.
    assert attack_forged == ""
    assert {line: runs for line, runs in attack.items()
            if line != out_line and line in control} == \
        {line: runs for line, runs in control.items() if line != out_line}
    assert attack[out_line] == [[[2, 3, 4]], []]


# ------------------------------------------------------------ reach-ins

TWO = '''
import torch
import torch.nn as nn

AT_IMPORT = False
if AT_IMPORT:
    exec("pass")


class Plain(nn.Module):
    def forward(self, x):
        return x + 1


class Reaching(nn.Module):
    def forward(self, x):
        exec("y = 1")
        return x + 2
'''


def test_a_reach_in_is_charged_to_its_probe_and_the_later_ones():
    plain = Probe("plain", "Plain", {}, args=[torch.zeros(2)])
    reaching = Probe("reaching", "Reaching", {}, args=[torch.zeros(2)])
    with Sandbox() as box:
        first = box.run(TWO, "two.py", [plain, reaching])
        later = box.run(TWO, "two.py", [reaching, plain])
        imported = box.run(TWO.replace("AT_IMPORT = False",
                                       "AT_IMPORT = True"),
                           "two.py", [plain, reaching])
    by_id = {r.id: r for r in first}
    assert all(r.status == OK for r in first + later + imported)
    # Before it ran, the plain call's answer could not be changed by it.
    caught = ["compile", "exec"]     # exec of a string compiles it
    assert by_id["plain"].reach_here == [] and by_id["plain"].reach_ins == []
    assert by_id["reaching"].reach_here == caught
    # After it, in the same process, it could: both are charged.
    assert [r.reach_here for r in later] == [caught, caught]
    # At import the grader cannot tell whose it is: every probe.
    assert all("exec" in r.reach_ins for r in imported)


def test_the_access_deduction_names_where_it_was_caught():
    from autograder.checks.source import caught_reach_ins

    class Ctx:
        extra = {"reach_everywhere": ["gc.get_objects"],
                 "reach_by_task": {"A": ["exec"], "B": []}}

    class Task:
        def __init__(self, cls):
            self.cls = cls

    a, b = caught_reach_ins(Task("A"), Ctx()), caught_reach_ins(Task("B"),
                                                                Ctx())
    assert len(a) == 2 and "A's calls" in a[0] and a[0].endswith("exec")
    assert len(b) == 1 and "every task is charged" in b[0]
    # Without a placement (a caller that gives only the list): everywhere.
    Ctx.extra = {"reach_ins": ["exec"]}
    assert caught_reach_ins(Task("B"), Ctx()) == [
        "while it ran (where the grader cannot tell which task's code did "
        "it, so every task is charged): exec"]
