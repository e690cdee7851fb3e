"""Kinds that judge the source text: PEP 8 inside a task's class (a
deduction), code that reaches into the grader (a deduction), shape
comments checked against a traced run (a deduction) and a method's
statement count (a bonus).

They parse the student's code (``ast``, ``tokenize``, ``pycodestyle``) in
the grading parent and never import it; only the shape comments' traced
calls run in the sandbox.
"""
from __future__ import annotations

import re
import secrets
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from autograder import probes as P
from autograder.checks.base import FAIL, PASS, Context
from autograder.checks.compare import close
from autograder.sandbox.protocol import Probe, ProbeResult, StandIn
from autograder.checks.entries import Check, Outcome, Task
from autograder.checks.registry import register
from autograder.values import Case

if TYPE_CHECKING:
    from autograder.checks.shape_notation import Notation


def unreadable(task: Task, ctx: Context) -> list[str]:
    """Lines saying why the task's static rules (PEP 8, shape comments,
    the bonus) count as failed: code charged to the task that reaches
    into the grader (``grader_access``) or runs code from strings builds
    code the grader cannot read, and code the grader cannot read never
    scores better than the same code written plainly. [] if none."""
    from autograder.checks.grader_access import access_issues
    try:
        found = access_issues(ctx.source, task.cls, tuple(ctx.task_methods))
    except (SyntaxError, RecursionError, MemoryError):
        return []      # reported by the rules themselves
    if not found:
        return []
    return [f"- {FAIL} {task.cls}: code the grader cannot read ("
            f"{found[0].message}: code run from strings or reached through "
            f"the interpreter) counts as failing this rule too; write it "
            f"plainly"]


@dataclass(frozen=True)
class ShapeCommentsParams:
    """The traced calls: constructor arguments, input shape, and what
    varies between the calls."""

    init: dict
    input: list
    vary_init: dict | None = None
    vary_kwargs: dict | None = None
    vary_train: list | None = None
    # Sizes a name stands for that the constructor does not show.
    extra_dims: dict = field(default_factory=dict)
    # Another class the traced one uses, replaced (Probe.stand_in).
    stand_in: dict = field(default_factory=dict)
    # A traced call and its untraced twin agree within this.
    twin_atol: float = 1e-6


@dataclass(frozen=True)
class StatementCountParams:
    """The method counted and the most statements the bonus allows."""

    method: str
    max_statements: int


# A pycodestyle code or prefix of codes ("E501", "E1", "W"), as its
# ``--ignore`` takes them.
_STYLE_CODE = re.compile(r"[EWC]\d{0,3}")


@dataclass(frozen=True)
class PycodestyleParams:
    """pycodestyle's options: the codes (or code prefixes) ignored besides
    pycodestyle's own default list (which the rule always ignores), and
    the longest line allowed."""

    ignore: list[str] = field(default_factory=list)
    max_line_length: int = 79

    def __post_init__(self) -> None:
        if not all(isinstance(c, str) and _STYLE_CODE.fullmatch(c)
                   for c in self.ignore):
            raise ValueError(f"ignore must list pycodestyle codes such as "
                             f"\"E501\" or \"W\" (got {self.ignore!r})")
        if not 1 <= self.max_line_length <= 1000:
            raise ValueError(f"max_line_length must be from 1 to 1000 (got "
                             f"{self.max_line_length})")

    @property
    def ignored(self) -> tuple[str, ...]:
        """``ignore`` as a tuple (hashable, for the style check's cache)."""
        return tuple(self.ignore)


