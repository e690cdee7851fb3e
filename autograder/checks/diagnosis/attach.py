"""Run the diagnosis for a graded submission's failing value cases and add
what it finds to the feedback.

Only for items that failed on values with no catalogued mistake named (a
catalogued mistake keeps its own message), and only for their failing
cases: a passing submission costs nothing. The failing cases' calls run
once more, in one sandbox call, on a copy of the submission that records
its tensors' values (``Probe.trace_values``); the walk and the relations
run here, in the parent, against the frozen steps. A public case's
diagnosis joins the item's lines; a hidden case's waits for publication
(``hidden_lines``). Every diagnosis line starts with one of ``MARKS``
(a crash's, ``crash.MARK``) so that tools comparing verdicts can keep it
apart.
"""
from __future__ import annotations

import ast
import bisect
import functools
from dataclasses import dataclass, replace
from typing import Any, Callable

import torch

from autograder.checks.compare import close
from autograder.checks.diagnosis import code_facts, crash, fused, relations
from autograder.checks.diagnosis.flow import (Divergence, heads_stacked,
                                              matches, walk)
from autograder.checks.diagnosis.sizes import head_size, named_sizes, quote
from autograder.checks.diagnosis.steps import STEPS, case_steps
from autograder.checks.entries import select_cases
from autograder.checks.kinds import kind
from autograder.sandbox.protocol import Probe, ProbeResult
from autograder.submission import regions
from autograder.text import mdsafe
from autograder.values import Case

MARK = "- Where your values leave the reference"
MARKS = (MARK, crash.MARK, *code_facts.MARKS)   # every line the diagnosis adds
KINDS = ("module_output",)          # items whose output a diagnosis follows
MAX_PUBLIC_LINES = 2                # diagnosed public cases shown per item


@dataclass
class Finding:
    """One failing case's diagnosis: where, and the relation if any."""

    case: Case
    divergence: Divergence
    relation: relations.Relation | None
    code: str
    roles: str = ""     # what each tensor of a line binding several is
    missing: tuple[str, ...] = ()   # q, k or v: no recorded tensor is it

    @property
    def key(self) -> str:
        """What groups a class's failures: the step and the relation."""
        step = STEPS[self.divergence.step].words
        return f"{step}: {self.relation.key}" if self.relation else step


def diagnosable(case: Case) -> bool:
    """Whether the case froze what the walk follows: the reference's
    steps and the scale of its scores."""
    return case.scale is not None and bool(case_steps(case.tensors))


def failing_cases(grade: Any, config: Any, results: dict[str, ProbeResult],
                  public_only: bool) -> list[tuple[Any, Any, Probe]]:
    """(item result, case, first eval probe) of every case that failed on
    values (right shape, other numbers) in an item worth diagnosing."""
    found = []
    for task in grade.tasks:
        for item in task.items:
            check, outcome = item.check, item.outcome
            if outcome.passed or outcome.mistakes or \
                    check.kind not in KINDS or not check.cases:
                continue
            cases = [c for c in select_cases(check.cases, config.cases)
                     if not (public_only and c.set == "hidden")]
            impl = kind(check).impl
            for case in cases:
                if not diagnosable(case):
                    continue
                # the limit the grade gave them (grade.plan_checks)
                probes = [replace(p, timeout=config.time_limit(check))
                          for p in impl.case_probes(check, case)
                          if not p.train]
                result = results.get(probes[0].id) if probes else None
                if result is None or not result.ok or not result.outputs:
                    continue
                got, expected = result.outputs[0], case.tensors["output"]
                if tuple(got.shape) == tuple(expected.shape) and \
                        not close(got, expected, check.atol, check.rtol):
                    found.append((item, case, probes[0]))
    return found


def diagnosis_probe(probe: Probe, case: Case,
                    methods: dict[str, tuple[str, ...]]) -> Probe:
    """The failing call again, on the value-recording copy, seeded with
    the case's seed: code that draws in eval mode (dropout left on) gives
    the same values, so the same line, on every run."""
    return replace(probe, id=f"{case.name}:diagnosis:{probe.id}",
                   trace_values=True, again=False, methods=dict(methods),
                   seed=case.seed if probe.seed is None else probe.seed,
                   hidden=case.set == "hidden", groups=("diagnosis",))


