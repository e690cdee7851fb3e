"""What every check kind shares: the context a kind may consult, a case's
verdict, the all-or-nothing case-by-case item (``CaseCheck``) and how its
verdicts become one outcome with lines a student reads.

A kind is a class registered by name for ``rubric.toml``
(``autograder.checks.registry.register``) that follows ``CheckKind``:
``plan`` lists the probes an item needs, ``evaluate`` judges their results
in the grading parent, against tensors that never reach the worker.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

from autograder import probes as P
from autograder.sandbox.protocol import Probe, ProbeResult
from autograder.checks.entries import Check, Outcome, Task
from autograder.values import Case

if TYPE_CHECKING:
    from autograder.checks.shape_notation import Notation

# A layer's attribute name, as a kind's rubric parameter gives it.
ATTRIBUTE_NAME = re.compile(r"[A-Za-z_]\w{0,99}")

PASS, FAIL = "✔", "✘"


@dataclass
class Context:
    """What every check may consult besides its probes' results."""

    mistake_messages: dict[str, str]     # catalogue id -> explanation
    mistake_atol: float = 1e-5
    source: str = ""
    public_only: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
    # The graded rubric's task methods (class -> methods), always the
    # config's (grade.grading_context): which unmarked methods the
    # deductions read.
    task_methods: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # The homework's shape-comment notation (grade.grading_context: the
    # config's profile's), read by the shape-comment deduction.
    notation: Notation | None = None


@dataclass
class Verdict:
    """One case's result within an item."""

    ok: bool
    message: str = ""            # full, student-facing
    short: str = ""              # a few words, no values (hidden cases)
    mistake: str | None = None
    # Every catalogue mistake this case's answer equals (catalogue order);
    # ``mistake`` is the first of them.
    candidates: tuple[str, ...] = ()
    not_implemented: bool = False
    # A passing case that shows nothing of the behaviour the item names
    # (e.g. outputs all NaN): the item needs at least one case with
    # evidence (see CaseCheck.no_evidence).
    evidence: bool = True
    # Without evidence, what was measured when nothing proves the
    # behaviour absent (the item then says this, not its
    # ``no_evidence`` cause: see CaseCheck.unshown).
    unshown: str = ""
    # A cause proven on this case's values, in a few words without
    # values: the class report groups failures by it (Outcome.diagnosis).
    cause: str = ""


class CheckKind(Protocol):
    """What every registered kind does, for every section (item,
    deduction, bonus)."""

    def plan(self, check: Check, task: Task, cases: list[Case],
             ctx: Context) -> list[Probe]:
        """The probes ``check`` needs on ``cases`` (those its filter
        selects; empty for a kind without cases)."""

    def evaluate(self, check: Check, task: Task, cases: list[Case],
                 results: dict[str, ProbeResult], ctx: Context) -> Outcome:
        """The outcome from the planned probes' results (by probe id)."""


# --------------------------------------------------------------------------
# Shared machinery

def _hint(mistake: str | None) -> str:
    if mistake is None:
        return ""
    # Named only when it explains every failing case (named_mistake): an
    # equality on the student's values, not a resemblance.
    return (f" (on every failing case your values are those of the common "
            f"mistake `{mistake}`, see below)")


def named_mistake(verdicts: list[Verdict]) -> str | None:
    """The catalogue mistake an item's feedback may name: the one that
    explains EVERY failing case (a mistake seen on one case only, or two
    different ones, is no diagnosis: the wrong name misleads more than no
    name)."""
    failing = [v for v in verdicts if not v.ok]
    if not failing:
        return None
    # Where two mistakes coincide on a case (one head: sqrt(hidden) is
    # sqrt(head_size)) the case is explained by either; name the one that
    # explains every case.
    options = [v.candidates or ((v.mistake,) if v.mistake else ())
               for v in failing]
    common = set(options[0]).intersection(*options[1:])
    return next((m for m in options[0] if m in common), None)


