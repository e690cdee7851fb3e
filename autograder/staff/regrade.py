"""Regrade with a diff: what changed between two graded folders, per
submission and item, before anyone publishes it.

``grade --compare PREVIOUS_OUT`` grades into OUT as usual, then compares
OUT with PREVIOUS_OUT (both read from their results.json; nothing is
re-graded here) and writes ``OUT/regrade.md`` and ``OUT/regrade.json``:
every submission whose score or any item changed, with the score before
and after and, per changed item, its points before and after and the
feedback that explains the new verdict. The safe way to change a rubric,
a tolerance or the test values mid-term.

The page opens with the rubric's own diff: every grade run keeps the
rubric it graded by in ``OUT/rubric.toml`` (:func:`record_rubric`), and
the comparison lists each setting that changed between the two (an
item's points or tolerance, a task's, the ``[grading]`` defaults, an
item added or removed), the maximum before and after, and how many
submissions each changed setting moved, zero included.
"""
from __future__ import annotations

import json
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from autograder.files import atomic
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


# --------------------------------------------------------------------------
# The rubric's diff

RUBRIC_COPY = "rubric.toml"   # OUT/rubric.toml: the rubric OUT was graded by
ENTRIES = ("item", "deduction", "bonus")   # a task's sections of entries


def record_rubric(out: Path, rubric: Path | None) -> None:
    """Keep in ``out`` the rubric a grade run graded by (default: the
    homework's), byte for byte, for a later ``--compare`` to diff.
    OutputError if the OS refuses."""
    from autograder import homework
    atomic.write_bytes(out / RUBRIC_COPY,
                       Path(rubric or homework.current().rubric).read_bytes())


@dataclass
class SettingChange:
    """One rubric setting that differs between the two gradings."""

    key: str          # "2.2.points", "grading.atol", "2.4" (an entry)
    before: Any       # None: absent
    after: Any
    scope: str        # what it can move: "item 2.2", "task ...", "every item"
    moved: int = 0    # submissions it moved (see :func:`_moved`)


@dataclass
class RubricDiff:
    """The rubrics of the two gradings compared."""

    changes: list[SettingChange]
    max_before: float | None
    max_after: float | None
    bonus_before: float | None = None
    bonus_after: float | None = None
    unknown: str = ""     # why a side's settings could not be read


@dataclass(frozen=True)
class _Setting:
    value: Any
    entry: str = ""       # the item, deduction or bonus id ("" : none)
    task: str = ""        # the task id ("": the whole rubric)
    points: bool = False  # an entry's points (not its verdict)


def _settings(data: dict) -> dict[str, _Setting]:
    """A rubric's settings by key: "<entry id>.<key>" for an item's,
    "task <id>.<key>" for a task's own, "<section>.<key>" for a table's
    (``[grading]``), and "<entry id>" and "task <id>" for each entry and
    task itself (present: added or removed whole, said once)."""
    found: dict[str, _Setting] = {}
    for section, value in data.items():
        if section == "task" and isinstance(value, list):
            for task in value:
                _task_settings(task, found)
        elif isinstance(value, dict):
            found.update({f"{section}.{k}": _Setting(v)
                          for k, v in value.items()})
        else:
            found[section] = _Setting(value)
    return found


def _task_settings(task: dict, found: dict[str, _Setting]) -> None:
    tid = str(task.get("id", "?"))
    found[f"task {tid}"] = _Setting("present", task=tid)
    for key, value in task.items():
        if key in ENTRIES and isinstance(value, list):
            for entry in value:
                eid = str(entry.get("id", "?"))
                found[eid] = _Setting("present", eid, tid)
                found.update({f"{eid}.{k}": _Setting(v, eid, tid,
                                                     k == "points")
                              for k, v in entry.items() if k != "id"})
        elif key != "id":
            found[f"task {tid}.{key}"] = _Setting(value, task=tid)