def _where(got: torch.Tensor, expected: torch.Tensor) -> str:
    diff = (got.double() - expected.double()).abs()
    diff = torch.where(torch.isnan(diff), torch.inf, diff)
    both_inf = torch.isinf(expected) & (got == expected)
    diff = torch.where(both_inf, 0.0, diff)
    worst = int(diff.flatten().argmax())
    index, rest = [], worst
    for size in reversed(got.shape):
        index.append(rest % size)
        rest //= size
    at = ", ".join(str(i) for i in reversed(index))
    e, g = float(expected.flatten()[worst]), float(got.flatten()[worst])
    return f"at [{at}] expected {e:.6g}, got {g:.6g}"


def sentence(finding: Finding) -> str:
    """The student-facing line (markdown) of one case's diagnosis."""
    d, case = finding.divergence, finding.case
    which = (f"{'hidden' if case.set == 'hidden' else 'public'} case "
             f"`{case.name}`")
    if d.last is None or d.last == "x":
        before = "they leave it at their first step"
    elif finding.roles:
        before = f"they follow it up to line {d.last_line}, {finding.roles}"
    else:
        before = (f"they follow it up to {STEPS[d.last].words} (line "
                  f"{d.last_line})")
    if finding.missing and d.last is not None and d.last != "x":
        before += (", but no line gives " +
                   " or ".join(STEPS[n].words for n in finding.missing))
    if d.since is not None:
        # Lines run in a loop before it gave values no step compares with:
        # the departure is somewhere from there to this line.
        text = (f"{MARK} ({which}): {before}; they leave it between line "
                f"{d.since} and line {d.line} {finding.code} (the first "
                f"value there the grader can compare, with "
                f"{d.compared or STEPS[d.step].words}: "
                f"{_where(d.got, d.expected)}).")
    elif d.unnamed:
        # Which step the line gives is not proven: where, not what.
        text = (f"{MARK} ({which}): {before}; line {d.line} "
                f"{finding.code} is where they leave it (compared with "
                f"{d.compared or STEPS[d.step].words}: "
                f"{_where(d.got, d.expected)}).")
    else:
        text = (f"{MARK} ({which}): {before}; line {d.line} "
                f"{finding.code} gives {STEPS[d.step].words}, which "
                f"differ: {_where(d.got, d.expected)}.")
    if finding.relation is not None:
        text += f" {finding.relation.text}"
    return text


def _names(source: str, line: int) -> list[str]:
    """The names a statement starting on ``line`` binds, in the order the
    recorder records their values (``a, b = ...``: a then b)."""
    for node in regions.nodes(source):
        if isinstance(node, ast.Assign) and node.lineno == line:
            found = []
            for target in node.targets:
                elts = target.elts if isinstance(target, ast.Tuple) \
                    else [target]
                found += [ast.unparse(e) for e in elts]
            return found
    return []


@functools.lru_cache(maxsize=4)
def _bindings(source: str) -> tuple[dict[int, frozenset[str]], tuple[int, ...],
                                    dict[int, frozenset[str]]]:
    """Of ``source``, read once: the names each assignment's line binds,
    those lines in order, and the names each simple statement's value
    reads (``self.<name>`` as such), by its first line."""
    try:
        tree = regions.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return {}, (), {}
    binds: dict[int, set[str]] = {}
    reads: dict[int, frozenset[str]] = {}
    for n in ast.walk(tree):
        if isinstance(n, ast.Assign):
            binds.setdefault(n.lineno, set()).update(
                ast.unparse(e) for t in n.targets
                for e in (t.elts if isinstance(t, ast.Tuple) else [t]))
        if isinstance(n, ast.stmt) and not hasattr(n, "body") and \
                n.lineno not in reads:
            value = getattr(n, "value", n)
            reads[n.lineno] = frozenset(
                ast.unparse(r) for r in ast.walk(value)
                if isinstance(r, (ast.Name, ast.Attribute)) and
                isinstance(getattr(r, "ctx", None), ast.Load))
    frozen = {line: frozenset(names) for line, names in binds.items()}
    return frozen, tuple(sorted(frozen)), reads


