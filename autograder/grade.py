"""Grade one submission against the rubric.

Plans every probe the rubric's checks need (deduplicated), runs them in the
sandbox in one go, evaluates each check in this (trusted) process, and
applies the task rules: items add up, deductions take points away down to
a floor of 0, bonuses come on top when the items they require passed.

The check kinds live in autograder/checks/ (the static ones in
checks/source.py).
"""
from __future__ import annotations

import time
import traceback
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from autograder.text import mdsafe
from autograder.checks.base import FAIL, Context
from autograder.checks.shape_notation import notation_of
from autograder.config import GradingConfig
from autograder.sandbox.protocol import (CRASH, ENVIRONMENT, IMPORT_ERROR,
                                         MEMORY, NOT_RUN, TIMEOUT, Probe,
                                         ProbeResult)
from autograder.submission import imports, python_version
from autograder.rubric import (Check, Outcome, Rubric, RubricError, Task,
                               kind, select_cases)

STDOUT_SHOWN = 2000        # characters of the student's printing we quote
LIMIT_STATUSES = (TIMEOUT, MEMORY, CRASH)

# Statuses after which the rest of a check's probes are not worth running.
Runner = Callable[[str, str, list[Probe]], list[ProbeResult]]


# --------------------------------------------------------------------------
# Results

@dataclass
class CheckResult:
    """A check's outcome and the points it finally counts for (a deduction
    counts negative, limited by the task's floor)."""

    check: Check
    outcome: Outcome
    applied: float = 0.0


@dataclass
class TaskResult:
    """One task's checks and score (floor 0, bonus on top)."""

    task: Task
    items: list[CheckResult]
    deductions: list[CheckResult]
    bonuses: list[CheckResult]

    @property
    def score(self) -> float:
        return sum(c.applied for c in (*self.items, *self.deductions,
                                       *self.bonuses))

    @property
    def not_implemented(self) -> bool:
        return all(c.outcome.not_implemented and not c.outcome.passed
                   for c in self.items)


@dataclass
class GradeResult:
    """Everything reports need about one graded submission.

    ``max_score`` and ``max_bonus`` are facts of the rubric it was graded
    by (keywords, required: :meth:`of` takes them from the rubric)."""

    name: str
    filename: str
    tasks: list[TaskResult] = field(default_factory=list)
    max_score: float = field(kw_only=True)
    max_bonus: float = field(kw_only=True)
    public_only: bool = False
    error: str = ""           # student-facing reason the code wasn't graded
    internal_error: str = ""  # grader failure (traceback for staff)
    stdout: str = ""          # what the student's code printed (capped)
    hidden_stdout: str = ""   # printed during hidden cases (after publication)
    limits: dict[str, int] = field(default_factory=dict)  # status -> probes
    seconds: float = 0.0
    # The time the student's calls took, and the limits they ran under
    # (check's preview says them: a slow module is told before the grade).
    timing: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    # Set when every call failed because the module does not import (a
    # syntax error...): the one sentence (markdown) that every item would
    # repeat; previews say it once.
    import_error: str = ""
    answers: str = ""        # inline answers section (markdown), if read
    jail: list[str] = field(default_factory=list)   # the sandbox's layers

    @classmethod
    def of(cls, rubric: Rubric, name: str, filename: str,
           **fields: Any) -> GradeResult:
        """An empty result for a submission graded by ``rubric`` (its
        maximum is the rubric's, never a constant of the code)."""
        return cls(name, filename, max_score=rubric.max_score,
                   max_bonus=rubric.max_bonus, **fields)

    @property
    def score(self) -> float:
        return sum(t.score for t in self.tasks)

    def mistakes(self) -> list[str]:
        """Catalogue ids recognised anywhere, for reports and tests."""
        return sorted({m for t in self.tasks
                       for c in (*t.items, *t.deductions)
                       for m in c.outcome.mistakes})


