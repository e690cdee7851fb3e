"""The catalogue's verdicts as one JSON file: the safety net of a refactor.

Grades every entry of ``kit/variants/*.toml`` (known bugs too) once in one
warm sandbox and writes, per entry, the score and each check's points,
pass/fail, named mistakes and feedback lines. ``--compare OLD.json`` prints
every difference from an earlier run and exits 1 if there is one, so a
change that should not change behaviour (a move, a rename, a shared helper)
can prove it::

    python -m kit.corpus.verdicts --out before.json      # on the old commit
    python -m kit.corpus.verdicts --compare before.json  # on the new one

Timing-dependent words (seconds a hostile entry ran) are masked, so two runs
of the same code compare equal.
"""
from __future__ import annotations

import argparse
import fnmatch
import json
import re
import sys
from pathlib import Path
from typing import Any

from kit import variants

# "after 1.5 s", "took 0.93 s", "12.3 MiB": figures a rerun may change.
_VOLATILE = re.compile(r"\d+(?:\.\d+)?\s*(?:s|ms|MiB|MB|KiB)\b")


def _mask(text: str) -> str:
    return _VOLATILE.sub("<n>", text)


# A check's value-flow diagnosis (autograder/checks/diagnosis/attach.py):
# kept apart, so that a change of the diagnosis alone shows as such and
# verdicts, points and every other line still compare exactly.
DIAGNOSIS = "diagnosis"


def _diagnosis_line(line: str) -> bool:
    from autograder.checks.diagnosis.attach import MARKS
    return line.startswith(MARKS)


def verdict(grade: Any) -> dict[str, Any]:
    """What a refactor must not change about one graded submission."""
    checks = {}
    for task in grade.tasks:
        for c in (*task.items, *task.deductions, *task.bonuses):
            o = c.outcome
            lines = [*o.lines, *o.hidden_lines]
            checks[c.check.id] = {
                "passed": o.passed, "points": o.points, "applied": c.applied,
                "mistakes": list(o.mistakes),
                "not_implemented": o.not_implemented,
                "lines": [_mask(x) for x in o.lines
                          if not _diagnosis_line(x)],
                "hidden_lines": [_mask(x) for x in o.hidden_lines
                                 if not _diagnosis_line(x)],
                DIAGNOSIS: [_mask(x) for x in lines if _diagnosis_line(x)]}
    return {"score": grade.score, "max_score": grade.max_score,
            "error": _mask(grade.error),
            "internal_error": bool(grade.internal_error),
            "limits": dict(grade.limits), "checks": checks}


def collect(jobs: int = 2, only: list[str] | None = None
            ) -> dict[str, Any]:
    """name -> verdict for every catalogue entry (those matching one of
    the ``only`` patterns, when given)."""
    from kit.corpus.grading_batch import grade_batch
    entries = {k: v for k, v in variants.load_all().items()
               if not only or any(fnmatch.fnmatchcase(k, p) for p in only)}
    graded = grade_batch({k: v.source() for k, v in entries.items()},
                         {k: v.fields["timeout"] for k, v in entries.items()
                          if "timeout" in v.fields}, jobs=jobs)
    return {k: verdict(graded[k]) for k in sorted(graded)}


def differences(old: dict[str, Any], new: dict[str, Any],
                diagnosis: bool = False) -> list[str]:
    """One line per entry and field that differs: the verdicts, points
    and feedback lines (a check's diagnosis lines aside), or with
    ``diagnosis`` only the diagnosis lines."""
    out = []
    for name in sorted(set(old) | set(new)):
        a, b = old.get(name), new.get(name)
        if a is None or b is None:
            out.append(f"{name}: only in {'new' if a is None else 'old'}")
            continue
        for key in sorted(set(a) | set(b)):
            if key == "checks":
                for cid in sorted(set(a[key]) | set(b[key])):
                    x, y = (_part(a[key].get(cid), diagnosis),
                            _part(b[key].get(cid), diagnosis))
                    if x != y:
                        out.append(f"{name} {cid}: {json.dumps(x)} -> "
                                   f"{json.dumps(y)}")
            elif diagnosis:
                continue
            elif a.get(key) != b.get(key):
                out.append(f"{name} {key}: {a.get(key)!r} -> "
                           f"{b.get(key)!r}")
    return out


def _part(check: dict[str, Any] | None, diagnosis: bool) -> Any:
    if check is None:
        return None
    if diagnosis:
        return check.get(DIAGNOSIS, [])
    return {k: v for k, v in check.items() if k != DIAGNOSIS}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kit.corpus.verdicts",
        description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, help="write the verdicts here")
    parser.add_argument("--compare", type=Path,
                        help="an earlier --out file: print what differs")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--only", action="append", metavar="PATTERN",
                        help="grade only the entries matching this glob "
                             "(e.g. 'calls/*dropout*'; repeatable); "
                             "--compare then compares only them")
    args = parser.parse_args(argv)
    found = collect(args.jobs, args.only)
    if args.out:
        args.out.write_text(json.dumps(found, indent=1, sort_keys=True))
        print(f"{len(found)} entries -> {args.out}")
    if args.compare:
        before = json.loads(args.compare.read_text())
        if args.only:
            before = {k: v for k, v in before.items() if k in found}
        diff = differences(before, found)
        told = differences(before, found, diagnosis=True)
        for line in diff:
            print(line)
        for line in told:
            print(f"(diagnosis) {line}")
        print(f"{len(found)} entries, {len(diff)} differences "
              f"({len(told)} diagnosis changes, listed apart, allowed)")
        return 1 if diff else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