def reads_bound(source: str, line: int, earlier: int) -> bool:
    """Whether the statement starting on ``line`` reads a name (or
    ``self.<name>``) that the assignment on ``earlier`` binds, and no
    statement between the two binds again."""
    binds, lines, reads = _bindings(source)
    bound = binds.get(earlier, frozenset())
    if line not in reads or not bound:
        return False
    between = lines[bisect.bisect_right(lines, earlier):
                    bisect.bisect_left(lines, line)]
    rebound = set().union(*(binds[at] for at in between)) if between \
        else set()
    return bool(reads[line] & (bound - rebound))


def roles(records: list[tuple[int, torch.Tensor]], line: int | None,
          steps: dict[str, torch.Tensor], head: int, source: str) -> str:
    """What each tensor bound by ``line`` is, by value, when it binds
    several (``q, v, k = ...``: "where `v` is the keys k ..."); "" when it
    binds one, or a name or a value cannot be told."""
    values = [t for at, t in records if at == line]
    names = _names(source, line) if line is not None else []
    if len(values) < 2 or len(names) != len(values):
        return ""
    parts = []
    for name, tensor in zip(names, values):
        found = [n for n in steps if n != "x" and tensor.numel() and
                 matches(tensor, n, steps[n], head)]
        if len(found) != 1:
            return ""
        parts.append(f"where {mdsafe.code_span(name, 40)} is "
                     f"{STEPS[found[0]].words}")
    return ", ".join(parts[:-1]) + " and " + parts[-1]


def duplicates(records: list[tuple[int, torch.Tensor]],
               relation: relations.Relation | None,
               steps: dict[str, torch.Tensor], head: int) -> str:
    """For a relation naming a tensor used in another's place: the lines
    that compute it, when more than one does (``keys = self.W_query(x)``
    beside the queries' own line)."""
    if relation is None or not relation.key.startswith("operands:"):
        return ""
    said = []
    for role in relations.ROLES:
        if f" {role}" not in relation.key[len("operands:"):] or \
                role not in steps:
            continue
        lines = sorted({at for at, t in records if t.numel() and
                        matches(t, role, steps[role], head)})
        if len(lines) > 1:
            said.append(f"lines {', '.join(map(str, lines[:-1]))} and "
                        f"{lines[-1]} {'both' if len(lines) == 2 else 'all'}"
                        f" give {STEPS[role].words}")
    return f" ({'; '.join(said)}.)" if said else ""


def diagnose_case(case: Case, result: ProbeResult, source: str
                  ) -> Finding | None:
    """Where one case's recorded values leave the path, or None."""
    if not result.ok or not result.values:
        return None
    steps = case_steps(case.tensors)
    head, head_name = head_size(case)
    sizes = named_sizes(case)

    def explain(step: str, got: torch.Tensor, expected: torch.Tensor,
                swapped: bool) -> relations.Relation | None:
        return relations.explain(step, got, expected, steps, case, head,
                                 head_name, sizes, swapped)

    divergence = walk(result.values, steps, head, explain,
                      lambda line, earlier: reads_bound(source, line,
                                                        earlier))
    if divergence is None:
        return None
    if divergence.same_as is not None:
        divergence.relation = relations.Relation(
            f"unchanged: {divergence.same_as}",
            f"It reads {STEPS[divergence.last].words} of line "
            f"{divergence.last_line}, yet its values are "
            f"{STEPS[divergence.same_as].words} themselves, unchanged at "
            f"every position.")
    if result.fused and fused.repoint(result.fused, divergence, steps):
        divergence.relation = None    # read against a step it is not
    relation = divergence.relation
    reshape = None if relation is not None or not divergence.unnamed else \
        relations.reshaped(result.values, divergence.line, steps, head)
    if reshape is not None:
        # A transpose written as a reshape: compared with the record
        # transposed (the fix, on the student's own values); the line is
        # still said to be where they leave, not what step it gives.
        relation, divergence.step, divergence.expected = reshape
        divergence.compared = f"{STEPS[divergence.step].words} transposed"
        divergence.got = [t for n, t in result.values
                          if n == divergence.line][-1]
    elif relation is None and result.fused:
        # Inside a fused attention call: its recorded arguments replayed.
        relation = fused.explain(result.fused, divergence, steps, head,
                                 head_name, sizes)
    if relation is not None and reshape is None:
        # A fix replayed on the call's own values gives that step: proven.
        divergence.unnamed = False
    if relation is not None and relation.step in steps:
        # The line computes a later step than the one it was compared
        # with (scores scaled in the same statement): name that one.
        divergence.step = relation.step
        divergence.expected = steps[relation.step]
    if relation is not None:
        extra = duplicates(result.values, relation, steps, head)
        if extra:
            relation = replace(relation, text=relation.text + extra)
    # (a loop's pieces stacked, as the walk reads them)
    records, _ = heads_stacked(result.values, steps)
    missing = tuple(
        n for n in relations.ROLES if n in steps and d_rank(divergence) >
        STEPS[n].rank and not any(t.numel() and matches(t, n, steps[n], head)
                                  for _, t in records))
    said = roles(result.values, divergence.last_line, steps, head, source)
    if said and relation is not None and \
            relation.text.endswith(relations.SWAP_FIX):
        # q and k bound to each other's names: the product may be right.
        relation = replace(relation, text=relation.text.removesuffix(
            relations.SWAP_FIX) + relations.swap_fix_at(
            divergence.last_line))
    return Finding(case, divergence, relation,
                   quote(source, divergence.line), said, missing)


