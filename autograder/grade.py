"""Grade one submission against the rubric.

Plans every probe the rubric's checks need (deduplicated), runs them in the
sandbox in one go, evaluates each check in this (trusted) process, and
applies the task rules: items add up, deductions take points away down to
a floor of 0, bonuses come on top when the items they require passed.

Static check kinds (PEP 8, shape comments, statement count) live here; the
value kinds in autograder/checks/values.py.
"""
from __future__ import annotations

import secrets
import time
import traceback
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from autograder.report import mdsafe
from autograder import probes as P
from autograder.checks.base import FAIL, PASS, Context
from autograder.checks.compare import close
from autograder.config import GradingConfig
from autograder.sandbox.protocol import (CRASH, ENVIRONMENT, MEMORY, NOT_RUN,
                                         TIMEOUT, Probe, ProbeResult)
from autograder.rubric import (Check, Outcome, Rubric, RubricError, Task,
                               kind, register, select_cases)

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
    notes: list[str] = field(default_factory=list)
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
# Static check kinds

@register("deduction", "pycodestyle")
class Pycodestyle:
    """Any pycodestyle violation inside the task's class."""

    def plan(self, check: Check, task: Task, cases: list,
             ctx: Context) -> list[Probe]:
        """Static: no probe."""
        return []

    def evaluate(self, check: Check, task: Task, cases: list,
                 results: dict[str, ProbeResult], ctx: Context) -> Outcome:
        """Triggered (points to deduct) if the class has a violation."""
        from autograder.checks.style import style_issues, too_long
        reason = too_long(ctx.source)
        try:
            issues = [] if reason else style_issues(
                ctx.source, task.cls, ctx.task_methods or None,
                ctx.extra.get("ran"))
        except (RecursionError, MemoryError):
            reason = ("the code is nested too deeply for the style check, "
                      "so the deduction applies")
        if reason:
            return Outcome(check.points, False,
                           [f"- {FAIL} {task.cls}: {reason}"])
        if not issues:
            return Outcome(0.0, True, [f"- {PASS} no pycodestyle violation in "
                                       f"{task.cls}"])
        lines = [f"- {FAIL} {len(issues)} pycodestyle violation"
                 f"{'s' * (len(issues) > 1)} in {task.cls}:"]
        lines += [f"  - {issue.message}" for issue in issues[:20]]
        if len(issues) > 20:
            lines.append(f"  - ... and {len(issues) - 20} more")
        return Outcome(check.points, False, lines)


@register("deduction", "shape_comments", required=("init", "input"),
          params={"init": dict, "input": list, "vary_init": dict,
                  "vary_kwargs": dict, "vary_train": list,
                  "extra_dims": dict, "stand_in": dict})
