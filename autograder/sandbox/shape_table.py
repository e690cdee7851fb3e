"""The parent's table of one traced probe's shape records, rebuilt from
the records the worker streamed while the probe ran.

The worker keeps no table (``shape_recorder``): each record is a frame of
the result channel written as it is made (``{"kind": "shape", ...}``), so
what student code in the worker reaches later (a frame's locals, a
recorder found through ``f_back``) cannot blank, pre-fill or un-forge
what the parent already has. The parent judges what it receives:

- ``{"start": true}``: the traced call begins (records before the first
  one, of the module's import or the instance's construction, are not the
  call's; a later one changes nothing: nothing here can be reset);
- ``{"line": n, "shapes": [[...], ...]}``: a statement on line ``n`` ran
  and bound tensors of these shapes (line 0, the canary); each line keeps
  its distinct records, up to ``LIMITS.shapes_per_line``: one more is a
  forgery (a table filled ahead of the code hid what ran);
- ``{"forged": true}``: the recorder refused a call from code the grader
  did not make.

The table's content is judged by ``checks/trace_integrity.py`` (lines
that must have run, the canary, what ``forward`` returned).
"""
from __future__ import annotations

from typing import Any

from autograder.sandbox.limits import LIMITS

FORGED = ("the grader's shape recorder was called by code the grader did "
          "not make")
FULL = ("a line holds more records than the grader keeps, which no "
        "attention module's code makes")
MALFORMED = "a shape record the grader cannot read"


class TooManyRecords(Exception):
    """More records for one probe than ``LIMITS.shape_frames``."""


class ShapeTable:
    """The records of one traced probe, as the parent rebuilds them (also
    the in-process sink of ``worker.execute_probes`` outside the sandbox,
    where the student runs their own code)."""

    def __init__(self) -> None:
        self.shapes: dict[int, list[list[list[int]]]] = {}
        self.problem = ""        # why the records are no evidence
        self.started = False
        self.frames = 0
        self._ints = 0

    # The sink's side (``shape_recorder.ShapeRecorder`` calls these in
    # process; the parent calls them for each streamed frame).
    def start(self) -> None:
        """The traced call begins: the records from now on are its."""
        self.started = True

    def forged(self) -> None:
        """The recorder refused a call: the trace is no evidence."""
        self.problem = self.problem or FORGED

    def record(self, line: int, shapes: list[list[int]]) -> None:
        """One record: line ``line`` ran and bound tensors of ``shapes``."""
        self.frames += 1
        if self.frames > LIMITS.shape_frames:
            raise TooManyRecords(
                f"more than {LIMITS.shape_frames} shape records for one "
                f"call")
        if not self.started:
            return
        seen = self.shapes.setdefault(line, [])
        if shapes in seen:
            return
        self._ints += 1 + sum(1 + len(shape) for shape in shapes)
        if len(seen) >= LIMITS.shapes_per_line or \
                self._ints > LIMITS.shape_ints:
            self.problem = self.problem or FULL
            return
        seen.append(shapes)

    def accept(self, header: dict[str, Any]) -> None:
        """One streamed frame (its JSON header, decoded by the wire)."""
        if header.get("start") is True:
            self.start()
        elif header.get("forged") is True:
            self.forged()
        else:
            line, shapes = header.get("line"), header.get("shapes")
            if _is_int(line) and line >= 0 and _is_shapes(shapes):
                self.record(line, shapes)
            else:
                self.problem = self.problem or MALFORMED

    def take(self) -> tuple[dict[int, list[list[list[int]]]], str]:
        """The table and why it is no evidence ("" if nothing), then a
        fresh start."""
        taken = (self.shapes, self.problem)
        self.__init__()
        return taken


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_shapes(value: Any) -> bool:
    return isinstance(value, list) and len(value) <= LIMITS.outputs * 64 \
        and all(isinstance(shape, list) and len(shape) <= 64 and
                all(_is_int(d) for d in shape) for shape in value)


__all__ = ["ShapeTable", "TooManyRecords"]