@register("deduction", "pycodestyle", params=PycodestyleParams)
class Pycodestyle:
    """Any pycodestyle violation inside the task's class."""

    def plan(self, check: Check, task: Task, cases: list[Case],
             ctx: Context) -> list[Probe]:
        """Static: no probe."""
        return []

    def evaluate(self, check: Check, task: Task, cases: list[Case],
                 results: dict[str, ProbeResult], ctx: Context) -> Outcome:
        """Triggered (points to deduct) if the class has a violation."""
        from autograder.checks.style import style_issues, too_long
        hidden = unreadable(task, ctx)
        if hidden:
            return Outcome(check.points, False, hidden)
        reason = too_long(ctx.source)
        try:
            issues = [] if reason else style_issues(
                ctx.source, task.cls, ctx.task_methods,
                ctx.extra.get("ran"), ignore=check.params.ignored,
                max_line_length=check.params.max_line_length)
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


@register("deduction", "grader_access")
class GraderAccess:
    """Code that reaches into the grader (``checks/grader_access.py``) in
    the task's class, or outside every task's class (it runs for every
    task): the rule the rubric states, found on the parsed module."""

    def plan(self, check: Check, task: Task, cases: list[Case],
             ctx: Context) -> list[Probe]:
        """Static: no probe."""
        return []

    def evaluate(self, check: Check, task: Task, cases: list[Case],
                 results: dict[str, ProbeResult], ctx: Context) -> Outcome:
        """Triggered (points to deduct) by any finding charged to the
        task; the lines name each place and the rule."""
        from autograder.checks.grader_access import access_issues
        caught = caught_reach_ins(task, ctx)
        try:
            found = [f.message for f in access_issues(
                ctx.source, task.cls, tuple(ctx.task_methods))]
        except SyntaxError:
            if caught:
                return _access_failed(check, caught)
            return Outcome(0.0, True, [f"- {PASS} (the module does not "
                                       f"parse: reported elsewhere)"])
        except (RecursionError, MemoryError):
            return Outcome(check.points, False, [
                f"- {FAIL} {task.cls}: the code is nested too deeply for "
                f"the grader to read, so it cannot be shown to leave the "
                f"grader alone; the deduction applies"])
        if not found and not caught:
            return Outcome(0.0, True, [f"- {PASS} {task.cls} leaves the "
                                       f"grader alone"])
        return _access_failed(check, found + caught)


def caught_reach_ins(task: Task, ctx: Context) -> list[str]:
    """The reach-ins caught at run time, whatever the spelling
    (``sandbox/audit.py``), charged to ``task``: those caught while its
    calls ran, or earlier calls in the same process (which could have
    changed its answers), and those the grader cannot place (at import,
    or a change of the grader's state found later), which every task is
    charged, as code outside every class is; each line says which."""
    by_task = ctx.extra.get("reach_by_task")
    everywhere = ctx.extra.get("reach_everywhere") if by_task is not None \
        else ctx.extra.get("reach_ins")
    everywhere = list(everywhere or [])
    own = [what for what in (by_task or {}).get(task.cls, [])
           if what not in everywhere]
    return [f"while {task.cls}'s calls, or earlier calls in the same "
            f"process, ran: {what}" for what in own] + \
        [f"while it ran (where the grader cannot tell which task's code "
         f"did it, so every task is charged): {what}"
         for what in everywhere]


def _access_failed(check: Check, findings: list[str]) -> Outcome:
    """The access deduction taken, with the first ``findings``."""
    from autograder.checks.grader_access import MAX_SHOWN
    lines = [f"- {FAIL} code that reaches into the grader (the "
             f"interpreter's internals, code run from strings or the "
             f"grader's modules), which the rules forbid; staff see "
             f"this in the class report:"]
    lines += [f"  - {message}" for message in findings[:MAX_SHOWN]]
    if len(findings) > MAX_SHOWN:
        lines.append(f"  - ... and {len(findings) - MAX_SHOWN} more")
    return Outcome(check.points, False, lines)


def _ranks_by_line(results: dict[str, ProbeResult]
                   ) -> dict[int, set[tuple[int, ...]]]:
    """Per line, the ranks its tensors had in every traced call, every
    task's: a helper shared by a 3-d and a 4-d task binds both, which a
    leading ``...`` in its comment may stand for."""
    from autograder.checks.shape_comments import run_ranks
    ranks: dict[int, set[tuple[int, ...]]] = {}
    for result in results.values():
        if result.ok:
            for line, runs in result.shapes.items():
                ranks.setdefault(int(line), set()).update(run_ranks(runs))
    return ranks