def agree(findings: list[Finding], cases: int | None = None) -> None:
    """A size is named only when every failing case shows the same one:
    among one item's ``findings`` (one per failing case), a relation that
    names a size (``divided by 3 = seq_len``) keeps it only if every
    finding has that relation's key (and every one of the item's
    ``cases`` failing cases has a finding); else each says its plain fact
    (the factor on its case, no name). A size that fits one case by
    chance (hidden / 2 = seq_len) is no cause."""
    keys = {f.relation.key if f.relation else None for f in findings}
    every = cases is None or cases <= len(findings)
    # (several sizes fitting a case's number: which is meant, no finding
    # alone shows)
    if len(keys) < 2 and every and not any(
            len(f.relation.options) > 1 for f in findings if f.relation):
        return
    # Several sizes fit some case's number: the one size every case shows.
    common: set[str] | None = None
    for finding in findings:
        names = {n for n, _ in finding.relation.options} \
            if finding.relation else set()
        common = names if common is None else common & names
    if every and common and len(common) == 1:
        name = common.pop()
        for finding in findings:
            finding.relation = dict(finding.relation.options)[name]
        return
    for finding in findings:
        plain = finding.relation.plain if finding.relation else None
        if plain is not None:
            finding.relation = plain


def d_rank(divergence: Divergence) -> int:
    """The rank of the step where the values leave the path."""
    return STEPS[divergence.step].rank


def diagnose(grade: Any, config: Any, results: dict[str, ProbeResult],
             source: str, filename: str,
             runner: Callable[[str, str, list[Probe]], list[ProbeResult]],
             methods: dict[str, tuple[str, ...]],
             public_only: bool = False) -> list[Finding]:
    """Diagnose ``grade``'s failing value cases and add the lines to its
    items' outcomes (``Outcome.diagnosis`` gets each finding's key)."""
    # Shape errors: read from the calls' own results, nothing runs again.
    crash.explain(grade, config, results, source, public_only)
    # Facts read from the code alone; their failure loses only them.
    try:
        code_facts.explain(grade, source)
    except Exception:   # noqa: BLE001 - an extra: the walk still runs
        pass
    failing = failing_cases(grade, config, results, public_only)
    if not failing:
        return []
    probes: dict[str, Probe] = {}
    for _, case, probe in failing:
        found = diagnosis_probe(probe, case, methods)
        probes.setdefault(found.id, found)
    ordered = sorted(probes.values(), key=lambda p: p.hidden)
    answers = dict(zip((p.id for p in ordered),
                       runner(source, filename, ordered)))
    found: list[tuple[Any, Finding]] = []
    for item, case, probe in failing:
        result = answers.get(diagnosis_probe(probe, case, methods).id)
        finding = diagnose_case(case, result, source) if result else None
        if finding is not None:
            found.append((item, finding))
    for item, _ in found:
        agree([f for i, f in found if i is item],
              sum(i is item for i, _, _ in failing))
    shown: dict[int, int] = {}
    for item, finding in found:
        outcome = item.outcome
        outcome.diagnosis.append(finding.key)
        if finding.case.set == "hidden":
            outcome.hidden_lines.append(sentence(finding))
        elif shown.get(id(item), 0) < MAX_PUBLIC_LINES:
            shown[id(item)] = shown.get(id(item), 0) + 1
            outcome.lines.append(sentence(finding))
    return [f for _, f in found]