def _failed_probe(results: list[ProbeResult],
                  probes: list[Probe]) -> Verdict | None:
    for result, probe in zip(results, probes):
        if not result.ok:
            return Verdict(False, P.failure_text(result, probe),
                           P.short_failure(result),
                           not_implemented=P.is_not_implemented(result))
    return None


_UNFINISHED = re.compile(r"Task (\d+\.\d+) not implemented yet")


def _explain_other_task(verdict: Verdict | None,
                        check: Check) -> Verdict | None:
    """A student who finished 2.1 but not 2.3 sees 2.1 fail on "Task 2.3
    not implemented yet": say why (forward runs every task)."""
    found = _UNFINISHED.search(verdict.message) if verdict else None
    if found and not check.id.startswith(found.group(1)):
        verdict.message += (f" (item {check.id} is checked through the "
                            f"call, which also runs Task {found.group(1)})")
    return verdict


_SIZE_MISMATCH = re.compile(r"size of tensor a \((\d+)\) must match the "
                            r"size of tensor b \((\d+)\)")


def _explain_mask_size(verdict: Verdict | None, case: Case) -> Verdict | None:
    """A raw size error between exactly the context length (the case's
    "context" argument) and num_tokens is a mask not cut to the input's
    length: say so in words."""
    found = _SIZE_MISMATCH.search(verdict.message) if verdict else None
    name = getattr(case, "arguments", {}).get("context")
    context = getattr(case, "init", {}).get(name) if name else None
    x = getattr(case, "tensors", {}).get("x")
    if not found or context is None or x is None or x.dim() < 2:
        return verdict
    tokens = int(x.shape[1])
    if tokens != context and {int(found.group(1)), int(found.group(2))} == \
            {context, tokens}:
        verdict.message += (f" ({name} is {context} but the input "
                            f"has {tokens} tokens: cut the mask to the "
                            f"input, self.mask.bool()[:num_tokens, "
                            f":num_tokens])")
        verdict.short += " (mask not cut to num_tokens?)"
    return verdict


def _name_error(verdict: Verdict | None, case: Case) -> Verdict | None:
    """A failure whose error is the one a catalogue mistake's code raises
    on this case (frozen by the generator) is that mistake's candidate."""
    errors = getattr(case, "mistake_errors", {})
    if verdict is None or verdict.ok or not errors:
        return verdict
    found = tuple(m for m, text in errors.items() if text in verdict.message)
    if found:
        verdict.candidates, verdict.mistake = found, found[0]
    return verdict


def _case_label(case: Case) -> str:
    return f"`{case.name}` ({case.description})"


def aggregate(check: Check, cases: list[Case], verdicts: list[Verdict],
              ctx: Context) -> Outcome:
    """All-or-nothing over the cases: points only if every case passes.

    Public cases are described in full; hidden cases only by how many
    passed, their details go to ``hidden_lines``. Identical failures (an
    unfinished skeleton, an import error) are said once; each recognised
    mistake is explained once.
    """
    passed = all(v.ok for v in verdicts)
    outcome = Outcome(check.points if passed else 0.0, passed)
    named = named_mistake(verdicts)
    outcome.mistakes = [named] if named else []
    verdicts = [replace(v, message=v.message + _hint(named), mistake=named)
                if not v.ok and v.mistake else v for v in verdicts]
    outcome.not_implemented = any(v.not_implemented for v in verdicts)
    failures = [(c, v) for c, v in zip(cases, verdicts) if not v.ok]
    # Said once only if a public case shows the same failure (or it is the
    # unfinished skeleton): a hidden case's message waits for publication.
    if failures and len(failures) == len(cases) and \
            len({v.message for _, v in failures}) == 1 and \
            (any(c.set != "hidden" for c in cases)
             or failures[0][1].not_implemented):
        which = (f"all {len(cases)} cases" if len(cases) > 1 else
                 "the only case")
        outcome.lines.append(f"- {FAIL} {which}: {failures[0][1].message}")
    else:
        _case_lines(outcome, cases, verdicts)
    for mistake in outcome.mistakes:
        outcome.lines.append(f"- Common mistake `{mistake}`: "
                             f"{ctx.mistake_messages.get(mistake, '')}")
    for verdict in verdicts:
        if not verdict.ok and verdict.cause and \
                verdict.cause not in outcome.diagnosis:
            outcome.diagnosis.append(verdict.cause)
    return outcome