def _notation(ctx: Context) -> Notation:
    """The homework's shape notation the context carries; a context built
    without one (not by grade.grading_context) is the grader's error."""
    if ctx.notation is None:
        raise ValueError("the grading context carries no shape notation: "
                         "build it with grade.grading_context(config), "
                         "which reads the config's profile")
    return ctx.notation


def _trace_problem(task: Task, probe: Probe, result: ProbeResult,
                   ctx: Context) -> str | None:
    """Why a traced call's record is no evidence of its shapes (its
    content contradicts the call, or code reached into the grader while
    it ran), or None."""
    from autograder.checks.trace_integrity import trace_problem
    outputs = result.outputs if result.output_kind in ("tensor",
                                                       "tuple") else None
    return result.trace_forged or trace_problem(
        ctx.source, task.cls, probe.canary, result.shapes, outputs) or (
        "code reached into the grader while it ran"
        if ctx.extra.get("reach_ins") else None)


@register("deduction", "shape_comments", params=ShapeCommentsParams)
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
            task.cls, params.init, params.input,
            vary_init=params.vary_init, vary_kwargs=params.vary_kwargs,
            vary_train=params.vary_train)
        # stand_in (see Probe.stand_in): another class the traced one
        # uses, replaced, so that its mistakes do not change this class's
        # shapes (the wrapper's heads).
        stand_in = StandIn.of(params.stand_in)
        # The canary's nonce: one per submission, chosen here, where the
        # student's code cannot see it before its trace is taken.
        nonce = ctx.extra.setdefault("canary", secrets.randbelow(1 << 30))
        return [replace(p, seed=P.TRACE_SEED, methods=ctx.task_methods,
                        stand_in=stand_in, canary=nonce) for p in traces]

    @staticmethod
    def _twin(probe: Probe) -> Probe:
        return replace(probe, id=f"untraced-{probe.id}", trace_shapes=False)

    def plan(self, check: Check, task: Task, cases: list[Case],
             ctx: Context) -> list[Probe]:
        """Traced calls with fresh weights and all-distinct sizes, each
        with its untraced twin (code must not behave differently when its
        shapes are traced)."""
        traces = self._traces(check, task, ctx)
        return traces + [self._twin(p) for p in traces]

    @staticmethod
    def dims(check: Check) -> dict[str, int]:
        """The traced sizes by canonical name."""
        init = check.params.init
        shape = check.params.input
        dims = {"batch_size": shape[0], "seq_len": shape[1],
                **{k: v for k, v in init.items()
                   if isinstance(v, int) and not isinstance(v, bool)}}
        # A derived size (a head's) comes from the notation's table
        # (shape_notation.Notation.normalise_dims). Sizes a name stands for
        # that the constructor does not show, e.g. the wrapper's head size
        # (its d_out).
        dims.update(check.params.extra_dims)
        return dims

    def evaluate(self, check: Check, task: Task, cases: list[Case],
                 results: dict[str, ProbeResult], ctx: Context) -> Outcome:
        """Triggered if any statement's comment is missing or wrong, if the
        code behaves differently when traced, or if the comments cannot be
        read at all."""
        from autograder.checks.shape_comments import check_shape_comments
        from autograder.submission.regions import graded_regions
        from autograder.checks.trace_integrity import CANARY_LINE
        observed: dict[int, list[list[list[int]]]] = {}
        failed: list[tuple[Probe, ProbeResult]] = []
        problem: str | None = None    # why a trace is not evidence
        for probe in self._traces(check, task, ctx):
            result = results[probe.id]
            if not result.ok:
                failed.append((probe, result))
            elif problem is None:
                problem = _trace_problem(task, probe, result, ctx)
            for line, runs in result.shapes.items():
                seen = observed.setdefault(int(line), [])
                seen.extend(r for r in runs if r not in seen)
            twin = results.get(self._twin(probe).id)
            if twin is not None and _differs(result, twin,
                                             check.params.twin_atol):
                return Outcome(check.points, False, [
                    f"- {FAIL} shape comments in {task.cls}: your code "
                    f"behaves differently when its shapes are traced ("
                    f"{_difference(probe, result, twin)}), so its comments "
                    f"cannot be checked; the deduction applies"])
        observed.pop(CANARY_LINE, None)
        hidden = unreadable(task, ctx)
        if hidden:
            return Outcome(check.points, False, hidden)
        methods = ctx.task_methods
        ran = ctx.extra.get("ran")
        try:
            issues = [i for i in check_shape_comments(
                ctx.source, observed, self.dims(check), methods=methods,
                ran=ran, classes={task.cls}, notation=_notation(ctx),
                ranks=_ranks_by_line(results))
                if i.cls == task.cls]
            unmarked = [r for r in graded_regions(ctx.source,
                                                  methods=methods, ran=ran)
                        if not r.marked and not r.outside
                        and r.cls == task.cls]
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