# --------------------------------------------------------------------------
# Orchestration

def grading_context(config: GradingConfig, source: str = "",
                    public_only: bool = False) -> Context:
    """The context every check of ``config`` reads for ``source``: the
    mistake messages, the tolerance, the task methods and the shape
    notation all come from the config (none from a default file)."""
    return Context(config.mistakes, config.rubric.mistake_atol, source,
                   public_only, task_methods=config.task_methods,
                   notation=notation_of(config.profile))


def _cases_for(check: Check, cases: list, public_only: bool) -> list:
    if not check.cases:
        return []
    chosen = select_cases(check.cases, cases)
    if not chosen and not public_only:
        raise RubricError(f"{check.section} {check.id!r} selects no test "
                          f"case with {check.cases}")
    return chosen


def plan_checks(config: GradingConfig, ctx: Context
                ) -> list[tuple[Check, list[Probe]]]:
    """Each check of ``config``'s rubric with the probes it needs on its
    cases (ids shared between checks), each probe's time limit the
    config's for that check (a kind never sets it). Raises RubricError if
    a check selects no case (unless public-only)."""
    planned = []
    causal: list[tuple[str, dict]] = []
    for task in config.rubric.tasks:
        for check in (*task.items, *task.deductions, *task.bonuses):
            chosen = _cases_for(check, config.cases, ctx.public_only)
            if check.cases and not chosen:
                continue
            seconds = config.time_limit(check)
            found = [replace(p, timeout=seconds)
                     for p in kind(check).impl.plan(check, task, chosen, ctx)]
            planned.append((check, found))
            if getattr(kind(check).impl, "judges_causality", False):
                causal += [(c.cls, c.init) for c in chosen]
    return [(check, [_prefix_causal(p, causal) for p in found])
            for check, found in planned]


def _prefix_causal(probe: Probe, causal: list[tuple[str, dict]]) -> Probe:
    """``probe`` asked to keep its prefix on the longer call
    (``Probe.again_prefix``) when it builds a module the rubric judges
    causal (the class and arguments of a causality item's case)."""
    if probe.again_longer and not probe.again_prefix and any(
            probe.cls == cls and probe.init == init for cls, init in causal):
        return replace(probe, again_prefix=True)
    return probe


def plan_probes(config: GradingConfig, ctx: Context) -> list[Probe]:
    """Every probe the rubric needs, once each, in rubric order."""
    return _unique(p for _, found in plan_checks(config, ctx)
                   for p in found)


def _unique(probes) -> list[Probe]:
    seen: dict[str, Probe] = {}
    for probe in probes:
        first = seen.setdefault(probe.id, probe)
        if probe.again and not first.again:
            # One run serves every check that shares it: the second call
            # that one of them asks for (module_output) is made.
            seen[probe.id] = replace(first, again=True,
                                     again_longer=probe.again_longer,
                                     again_prefix=probe.again_prefix)
    return list(seen.values())


def run_phased(planned: list[tuple[Check, list[Probe]]], source: str,
               filename: str, runner: Runner,
               hidden: set[str] | frozenset[str] = frozenset()
               ) -> dict[str, ProbeResult]:
    """Run every planned probe in one sandbox call, each check's first
    probe first, so that hostile code costs one time limit per check, not
    one per case: a probe is tagged with the checks it serves, and once a
    check's probe hits the time or memory limit the sandbox skips the
    probes no other check still needs (see ``Probe.groups``).

    The probes of ``hidden`` (ids) are marked ``Probe.hidden`` and run
    after every public one: the worker receives them last, under opaque
    ids, so nothing it reports about a public probe can carry their data.
    """
    groups: dict[str, list[str]] = {}
    for check, found in planned:
        for probe in found:
            groups.setdefault(probe.id, []).append(check.id)
    firsts = [found[0] for _, found in planned if found]
    # A stand-in probe (Probe.stand_in) serves its checks under a group of
    # its own: hidden ones run after every public one, so a public call
    # that hangs in another class must not skip them (no cascade).
    ordered = [replace(p, groups=tuple(f"{g}:stand-in" if p.stand_in else g
                                       for g in groups[p.id]),
                       hidden=p.id in hidden) for p in
               _unique([*firsts, *(p for _, f in planned for p in f)])]
    ordered.sort(key=lambda p: p.hidden)    # stable: public ones first
    if not ordered:
        return {}
    return {probe.id: result for probe, result in
            zip(ordered, runner(source, filename, ordered))}