def _case_lines(outcome: Outcome, cases: list[Case],
                verdicts: list[Verdict]) -> None:
    # One policy for hidden cases: before publication a student sees how
    # many passed; which failed, their descriptions, shapes and messages
    # go to ``hidden_lines`` (shown once grades are published).
    hidden_ok = hidden_total = 0
    for case, verdict in zip(cases, verdicts):
        if case.set != "hidden":
            outcome.lines.append(
                f"- {PASS} public case {_case_label(case)}" if verdict.ok
                else f"- {FAIL} public case {_case_label(case)}: "
                     f"{verdict.message}")
            continue
        hidden_total += 1
        hidden_ok += verdict.ok
        if not verdict.ok:
            outcome.hidden_lines.append(
                f"- {FAIL} hidden case {_case_label(case)}: "
                f"{verdict.message}")
    if hidden_total:
        mark = PASS if hidden_ok == hidden_total else FAIL
        later = ("" if hidden_ok == hidden_total else
                 " (which ones and why is shown once grades are published)")
        outcome.lines.append(f"- {mark} hidden cases: {hidden_ok} of "
                             f"{hidden_total} passed{later}")


class CaseCheck:
    """An item judged case by case, all-or-nothing."""

    # How many of a case's first probes must end "ok" before ``judge`` is
    # asked (None: all); ``judge`` handles failures of the rest itself.
    required_probes: int | None = None

    def case_probes(self, check: Check, case: Case) -> list[Probe]:
        """The probes one case needs (shared by id with other items)."""
        raise NotImplementedError

    def required(self, check: Check, case: Case,
                 probes: list[Probe]) -> int | None:
        """How many of ``probes`` (the case's) must end "ok" before
        ``judge`` is asked (None: all)."""
        return self.required_probes

    def judge(self, check: Check, case: Case, results: list[ProbeResult],
              probes: list[Probe], ctx: Context) -> Verdict:
        """The verdict on one case from its probes' results."""
        raise NotImplementedError

    def plan(self, check: Check, task: Task, cases: list[Case],
             ctx: Context) -> list[Probe]:
        """Every probe of every selected case."""
        return [p for case in cases for p in self.case_probes(check, case)]

    def evaluate(self, check: Check, task: Task, cases: list[Case],
                 results: dict[str, ProbeResult], ctx: Context) -> Outcome:
        """Judge each case, then aggregate."""
        verdicts = []
        for case in cases:
            probes = self.case_probes(check, case)
            got = [results[p.id] for p in probes]
            need = slice(self.required(check, case, probes))
            failed = _name_error(_explain_mask_size(_explain_other_task(
                _failed_probe(got[need], probes[need]), check), case), case)
            verdicts.append(failed or self.judge(check, case, got, probes,
                                                 ctx))
        if verdicts and all(v.ok for v in verdicts) and \
                not any(v.evidence for v in verdicts):
            facts = list(dict.fromkeys(v.unshown for v in verdicts
                                       if v.unshown))
            said = self.unshown.format(facts="; ".join(facts)) if facts \
                else self.no_evidence
            return Outcome(0.0, False, [f"- {FAIL} {said}"])
        return aggregate(check, cases, verdicts, ctx)

    # Said when every case passes without evidence (a cause: only where
    # the cases prove it, none of them with ``Verdict.unshown``) ...
    no_evidence = "no case shows the behaviour this item checks"
    # ... and when a case's evidence failed short of proof: where, not
    # why ({facts}: the cases' ``unshown``, joined).
    unshown = "no case shows the behaviour this item checks: {facts}"
