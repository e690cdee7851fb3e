"""Regrade with a diff: what changed between two graded folders, per
submission and item, before anyone publishes it.

``grade --compare PREVIOUS_OUT`` grades into OUT as usual, then compares
OUT with PREVIOUS_OUT (both read from their results.json; nothing is
re-graded here) and writes ``OUT/regrade.md`` and ``OUT/regrade.json``:
every submission whose score or any item changed, with the score before
and after and, per changed item, its points before and after and the
feedback that explains the new verdict. The safe way to change a rubric,
a tolerance or the test values mid-term.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from autograder.report import atomic
from autograder.text import mdsafe
from autograder.staff.class_report import Item, read_batch

WHY_LINES = 4        # lines of an item's feedback quoted as the reason


@dataclass
class ItemChange:
    """One rubric entry whose points or verdict changed."""

    number: str
    title: str
    before: float | None     # None: the entry did not exist
    after: float | None
    passed_before: bool | None
    passed_after: bool | None
    why: str                 # the new (or old, if removed) feedback


@dataclass
class SubmissionChange:
    """One submission's score before and after, and what changed."""

    name: str
    before: float | None     # None: not in the previous folder
    after: float | None      # None: not in the new one
    items: list[ItemChange] = field(default_factory=list)
    unreadable: str = ""     # a results.json damaged or missing: no change


def _why(item: Item | None) -> str:
    if item is None:
        return ""
    lines = [line.strip() for line in item.output.splitlines()
             if line.strip()]
    failing = [line for line in lines if "✘" in line] or lines
    return "\n".join(failing[:WHY_LINES])


def compare(previous: Path | str, current: Path | str
            ) -> list[SubmissionChange]:
    """Every submission whose score or items differ between the graded
    folders ``previous`` and ``current`` (matched by submission name)."""
    old = {s.name: s for s in read_batch(previous).submissions}
    new = {s.name: s for s in read_batch(current).submissions}
    changes = []
    for name in sorted(old.keys() | new.keys()):
        before, after = old.get(name), new.get(name)
        change = SubmissionChange(name, before.score if before else None,
                                  after.score if after else None)
        if before is None or after is None:
            changes.append(change)
            continue
        damaged = [f"{side} {sub.missing}" for side, sub in
                   (("previous", before), ("new", after)) if sub.missing]
        if damaged:   # never a score change read from a damaged file
            change.before = None if before.missing else change.before
            change.after = None if after.missing else change.after
            change.unreadable = "; ".join(damaged)
            changes.append(change)
            continue
        was = {i.number: i for i in before.items}
        now = {i.number: i for i in after.items}
        for number in [*now, *(n for n in was if n not in now)]:
            a, b = was.get(number), now.get(number)
            if a is not None and b is not None and \
                    (a.score, a.passed) == (b.score, b.passed):
                continue
            shown = b or a
            change.items.append(ItemChange(
                number, shown.title, a.score if a else None,
                b.score if b else None, a.passed if a else None,
                b.passed if b else None, _why(shown)))
        if change.items or change.before != change.after:
            changes.append(change)
    return changes


def _pts(value: float | None) -> str:
    return "absent" if value is None else f"{value:g}"


def _score(change: SubmissionChange, value: float | None) -> str:
    return "unreadable" if value is None and change.unreadable else \
        _pts(value)


def _verdict(passed: bool | None) -> str:
    return {True: "passed", False: "failed", None: "absent"}[passed]


def markdown(changes: list[SubmissionChange], previous: Path,
             current: Path, total: int) -> str:
    """regrade.md: the changes, submission by submission."""
    lines = [f"# Regrade: {mdsafe.inline(current.name)} against "
             f"{mdsafe.inline(previous.name)}", "",
             f"{_counted(changes, total)}.", "", *class_summary(changes)]
    for change in changes:
        delta = ""
        if change.before is not None and change.after is not None:
            delta = f" ({change.after - change.before:+g})"
        lines += [f"## {mdsafe.inline(change.name)}: "
                  f"{_score(change, change.before)} -> "
                  f"{_score(change, change.after)}{delta}", ""]
        if change.unreadable:
            lines += [f"Not compared: {mdsafe.inline(change.unreadable)}"
                      f" (damaged or missing); regrade that folder to "
                      f"compare it.", ""]
        elif change.before is None or change.after is None:
            lines += ["Only in the " + ("new" if change.before is None else
                                        "previous") + " folder.", ""]
        for item in change.items:
            lines.append(f"- **{item.number}** {mdsafe.inline(item.title)}:"
                         f" {_pts(item.before)} -> {_pts(item.after)} "
                         f"({_verdict(item.passed_before)} -> "
                         f"{_verdict(item.passed_after)})")
            lines += [f"  {line}" for line in item.why.splitlines()]
        lines.append("")
    return "\n".join(lines)