def _differs(traced: ProbeResult, twin: ProbeResult, atol: float) -> bool:
    """Whether a traced call and its untraced twin (same weights, input
    and seed) ended differently (outputs beyond ``atol``). A traced copy
    that failed to import is not counted: that may be the grader's
    instrumentation, and the grader never charges a student for its own
    failure (the note says so)."""
    if traced.phase == "import":
        return False
    if traced.ok != twin.ok or traced.output_kind != twin.output_kind or \
            len(traced.outputs) != len(twin.outputs):
        return True
    return not all(close(a, b, atol, equal_nan=True)
                   for a, b in zip(traced.outputs, twin.outputs))


def _difference(probe: Probe, traced: ProbeResult, twin: ProbeResult) -> str:
    call = P.call_text(probe)
    if not traced.ok and twin.ok:
        return f"{call} raised only when traced: {P.short_failure(traced)}"
    if traced.ok and not twin.ok:
        return f"{call} raised only when not traced"
    return f"{call} returned other values when traced"


@register("bonus", "statement_count", params=StatementCountParams)
class StatementCount:
    """At most N statements run for a method: its own and its helpers'
    (``statements.count_statements``; docstrings aside)."""

    def plan(self, check: Check, task: Task, cases: list[Case],
             ctx: Context) -> list[Probe]:
        """Static: no probe."""
        return []

    def evaluate(self, check: Check, task: Task, cases: list[Case],
                 results: dict[str, ProbeResult], ctx: Context) -> Outcome:
        """Earned when the count is small enough (``requires`` is applied
        by the caller)."""
        from autograder.checks.statements import count_statements
        method = check.params.method
        limit = check.params.max_statements
        ran = (ctx.extra.get("ran") or {}).get(task.cls, ())
        count = count_statements(ctx.source, task.cls, method, ran)
        where = f"{task.cls}.{method}"
        if count is None:
            return Outcome(0.0, False, [f"- {FAIL} {where} not found"])
        hidden = unreadable(task, ctx)
        if hidden:
            return Outcome(0.0, False, hidden)
        # The helpers a method runs count with it: a one-statement
        # forward calling a six-statement helper is seven statements.
        alone = count_statements(ctx.source, task.cls, method,
                                 helpers=False)
        with_helpers = " (with the functions of yours it runs)" \
            if count != alone else ""
        if count <= limit:
            return Outcome(check.points, True, [
                f"- {PASS} {where} has {count} statement"
                f"{'s' * (count != 1)}{with_helpers} (at most {limit})"])
        return Outcome(0.0, False, [f"- {FAIL} {where} has {count} "
                                    f"statements{with_helpers}; the bonus "
                                    f"needs at most {limit}"])