class ShapeComments:
    """Every tensor-producing student statement of the class carries a
    shape comment that matches the shapes a traced run observed."""

    def _traces(self, check: Check, task: Task, ctx: Context
                ) -> list[Probe]:
        params = check.params
        # Seeded, so that each traced call has an untraced twin with the
        # same weights and input; the worker traces the unmarked methods
        # of the rubric being graded.
        traces = P.trace_probes(
            task.cls, params["init"], params["input"],
            vary_init=params.get("vary_init"),
            vary_kwargs=params.get("vary_kwargs"),
            vary_train=params.get("vary_train"), timeout=check.timeout)
        # stand_in (see Probe.stand_in): another class the traced one
        # uses, replaced, so that its mistakes do not change this class's
        # shapes (the wrapper's heads).
        stand_in = dict(params.get("stand_in", {}))
        # The canary's nonce: one per submission, chosen here, where the
        # student's code cannot see it before its trace is taken.
        nonce = ctx.extra.setdefault("canary", secrets.randbelow(1 << 30))
        return [replace(p, seed=P.TRACE_SEED, methods=ctx.task_methods,
                        stand_in=stand_in, canary=nonce) for p in traces]

    @staticmethod
    def _twin(probe: Probe) -> Probe:
        return replace(probe, id=f"untraced-{probe.id}", trace_shapes=False)

    def plan(self, check: Check, task: Task, cases: list,
             ctx: Context) -> list[Probe]:
        """Traced calls with fresh weights and all-distinct sizes, each
        with its untraced twin (code must not behave differently when its
        shapes are traced)."""
        traces = self._traces(check, task, ctx)
        return traces + [self._twin(p) for p in traces]

    @staticmethod
    def dims(check: Check) -> dict[str, int]:
        """The traced sizes by canonical name."""
        init = check.params["init"]
        shape = check.params["input"]
        dims = {"batch_size": shape[0], "seq_len": shape[1],
                **{k: v for k, v in init.items()
                   if isinstance(v, int) and not isinstance(v, bool)}}
        if "num_heads" in dims and "hidden" in dims:
            dims["head_size"] = dims["hidden"] // dims["num_heads"]
        # Sizes a name stands for that the constructor does not show, e.g.
        # the wrapper's head size (its d_out).
        dims.update(check.params.get("extra_dims", {}))
        return dims

    def evaluate(self, check: Check, task: Task, cases: list,
                 results: dict[str, ProbeResult], ctx: Context) -> Outcome:
        """Triggered if any statement's comment is missing or wrong, if the
        code behaves differently when traced, or if the comments cannot be
        read at all."""
        from autograder.checks.shape_comments import check_shape_comments
        from autograder.submission.regions import graded_regions
        from autograder.checks.trace_integrity import (CANARY_LINE,
                                                       trace_problem)
        observed: dict[int, list[list[list[int]]]] = {}
        failed: list[tuple[Probe, ProbeResult]] = []
        problem: str | None = None    # why a trace is not evidence
        for probe in self._traces(check, task, ctx):
            result = results[probe.id]
            if not result.ok:
                failed.append((probe, result))
            elif problem is None:
                problem = trace_problem(ctx.source, task.cls, probe.canary,
                                        result.shapes)
            for line, runs in result.shapes.items():
                seen = observed.setdefault(int(line), [])
                seen.extend(r for r in runs if r not in seen)
            twin = results.get(self._twin(probe).id)
            if twin is not None and _differs(result, twin):
                return Outcome(check.points, False, [
                    f"- {FAIL} shape comments in {task.cls}: your code "
                    f"behaves differently when its shapes are traced ("
                    f"{_difference(probe, result, twin)}), so its comments "
                    f"cannot be checked; the deduction applies"])
        observed.pop(CANARY_LINE, None)
        methods = ctx.task_methods or None
        ran = ctx.extra.get("ran")
        try:
            issues = [i for i in check_shape_comments(
                ctx.source, observed, self.dims(check), methods=methods,
                ran=ran) if i.cls == task.cls]
            unmarked = [r for r in graded_regions(ctx.source,
                                                  methods=methods, ran=ran)
                        if not r.marked and r.cls == task.cls]
        except SyntaxError:
            return Outcome(0.0, True, [f"- {PASS} (the module does not "
                                       f"parse: reported elsewhere)"])
        except (RecursionError, MemoryError):
            return Outcome(check.points, False, [
                f"- {FAIL} shape comments in {task.cls}: the code is nested "
                f"too deeply for the grader to read, so its comments "
                f"cannot be checked; the deduction applies"])
        if problem:
            return Outcome(check.points, False, [
                f"- {FAIL} shape comments in {task.cls}: the grader's trace "
                f"of your code's shapes is incomplete ({problem}; does your "
                f"code change the grader's objects?), so its comments "
                f"cannot be checked; the deduction applies"])
        note = [f"- `{r.function}`, which your {task.cls} code "
                f"{'ran' if r.first else 'calls'}, is checked with it"
                if r.helper else
                f"- no `# YOUR CODE STARTS HERE` markers in "
                f"{r.cls or r.function}.{r.function}: the whole method is "
                f"checked" if r.cls else f"- no `# YOUR CODE STARTS HERE` "
                f"markers in {r.function}: the whole function is checked"
                for r in unmarked]
        if failed:
            probe, result = failed[0]
            why = P.failure_text(result, probe).splitlines()[0]
            note.append(f"- (the traced call stopped: {why}; lines it did "
                        f"not reach were checked only for a comment)")
        if not issues:
            return Outcome(0.0, True, [f"- {PASS} shape comments in "
                                       f"{task.cls} are present and right"]
                           + note)
        lines = [f"- {FAIL} shape comments in {task.cls}:"]
        lines += [f"  - {issue.message}" for issue in issues]
        return Outcome(check.points, False, lines + note)


def _differs(traced: ProbeResult, twin: ProbeResult) -> bool:
    """Whether a traced call and its untraced twin (same weights, input
    and seed) ended differently. A traced copy that failed to import is
    not counted: that may be the grader's instrumentation, and the grader
    never charges a student for its own failure (the note says so)."""
    if traced.phase == "import":
        return False
    if traced.ok != twin.ok or traced.output_kind != twin.output_kind or \
            len(traced.outputs) != len(twin.outputs):
        return True
    return not all(close(a, b, 1e-6, equal_nan=True)
                   for a, b in zip(traced.outputs, twin.outputs))


def _difference(probe: Probe, traced: ProbeResult, twin: ProbeResult) -> str:
    call = P.call_text(probe)
    if not traced.ok and twin.ok:
        return f"{call} raised only when traced: {P.short_failure(traced)}"
    if traced.ok and not twin.ok:
        return f"{call} raised only when not traced"
    return f"{call} returned other values when traced"


@register("bonus", "statement_count", required=("method", "max_statements"),
          params={"method": str, "max_statements": int})