def _moved(setting: _Setting, key: str, changes: list[SubmissionChange],
           tasks: dict[str, str]) -> int:
    """How many submissions a changed setting moved: an entry's points,
    those whose points for it changed with the same verdict; an entry
    added or removed, those it is scored for on either side; any other
    setting, those whose verdict changed within its scope (the entry, the
    task, or every entry for a table's setting such as a tolerance)."""
    def counts(item: ItemChange) -> bool:
        if setting.entry and item.number != setting.entry:
            return False
        if setting.task and not setting.entry and \
                tasks.get(item.number) != setting.task:
            return False
        if key == setting.entry:    # the entry itself, added or removed
            return True
        if setting.points:
            return item.passed_before == item.passed_after and \
                item.before != item.after
        return item.passed_before != item.passed_after
    return sum(any(counts(i) for i in c.items) for c in changes)


def _read_rubric(folder: Path) -> tuple[dict | None, str]:
    path = folder / RUBRIC_COPY
    try:
        with open(path, "rb") as handle:
            return tomllib.load(handle), ""
    except FileNotFoundError:
        return None, (f"{mdsafe.inline(folder.name)} keeps no "
                      f"{RUBRIC_COPY} (graded before grade runs kept "
                      f"their rubric)")
    except (OSError, tomllib.TOMLDecodeError) as exc:
        return None, (f"{mdsafe.inline(folder.name)}/{RUBRIC_COPY} is "
                      f"unreadable ({type(exc).__name__})")


def _maximum(data: dict | None) -> tuple[float | None, float | None]:
    """(maximum, bonus) of a rubric's data, as the grader counts them."""
    if data is None:
        return None, None
    points = {kind: 0.0 for kind in ENTRIES}
    for task in data.get("task", []):
        for kind in ("item", "bonus"):
            for entry in task.get(kind, []):
                value = entry.get("points", 0)
                if isinstance(value, (int, float)):
                    points[kind] += value
    return points["item"], points["bonus"]


def rubric_diff(previous: Path, current: Path,
                changes: list[SubmissionChange]) -> RubricDiff:
    """The settings that differ between the rubrics ``previous`` and
    ``current`` were graded by (their OUT/rubric.toml), each with the
    submissions it moved among ``changes``; where a side kept no rubric,
    the maxima come from its results.json and ``unknown`` says why."""
    (old, why_old), (new, why_new) = _read_rubric(previous), \
        _read_rubric(current)
    diff = RubricDiff([], *_maxima_pair(old, new, previous, current),
                      _maximum(old)[1], _maximum(new)[1])
    if old is None or new is None:
        diff.unknown = "; ".join(w for w in (why_old, why_new) if w)
        return diff
    was, now = _settings(old), _settings(new)
    tasks = {s.entry: s.task for s in (*was.values(), *now.values())
             if s.entry}
    for key in [*now, *(k for k in was if k not in now)]:
        a, b = was.get(key), now.get(key)
        if a is not None and b is not None and a.value == b.value:
            continue
        shown = b or a
        own = shown.entry or (f"task {shown.task}" if shown.task else "")
        if own and key != own and (own not in was or own not in now):
            continue   # an added or removed entry or task: said once
        scope = (f"item {shown.entry}" if shown.entry else
                 f"task {shown.task}" if shown.task else "every item")
        diff.changes.append(SettingChange(
            key, a.value if a else None, b.value if b else None, scope,
            _moved(shown, key, changes, tasks)))
    return diff


def _maxima_pair(old: dict | None, new: dict | None, previous: Path,
                 current: Path) -> tuple[float | None, float | None]:
    def from_results(folder: Path) -> float | None:
        maxima = {s.max_score for s in read_batch(folder).submissions
                  if not s.missing}
        return maxima.pop() if len(maxima) == 1 else None
    return (_maximum(old)[0] if old is not None else from_results(previous),
            _maximum(new)[0] if new is not None else from_results(current))


