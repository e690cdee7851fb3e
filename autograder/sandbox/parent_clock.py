"""The grading parent's clock for submissions' time limits: monotonic time
minus the time the parent itself was stalled.

A probe's deadline is watched by the parent. When the parent stalls (a
thread holding the interpreter lock in C code, as a quadratic regex on a
crafted answer once did for minutes, or the whole process descheduled on
a loaded machine), no thread can notice that a result arrived, and every
deadline that passes meanwhile would be charged to a submission whose code
had long finished (a correct neighbour once timed out on all its
probes and scored 0). So deadlines are kept on this clock: a heartbeat
thread ticks every TICK seconds, and any gap between two readings of
more than STALL seconds is time the parent could not watch, subtracted
from the clock. The submission's own code is still bounded by the kernel
(RLIMIT_CPU) whatever the parent does.
"""
from __future__ import annotations

import os
import threading
import time

TICK = 0.05     # seconds between heartbeats
STALL = 0.5     # a gap longer than this is the parent's stall, not time


class ParentClock:
    """Monotonic seconds minus the parent's stalls; thread-safe."""

    def __init__(self, tick: float = TICK, stall: float = STALL):
        self.tick, self.stall = tick, stall
        self._lock = threading.Lock()
        self._last = time.monotonic()
        self.stalled = 0.0          # seconds subtracted so far
        self._thread: threading.Thread | None = None
        self._pid = 0               # the process the heartbeat runs in

    def now(self) -> float:
        """The clock's time; starts the heartbeat on first use (and again
        in a forked child, which has no copy of the thread)."""
        if self._pid != os.getpid():
            self._start()
        with self._lock:
            t = time.monotonic()
            gap = t - self._last
            if gap > self.stall:
                self.stalled += gap - self.tick
            self._last = t
            return t - self.stalled

    def _start(self) -> None:
        with self._lock:
            if self._pid == os.getpid():
                return
            self._pid = os.getpid()
            self._last = time.monotonic()
            self._thread = threading.Thread(
                target=self._beat, name="autograder-heartbeat", daemon=True)
            self._thread.start()

    def _beat(self) -> None:
        while True:
            time.sleep(self.tick)
            self.now()


_clock = ParentClock()


def now() -> float:
    """Seconds on the parent's clock (use only for differences)."""
    return _clock.now()


def stalled() -> float:
    """Seconds of parent stalls left out of the clock so far, including a
    stall that ends with this call (whichever thread runs first after a
    stall sees it)."""
    _clock.now()
    return _clock.stalled


__all__ = ["ParentClock", "now", "stalled"]
