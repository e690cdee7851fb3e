"""The subtle bugs the value-flow diagnosis must name
(``kit/corpus/diagnosis_bugs.toml``), and a way to diagnose one in the sandbox.

Used by ``kit_tests/test_diagnosis.py`` (each bug named: step and
relation) and ``make bench`` (the diagnosis's cost per failing case).
"""
from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autograder import homework
from autograder import probes as P
from autograder.checks.diagnosis import attach

ROOT = Path(__file__).resolve().parents[2]
TABLE = ROOT / "kit" / "corpus" / "diagnosis_bugs.toml"


@dataclass(frozen=True)
class Bug:
    """One bug: the reference edited, the case it is tried on, and what
    the diagnosis must name."""

    name: str
    about: str
    case: str
    step: str
    relation: str           # "" : the diagnosis must say only where
    edits: tuple[tuple[str, str], ...]
    base: str = ""          # a correct style of kit/variants/styles.toml
    never: tuple[str, ...] = ()   # words its diagnosis must not say
    # Other failing cases of the same item, diagnosed with ``case`` as the
    # grader does (``attach.agree``: a size named only if all show it).
    also: tuple[str, ...] = ()

    def source(self, reference: str | None = None) -> str:
        """The reference (or the style ``base`` made of it) with this
        bug's edits (each found exactly once)."""
        text = homework.staff().reference.read_text() if reference is None \
            else reference
        if self.base:
            from kit import variants
            text = variants.load("styles")[self.base].source(text)
        for old, new in self.edits:
            if text.count(old) != 1:
                raise ValueError(f"{TABLE.name} [{self.name}]: the edit's "
                                 f"text occurs {text.count(old)} times in "
                                 f"the reference, expected once: "
                                 f"{old[:60]!r}")
            text = text.replace(old, new)
        return text


def load(path: Path = TABLE) -> dict[str, Bug]:
    """Every bug of the table, in file order."""
    table = tomllib.loads(path.read_text())
    return {name: Bug(name, entry["about"], entry["case"], entry["step"],
                      entry["relation"],
                      tuple(tuple(e) for e in entry["edits"]),
                      entry.get("base", ""), tuple(entry.get("never", ())),
                      tuple(entry.get("also", ())))
            for name, entry in table.items()}


def outcome(bug: Bug, finding: attach.Finding | None) -> str:
    """What the diagnosis did with ``bug``: "named" (its step and
    relation), "where" (only where the values leave, as the table asks
    or with no relation found), "false" (a relation other than the
    table's, or words the table forbids), or "silent"."""
    if finding is None:
        return "silent"
    text = attach.sentence(finding)
    if any(word in text for word in bug.never):
        return "false"
    if finding.relation is None:
        return "where"
    if not bug.relation or bug.relation not in finding.relation.key:
        return "false"
    return "named" if finding.divergence.step == bug.step else "false"


def diagnose(bug: Bug, cases: dict[str, Any], runner: Any
             ) -> attach.Finding | None:
    """Run the bug's case (and its ``also`` cases) through ``runner``
    (source, filename, probes) on the value-recording copy and diagnose
    it, the cases' findings agreed as the grader agrees an item's."""
    chosen = [cases[name] for name in (bug.case, *bug.also)]
    probes = [attach.diagnosis_probe(P.case_probe(c, kwargs=c.call), c, {})
              for c in chosen]
    source = bug.source()
    results = runner(source, homework.current().module_name, probes)
    findings = [attach.diagnose_case(c, r, source)
                for c, r in zip(chosen, results)]
    attach.agree([f for f in findings if f is not None], len(chosen))
    return findings[0]


def bench_lines(sandbox: Any, config: Any) -> list[str]:
    """``make bench``'s figures for the diagnosis: how many bugs of the
    table it names (step and relation), and what it costs a failing
    submission (the diagnosis's sandbox call, timed apart from the
    grading, full pipeline on every case), against a passing one (the
    reference: no diagnosis call)."""
    import statistics
    import time

    from autograder.batch import budgeted_runner
    from autograder.grade import grade_source

    graded = budgeted_runner(sandbox, config)
    cases = {c.name: c for c in config.cases}
    named = 0
    spent: list[float] = []
    totals: list[float] = []

    def timed(source: str, filename: str, probes: list) -> list:
        start = time.perf_counter()
        found = graded(source, filename, probes)
        if any(p.trace_values for p in probes):
            spent.append(time.perf_counter() - start)
        return found

    bugs = load()
    for bug in bugs.values():
        finding = diagnose(bug, cases, graded)
        named += outcome(bug, finding) == "named"
        start = time.perf_counter()
        grade_source(bug.source(), config.profile.module_name, config, timed)
        totals.append(time.perf_counter() - start)
    before = len(spent)
    grade_source(homework.staff().reference.read_text(),
                 config.profile.module_name, config, timed)
    per = statistics.median(spent) if spent else 0.0
    share = 100 * sum(spent) / sum(totals) if totals else 0.0
    return [f"value-flow diagnosis: {named} of {len(bugs)} bugs outside "
            f"the catalogue named (step and relation); {per:.2f} s per "
            f"failing submission (median, {share:.0f}% of grading it), "
            f"passing submission: {len(spent) - before} diagnosis calls"]
