"""Each test file's seconds in the last run, kept for the next one: the
parallel run (``--dist loadfile``) hands out the slowest files first, so
that no long file starts last and runs alone while the other processes
wait (xdist's own order, by number of tests, put the slow files of few
tests last).

Kept per mark expression (the quick suite's ``not e2e`` and the whole
suite time a file differently) in ``build/.test-seconds.json``; a file
not timed yet counts as slow (it goes first). Files not timed (all of
them in a fresh clone) go in xdist's order: the most tests first.
"""
from __future__ import annotations

import json
import math
import os
from collections import Counter
from pathlib import Path

RECORD = Path(__file__).resolve().parents[1] / "build" / ".test-seconds.json"


def file_of(nodeid: str) -> str:
    """The test file of a test's node id."""
    return nodeid.split("::", 1)[0]


def recorded(marks: str, record: Path = RECORD) -> dict[str, float]:
    """File -> seconds of the last run under mark expression ``marks``
    (empty when there is no readable record)."""
    try:
        data = json.loads(record.read_text())
        table = data.get(marks, {})
        return {str(k): float(v) for k, v in table.items()}
    except (OSError, ValueError, TypeError, AttributeError):
        return {}


def remember(marks: str, seconds: dict[str, float],
             record: Path = RECORD) -> None:
    """Add this run's ``seconds`` per file to the record (files not run
    keep their last time), replaced whole, never half-written."""
    try:
        data = json.loads(record.read_text())
        data = data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        data = {}
    table = data.get(marks) if isinstance(data.get(marks), dict) else {}
    data[marks] = {**table, **{k: round(v, 1) for k, v in seconds.items()}}
    try:
        record.parent.mkdir(parents=True, exist_ok=True)
        partial = record.with_name(f"{record.name}.{os.getpid()}")
        partial.write_text(json.dumps(data, indent=1, sort_keys=True))
        partial.replace(record)
    except OSError:
        pass     # a read-only checkout: the next run keeps xdist's order


def slowest_first(items: list, seconds: dict[str, float]) -> None:
    """Sort ``items`` (in place, each file's tests kept together and in
    their order) by their file's ``seconds``, slowest first; files not
    timed (every file, without a record) by their number of tests, most
    first, as xdist's own order would."""
    counts = Counter(file_of(item.nodeid) for item in items)

    def key(item) -> tuple[float, int]:
        path = file_of(item.nodeid)
        return -seconds.get(path, math.inf), -counts[path]
    items.sort(key=key)