def _evaluate(check: Check, task: Task, cases: list,
              results: dict[str, ProbeResult], ctx: Context) -> Outcome:
    chosen = _cases_for(check, cases, ctx.public_only)
    if check.cases and not chosen:
        return Outcome(0.0, False, ["- no public case for this check: it is "
                                    "graded on the hidden cases when you "
                                    "submit"])
    try:
        return kind(check).impl.evaluate(check, task, chosen, results, ctx)
    except Exception:   # noqa: BLE001 - one broken check must not sink all
        return Outcome(0.0, False, [
            "- the grader could not evaluate this check (a bug in the "
            "grader, not in your code; staff have the details)"],
            # the traceback may quote the submission's values: a block
            hidden_lines=[mdsafe.code_block(traceback.format_exc(),
                                            20_000)])


def _score_task(task: Task, cases: list, results: dict[str, ProbeResult],
                ctx: Context) -> TaskResult:
    items = [CheckResult(c, _evaluate(c, task, cases, results, ctx))
             for c in task.items]
    for item in items:
        item.applied = item.outcome.points
    earned = sum(i.applied for i in items)
    deductions = []
    for check in task.deductions:
        result = CheckResult(check, _evaluate(check, task, cases, results,
                                              ctx))
        # Floor 0: a deduction takes at most what is left of the task.
        taken = min(result.outcome.points, earned)
        result.applied = -taken if taken else 0.0
        earned += result.applied
        if result.outcome.points and result.applied > -result.outcome.points:
            result.outcome.lines.append(
                f"- (-{result.outcome.points:g} limited to "
                f"{result.applied:g}: a task's score never goes below 0)")
        deductions.append(result)
    # The bonus rule (rubric.toml, ``requires``): every required item
    # passed and no required deduction taken.
    passed = {c.check.id for c in (*items, *deductions) if c.outcome.passed}
    taken = {d.check.id for d in deductions}
    bonuses = []
    for check in task.bonuses:
        missing = [r for r in check.requires if r not in passed]
        if missing:
            needs = [f"no {r} deduction" if r in taken else f"{r} to pass"
                     for r in missing]
            outcome = Outcome(0.0, False, [
                f"- {FAIL} the bonus needs {' and '.join(needs)}"])
        else:
            outcome = _evaluate(check, task, cases, results, ctx)
        bonuses.append(CheckResult(check, outcome, outcome.points))
    return TaskResult(task, items, deductions, bonuses)