class StatementCount:
    """At most N statements in a method (docstring aside)."""

    def plan(self, check: Check, task: Task, cases: list,
             ctx: Context) -> list[Probe]:
        """Static: no probe."""
        return []

    def evaluate(self, check: Check, task: Task, cases: list,
                 results: dict[str, ProbeResult], ctx: Context) -> Outcome:
        """Earned when the count is small enough (``requires`` is applied
        by the caller)."""
        from autograder.checks.statements import count_statements
        method = check.params["method"]
        limit = check.params["max_statements"]
        count = count_statements(ctx.source, task.cls, method)
        where = f"{task.cls}.{method}"
        if count is None:
            return Outcome(0.0, False, [f"- {FAIL} {where} not found"])
        if count <= limit:
            return Outcome(check.points, True, [
                f"- {PASS} {where} has {count} statement"
                f"{'s' * (count != 1)} (at most {limit})"])
        return Outcome(0.0, False, [f"- {FAIL} {where} has {count} "
                                    f"statements; the bonus needs at most "
                                    f"{limit}"])


# --------------------------------------------------------------------------
# Orchestration

def grading_context(config: GradingConfig, source: str = "",
                    public_only: bool = False) -> Context:
    """The context every check of ``config`` reads for ``source``: the
    mistake messages, the tolerance and the task methods all come from
    the config (none from a default file)."""
    return Context(config.mistakes, config.rubric.mistake_atol, source,
                   public_only, task_methods=config.task_methods)


def _cases_for(check: Check, cases: list, public_only: bool) -> list:
    if not check.cases:
        return []
    chosen = select_cases(check.cases, cases)
    if not chosen and not public_only:
        raise RubricError(f"{check.section} {check.id!r} selects no test "
                          f"case with {check.cases}")
    return chosen


def plan_checks(config: GradingConfig, ctx: Context,
                timeout: float | None = None
                ) -> list[tuple[Check, list[Probe]]]:
    """Each check of ``config``'s rubric with the probes it needs on its
    cases (ids shared between checks). Raises RubricError if a check
    selects no case (unless public-only)."""
    planned = []
    for task in config.rubric.tasks:
        for check in (*task.items, *task.deductions, *task.bonuses):
            chosen = _cases_for(check, config.cases, ctx.public_only)
            if check.cases and not chosen:
                continue
            found = kind(check).impl.plan(check, task, chosen, ctx)
            if timeout is not None:
                found = [replace(p, timeout=timeout) for p in found]
            planned.append((check, found))
    return planned


def plan_probes(config: GradingConfig, ctx: Context,
                timeout: float | None = None) -> list[Probe]:
    """Every probe the rubric needs, once each, in rubric order."""
    return _unique(p for _, found in plan_checks(config, ctx, timeout)
                   for p in found)


def _unique(probes) -> list[Probe]:
    seen: dict[str, Probe] = {}
    for probe in probes:
        first = seen.setdefault(probe.id, probe)
        if probe.again and not first.again:
            # One run serves every check that shares it: the second call
            # that one of them asks for (module_output) is made.
            seen[probe.id] = replace(first, again=True)
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
                 public_only: bool = False, timeout: float | None = None
                 ) -> GradeResult:
    """Grade ``source`` (the text of modeling_attention.py) by ``config``
    (its rubric, cases and mistakes: nothing else is read). Never raises
    because of the submission; an internal failure is recorded in
    ``internal_error`` with score 0. ``timeout`` overrides every probe's
    time limit (tests use short ones for hostile code)."""
    start = time.perf_counter()
    rubric, cases = config.rubric, config.cases
    grade = GradeResult.of(rubric, name, filename, public_only=public_only)
    try:
        ctx = grading_context(config, source, public_only)
        planned = plan_checks(config, ctx, timeout)
        probes = _unique(p for _, found in planned for p in found)
        hidden = hidden_probe_ids(probes, cases)
        results = run_phased(planned, source, filename, runner, hidden)
        ctx.extra["ran"] = ran_by_task(rubric, planned, results)
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
        grade.stdout = _printed([p for p in probes if p.id not in hidden],
                                results)
        grade.hidden_stdout = _printed([p for p in probes if p.id in hidden],
                                       results)
        grade.tasks = [_score_task(t, cases, results, ctx)
                       for t in rubric.tasks]
    except RubricError:
        raise
    except Exception:   # noqa: BLE001 - results.json must still be written
        grade.tasks = []
        grade.internal_error = traceback.format_exc()
    grade.seconds = time.perf_counter() - start
    return grade


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


def hidden_probe_ids(probes: list[Probe], cases: list) -> set[str]:
    """The probes that run a hidden case's inputs (their ids start with the
    case's name) or build a module of a hidden case's sizes that no public
    case shares: what they print is a hidden detail."""
    hidden = {c.name for c in cases if c.set == "hidden"}
    public_inits = [(c.cls, c.init) for c in cases if c.set != "hidden"]
    hidden_inits = [(c.cls, c.init) for c in cases if c.set == "hidden"]
    found = set()
    for probe in probes:
        if probe.id.split(":", 1)[0] in hidden:
            found.add(probe.id)
        elif probe.id.startswith("inspect:") and \
                (probe.cls, probe.init) in hidden_inits and \
                (probe.cls, probe.init) not in public_inits:
            found.add(probe.id)
    return found


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