def _value(value: Any) -> str:
    if value is None:
        return "absent"
    if isinstance(value, str):
        return mdsafe.inline(value)
    return mdsafe.inline(json.dumps(value, ensure_ascii=False)
                         if isinstance(value, (dict, list, bool))
                         else f"{value:g}" if isinstance(value, float)
                         else str(value))


def _out_of(maximum: float | None, bonus: float | None) -> str:
    if maximum is None:
        return "unknown"
    return f"{maximum:g}" + (f" (+{bonus:g} bonus)" if bonus else "")


def rubric_lines(diff: RubricDiff) -> list[str]:
    """regrade.md's opening section: the rubric's diff."""
    lines = ["## Rubric", ""]
    before = _out_of(diff.max_before, diff.bonus_before)
    after = _out_of(diff.max_after, diff.bonus_after)
    lines.append(f"Maximum: {before} -> {after}." if before != after else
                 f"Maximum: {after} (unchanged).")
    lines.append("")
    if diff.unknown:
        return [*lines, f"Settings not compared: {diff.unknown}.", ""]
    if not diff.changes:
        return [*lines, "No rubric setting changed.", ""]
    lines += ["| setting | before | after | scope | submissions moved |",
              "| --- | --- | --- | --- | ---: |"]
    lines += [f"| {mdsafe.inline(c.key)} | {_value(c.before)} | "
              f"{_value(c.after)} | {mdsafe.inline(c.scope)} | {c.moved} |"
              for c in diff.changes]
    return [*lines, "", "A points change moves the submissions that earn "
            "the entry (same verdict, new points); any other setting "
            "those whose verdict in its scope changed. A submission moved "
            "by two settings of one scope counts under both.", ""]


def _pts(value: float | None) -> str:
    return "absent" if value is None else f"{value:g}"


def _score(change: SubmissionChange, value: float | None) -> str:
    return "unreadable" if value is None and change.unreadable else \
        _pts(value)


def _verdict(passed: bool | None) -> str:
    return {True: "passed", False: "failed", None: "absent"}[passed]


def markdown(changes: list[SubmissionChange], previous: Path,
             current: Path, total: int, rubric: RubricDiff | None = None
             ) -> str:
    """regrade.md: the rubric's diff (``rubric``, when given), then the
    changes, submission by submission."""
    lines = [f"# Regrade: {mdsafe.inline(current.name)} against "
             f"{mdsafe.inline(previous.name)}", "",
             *(rubric_lines(rubric) if rubric is not None else []),
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
    rubric = rubric_diff(previous, current, changes)
    atomic.write_text(current / "regrade.md",
                      markdown(changes, previous, current, total, rubric))
    atomic.write_text(current / "regrade.json", json.dumps(
        {"previous": str(previous), "rubric": asdict(rubric),
         "changes": [asdict(c) for c in changes]},
        indent=2, ensure_ascii=False, default=str) + "\n")
    return (f"{rubric_summary(rubric)}\n{summary(changes, total)}\n"
            f"(details: {current / 'regrade.md'})")


def rubric_summary(diff: RubricDiff) -> str:
    """The terminal line on the rubric: the settings changed and the
    maximum."""
    before = _out_of(diff.max_before, diff.bonus_before)
    after = _out_of(diff.max_after, diff.bonus_after)
    maximum = f"maximum {before} -> {after}" if before != after else \
        f"maximum {after}"
    if diff.unknown:
        return f"rubric: {maximum}; settings not compared"
    keys = ", ".join(f"{mdsafe.clean(c.key, 80)} (moved {c.moved})"
                     for c in diff.changes) or "none"
    return f"rubric settings changed: {keys}; {maximum}"


__all__ = ["ItemChange", "RubricDiff", "SettingChange", "SubmissionChange",
           "class_summary", "compare", "markdown", "record_rubric",
           "rubric_diff", "rubric_lines", "rubric_summary", "summary",
           "write_comparison"]