def grade_source(source: str, filename: str, config: GradingConfig,
                 runner: Runner, *, name: str = "submission",
                 public_only: bool = False) -> GradeResult:
    """Grade ``source`` (the text of modeling_attention.py) by ``config``
    (its rubric, cases, mistakes and time limits: nothing else is read).
    Never raises because of the submission; an internal failure is
    recorded in ``internal_error`` with score 0."""
    start = time.perf_counter()
    rubric, cases = config.rubric, config.cases
    grade = GradeResult.of(rubric, name, filename, public_only=public_only)
    try:
        ctx = grading_context(config, source, public_only)
        planned = plan_checks(config, ctx)
        probes = _unique(p for _, found in planned for p in found)
        hidden = hidden_probe_ids(probes, cases)
        results = run_phased(planned, source, filename, runner, hidden)
        ctx.extra["ran"] = ran_by_task(rubric, planned, results)
        # Reach-ins the worker's audit caught (sandbox/audit.py): charged
        # as the static rule's findings to the tasks whose calls could
        # have made them (or to every task where the parent cannot tell),
        # and no trace of the run is evidence (checks/source.py).
        everywhere = {r for res in results.values() for r in res.reach_ins}
        ctx.extra["reach_everywhere"] = sorted(everywhere)
        ctx.extra["reach_by_task"] = reach_by_task(rubric, planned, results)
        ctx.extra["reach_ins"] = sorted(everywhere.union(
            *ctx.extra["reach_by_task"].values()))
        for probe in probes:
            if probe.id not in results:
                results[probe.id] = ProbeResult(probe.id, NOT_RUN,
                                                "no result from the sandbox")
        broken = [r for r in results.values() if r.status == ENVIRONMENT]
        if broken:
            # The grader's own failure: no score, never the student's zero.
            grade.internal_error = ("the grader's environment failed: "
                                    + broken[0].message)
            grade.seconds = time.perf_counter() - start
            return grade
        # Probes that hit a limit (time, memory, crash), for the class report
        for result in results.values():
            if result is not None and result.status in LIMIT_STATUSES:
                grade.limits[result.status] = \
                    grade.limits.get(result.status, 0) + 1
        if any(r.status == IMPORT_ERROR for r in results.values()):
            # Code for a newer Python than this one, or a package off the
            # list (autograder/imports.toml): say which, and why.
            hw = config.profile
            for note in (python_version.grader_note(
                    source, path=hw.python_features),
                         imports.grader_note(
                             source, imports.load_allowed(hw.imports))):
                if note:
                    grade.notes.append(note)
        ran = [r for r in results.values()
               if r is not None and r.status != NOT_RUN]
        grade.import_error = _import_error(probes, results, hidden)
        grade.timing = {
            "calls": float(len(ran)),
            "seconds": sum(r.seconds for r in ran),
            "slowest": max((r.seconds for r in ran), default=0.0),
            "skipped": float(len(results) - len(ran)),
            "timed_out": float(sum(r.status == TIMEOUT for r in ran)),
            "call_limit": max((p.timeout for p in probes), default=0.0),
            "total_limit": float(rubric.submission_timeout)}
        grade.stdout = _printed([p for p in probes if p.id not in hidden],
                                results)
        grade.hidden_stdout = _printed([p for p in probes if p.id in hidden],
                                       results)
        grade.tasks = [_score_task(t, cases, results, ctx)
                       for t in rubric.tasks]
        _diagnose(grade, config, ctx, results, source, filename, runner)
    except RubricError:
        raise
    except Exception:   # noqa: BLE001 - results.json must still be written
        grade.tasks = []
        grade.internal_error = traceback.format_exc()
    grade.seconds = time.perf_counter() - start
    return grade


def _import_error(probes: list[Probe], results: dict[str, ProbeResult],
                  hidden: set[str]) -> str:
    """Why the module does not import (markdown, as the items quote it),
    when every public call that ran failed to import it; else ""."""
    public = [(p, results[p.id]) for p in probes if p.id not in hidden
              and results[p.id].status != NOT_RUN]
    if not public or any(r.status != IMPORT_ERROR for _, r in public):
        return ""
    return mdsafe.inline(public[0][1].message.strip() or "(no message)")


def _diagnose(grade: GradeResult, config: GradingConfig, ctx: Context,
              results: dict[str, ProbeResult], source: str, filename: str,
              runner: Runner) -> None:
    """Where the values of failing cases leave the reference
    (``checks/diagnosis``): feedback only, never points. A failure of the
    diagnosis itself loses its lines, not the grade."""
    from autograder.checks.diagnosis import attach
    try:
        attach.diagnose(grade, config, results, source, filename, runner,
                        ctx.task_methods, ctx.public_only)
    except Exception as exc:   # noqa: BLE001 - an extra: the grade stands
        grade.notes.append(f"the grader could not say where your values "
                           f"leave the reference ({type(exc).__name__} in "
                           f"the grader, not in your code); the scores "
                           f"above are not affected")