def class_summary(changes: list[SubmissionChange]) -> list[str]:
    """The page's first section: the class at a glance, before the
    submissions one by one: how many changed per item (and which way,
    with the points gained and lost), and how many moved by how much."""
    if not changes:
        return []
    items: dict[str, list[float]] = {}
    titles: dict[str, str] = {}
    for change in changes:   # an unreadable one has no items
        for item in change.items:
            items.setdefault(item.number, []).append(
                (item.after or 0) - (item.before or 0))
            titles[item.number] = item.title
    lines = ["## Summary", ""]
    if items:
        lines += ["| item | changed | up | down | points |",
                  "| --- | ---: | ---: | ---: | ---: |"]
        for number in sorted(items, key=_item_key):
            deltas = items[number]
            lines.append(
                f"| {mdsafe.inline(number)} {mdsafe.inline(titles[number])}"
                f" | {len(deltas)} | {sum(d > 0 for d in deltas)} | "
                f"{sum(d < 0 for d in deltas)} | {sum(deltas):+g} |")
        lines.append("")
    moved: dict[float, int] = {}
    for change in changes:
        if change.before is not None and change.after is not None:
            delta = change.after - change.before
            moved[delta] = moved.get(delta, 0) + 1
    if moved:
        lines.append("Scores moved by: " + ", ".join(
            f"{delta:+g} ({count} submission{'s' * (count != 1)})"
            for delta, count in sorted(moved.items())) + ".")
    only = [c for c in changes if not c.unreadable and
            (c.before is None or c.after is None)]
    if only:
        lines.append(f"{len(only)} submission{'s' * (len(only) != 1)} "
                     f"only in one of the two folders.")
    return [*lines, ""]


def _item_key(number: str) -> tuple:
    """"2.10" after "2.9", "1.bonus" after "1.2": items sort by their
    numbers' parts, numbers before words."""
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p)
                 for p in number.split("."))


def summary(changes: list[SubmissionChange], total: int) -> str:
    """The terminal lines printed after ``grade --compare``."""
    lines = [f"compared with the previous grading: "
             f"{_counted(changes, total)}"]
    for change in changes:
        items = ", ".join(f"{i.number} {_pts(i.before)}->{_pts(i.after)}"
                          for i in change.items)
        items = f" ({items})" if items else ""
        if change.unreadable:
            items = f" (not compared: {mdsafe.clean(change.unreadable, 200)})"
        # a terminal: no control or invisible character of a name
        lines.append(f"  {mdsafe.clean(change.name, 200)}: "
                     f"{_score(change, change.before)} -> "
                     f"{_score(change, change.after)}{items}")
    return "\n".join(lines)


def _counted(changes: list[SubmissionChange], total: int) -> str:
    unreadable = sum(bool(c.unreadable) for c in changes)
    text = f"{len(changes) - unreadable} of {total} submissions changed"
    return text + (f", {unreadable} unreadable" if unreadable else "")


def write_comparison(previous: Path | str, current: Path | str) -> str:
    """Compare, write OUT/regrade.md and OUT/regrade.json, and return the
    terminal summary."""
    previous, current = Path(previous), Path(current)
    changes = compare(previous, current)
    total = len(read_batch(current).submissions)
    atomic.write_text(current / "regrade.md",
                      markdown(changes, previous, current, total))
    atomic.write_text(current / "regrade.json", json.dumps(
        {"previous": str(previous), "changes": [asdict(c) for c in changes]},
        indent=2, ensure_ascii=False) + "\n")
    return summary(changes, total) + f"\n(details: {current / 'regrade.md'})"


__all__ = ["ItemChange", "SubmissionChange", "class_summary", "compare",
           "markdown",
           "summary", "write_comparison"]