def ran_by_task(rubric: Rubric, planned: list[tuple[Check, list[Probe]]],
                results: dict[str, ProbeResult]
                ) -> dict[str, frozenset[int]]:
    """Task class -> the lines its traced calls recorded (statements,
    and the entry of every function and lambda that ran): which helpers
    its deductions read (``regions.graded_regions``' ``ran``)."""
    owner = {id(c): t.cls for t in rubric.tasks for c in t.deductions}
    ran: dict[str, frozenset[int]] = {}
    for check, found in planned:
        if id(check) not in owner:
            continue
        lines = {line for p in found if p.trace_shapes and p.id in results
                 for line in results[p.id].shapes}
        cls = owner[id(check)]
        ran[cls] = ran.get(cls, frozenset()) | lines
    return ran


def reach_by_task(rubric: Rubric, planned: list[tuple[Check, list[Probe]]],
                  results: dict[str, ProbeResult]) -> dict[str, list[str]]:
    """Task class -> the reach-ins caught while one of its checks' probes
    ran, or an earlier probe of the same worker (``reach_here``: what
    could have changed its answers)."""
    owner = {id(c): t.cls for t in rubric.tasks
             for c in (*t.items, *t.deductions, *t.bonuses)}
    found: dict[str, set[str]] = {t.cls: set() for t in rubric.tasks}
    for check, probes in planned:
        cls = owner.get(id(check))
        if cls is not None:
            found[cls].update(r for p in probes if p.id in results
                              for r in results[p.id].reach_here)
    return {cls: sorted(whats) for cls, whats in found.items()}


def hidden_probe_ids(probes: list[Probe], cases: list) -> set[str]:
    """The probes that run a hidden case's inputs (marked ``hidden`` by
    their builder, ``probes.case_probe``) or inspect a module of a hidden
    case's sizes that no public case shares: what they print is a hidden
    detail."""
    public_inits = [(c.cls, c.init) for c in cases if c.set != "hidden"]
    hidden_inits = [(c.cls, c.init) for c in cases if c.set == "hidden"]
    return {probe.id for probe in probes if probe.hidden or (
        probe.inspect and (probe.cls, probe.init) in hidden_inits
        and (probe.cls, probe.init) not in public_inits)}


def _printed(probes: list[Probe], results: dict[str, ProbeResult]) -> str:
    text = "".join(results[p.id].stdout for p in probes
                   if results[p.id] is not None)
    if len(text) > STDOUT_SHOWN:
        text = text[:STDOUT_SHOWN] + \
            f"\n[... {len(text) - STDOUT_SHOWN} more characters not shown]"
    return text


def failed_grade(name: str, filename: str, rubric: Rubric, *,
                 error: str = "", internal_error: str = "") -> GradeResult:
    """A zero grade, out of ``rubric``'s maximum, for a submission that
    could not be graded at all."""
    return GradeResult.of(rubric, name, filename, error=error,
                          internal_error=internal_error)


def sandbox_runner(sandbox: Any = None, **limits: Any) -> Runner:
    """A Runner on ``sandbox`` (a autograder.sandbox.pool.Sandbox), or on the
    module's default sandbox."""
    def run(source: str, filename: str,
            probes: list[Probe]) -> list[ProbeResult]:
        if sandbox is None:
            from autograder.sandbox.pool import run_probes
            return run_probes(source, filename, probes, **limits)
        return sandbox.run(source, filename, probes, **limits)
    return run


__all__ = ["CheckResult", "GradeResult", "Runner", "TaskResult",
           "failed_grade", "grade_source", "grading_context",
           "hidden_probe_ids", "plan_checks", "plan_probes",
           "run_phased", "sandbox_runner"]
