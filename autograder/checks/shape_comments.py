"""Check the shape comments of student statements against observed shapes.

Every student statement that binds or returns a tensor needs a comment
giving the tensor's shape, e.g. ``# [batch_size, seq_len, hidden]``. The
worker records, per statement, the shapes its tensors had in a traced run
(``ProbeResult.shapes``); this module reads the comments from the source
text alone (``ast`` + ``tokenize``) and compares. What a comment may say
is the homework's ``shape_notation.Notation`` (its data,
``shape_notation.toml``, is the notebook's table), passed in by the
caller; where it may stand and how it is matched is this module's job,
documented in ``docs/shape-comments.md``.

Leniency is deliberate: a comment passes if it matches in ANY of its
places, for any traced execution of each rank the line bound in the
task's own calls (a throwaway call on ``x[0]`` makes no real execution's
comment optional). Only a comment that cannot match loses points.
"""
from __future__ import annotations

import ast
import functools
import tokenize
from dataclasses import dataclass

from autograder.checks.shape_notation import (  # noqa: F401 (re-exported)
    MAX_COMMENT_CHARS, MAX_DIMS, MAX_NESTING, MAX_TERMS, TOO_BIG, TOO_DEEP,
    TOO_LONG, Claim, Notation, Parsed, parse_comment)
from autograder.text.mdsafe import code_span
from autograder.submission.regions import (Region, graded_regions, parse,
                                           python_lines, student_statements,
                                           tokenizer_readline)


@dataclass(frozen=True)
class ShapeIssue:
    """One statement whose shape comment is missing, unreadable or wrong."""

    line: int
    task: str        # the Region's task, e.g. "2.1"
    cls: str         # the Region's class
    kind: str        # "missing" | "unreadable" | "wrong"
    message: str     # "line 57: ..." (student-facing)


# --------------------------------------------------------------------------
# Matching claims to the tensors a statement bound

def _assign(claims: list[Claim], shapes: list[list[int]],
            dims: dict[str, int],
            free: list[frozenset[int]] | None = None) -> bool:
    """Whether the claims describe ``shapes`` (the tensors of one
    execution, in order): with no more claims than tensors, each claim
    covers a consecutive run of tensors (so one claim may cover all);
    with more claims (some targets were not tensors), the tensors match
    an in-order subset of the claims."""
    k, n = len(claims), len(shapes)
    if not k or not n:
        return False
    free = free or [frozenset()] * n
    if k > n:
        # Greedy in-order matching is optimal for subsequence matching.
        j = 0
        for claim in claims:
            if j < n and claim.matches(shapes[j], dims, free[j]):
                j += 1
        return j == n
    # ok[i][j]: the first i claims cover exactly the first j tensors.
    ok = [[False] * (n + 1) for _ in range(k + 1)]
    ok[0][0] = True
    for i in range(1, k + 1):
        for j in range(1, n + 1):
            if claims[i - 1].matches(shapes[j - 1], dims, free[j - 1]):
                ok[i][j] = ok[i - 1][j - 1] or ok[i][j - 1]
    return ok[k][n]


def _matches(parsed: Parsed, runs: list[list[list[int]]],
             dims: dict[str, int], rest: int | None = None) -> bool:
    """Whether the claims describe, for each rank the line bound, some
    execution of that rank, or every one when the sizes that vary between
    them (a tensor grown by ``torch.cat`` in a loop) are left unchecked.
    ``rest``: how many trailing dimensions a claim starting with ``...``
    must name (None: ``...`` is no claim there, ``rest_named``)."""
    if parsed.unreadable is not None:
        # Shapes that vary between executions may need a loop variable
        # (``[bs, seq, i * head_size]``): not the student's fault; a loop
        # grows one place, a throwaway call on a transposed input two.
        free = _varying(runs)
        return free is not None and parsed.unreadable.isidentifier() and \
            all(len(places) <= 1 for places in free)
    if _rest(parsed) and (rest is None or _too_few(parsed, rest)):
        return False    # "[..., seq]" on a line of one rank: a dodge
    # Each rank the line bound in the task's own calls must be described:
    # a throwaway call on ``x[0]`` gives a run with no batch dimension,
    # and a claim that fits only that run describes no real one.
    if not runs:
        return False    # nothing bound: no claim fits
    by_rank: dict[tuple[int, ...], list[list[list[int]]]] = {}
    for run in runs:
        by_rank.setdefault(tuple(len(s) for s in run), []).append(run)
    return all(_fits(parsed, group, dims) for group in by_rank.values())


def _fits(parsed: Parsed, runs: list[list[list[int]]],
          dims: dict[str, int]) -> bool:
    """Whether the claims describe ``runs`` (executions of one rank): one
    of them, or, where one place of a tensor varies between them (a
    tensor grown in a loop), every one with a piece's size there (one that
    divides it). Where two or
    more places vary (a throwaway call on a transposed input), every run:
    no claim fits that the real call's tensor does not."""
    free = _varying(runs)
    if free is not None and any(len(places) > 1 for places in free):
        return all(_assign(parsed.claims, shapes, dims) for shapes in runs)
    if any(_assign(parsed.claims, shapes, dims) for shapes in runs):
        return True
    # A place that grows (a loop's torch.cat): the piece's size it claims
    # must divide that place's size in every run, which a throwaway call
    # on other inputs (a batch of 1 beside the real one) does not free.
    return free is not None and all(_assign(parsed.claims, shapes, dims,
                                            free) for shapes in runs)


# How many trailing dimensions a ``...`` claim in a helper function (one
# the task's code calls, not the task's own method) must name at most:
# the two an attention helper works on (``[..., seq, seq]``), whatever
# leading ones (batch, heads) its callers give it.
HELPER_NAMED = 2


def _rest(parsed: Parsed) -> bool:
    """Whether a claim starts with ``...`` (any leading dimensions)."""
    return any(c.dims and c.dims[0].is_rest for c in parsed.claims)


def _too_few(parsed: Parsed, rest: int) -> bool:
    """Whether a ``...`` claim names fewer than ``rest`` dimensions."""
    return any(c.dims and c.dims[0].is_rest and len(c.dims) - 1 < rest
               for c in parsed.claims)


def common_tail(runs: list[list[list[int]]]) -> int:
    """How many trailing dimensions every execution's tensors share, size
    for size (the least over the tensors a line binds; 0 when the
    executions bind different numbers of tensors)."""
    if not runs or len({len(run) for run in runs}) != 1:
        return 0
    tails = []
    for shapes in zip(*runs):
        k = 0
        while all(len(s) > k for s in shapes) and \
                len({s[-1 - k] for s in shapes}) == 1:
            k += 1
        tails.append(k)
    return min(tails, default=0)


def run_ranks(runs: list[list[list[int]]]) -> set[tuple[int, ...]]:
    """The ranks of each execution's tensors (0-dim ones left out)."""
    return {tuple(len(s) for s in shapes if s) for shapes in runs}


def _varying(runs: list[list[list[int]]]) -> list[frozenset[int]] | None:
    """Per tensor, the positions whose size changes between executions
    (a loop growing a tensor); None if nothing varies or the tensors'
    number or ranks change."""
    if len(runs) < 2 or len({len(r) for r in runs}) > 1:
        return None
    free = []
    for shapes in zip(*runs):
        if len({len(s) for s in shapes}) > 1:
            return None
        free.append(frozenset(i for i, sizes in enumerate(zip(*shapes))
                              if len(set(sizes)) > 1))
    return free if any(free) else None


# --------------------------------------------------------------------------
# Finding a statement's comments

@dataclass
class _Lines:
    comment: dict[int, str]     # line -> comment text, "#" stripped
    only: set[int]              # lines holding nothing but a comment


@functools.lru_cache(maxsize=8)
def _scan(source: str) -> _Lines:
    """The comments of ``source`` (once per source text; read only)."""
    lines = _Lines({}, set())
    try:
        for tok in tokenize.generate_tokens(tokenizer_readline(source)):
            if tok.type == tokenize.COMMENT:
                line = tok.start[0]
                lines.comment[line] = tok.string.lstrip("#").strip()
                if not tok.line[:tok.start[1]].strip():
                    lines.only.add(line)
    except (tokenize.TokenError, SyntaxError):
        pass        # ast parsed it; keep the comments found so far
    return lines


def _span(node: ast.stmt) -> range:
    return range(node.lineno, (node.end_lineno or node.lineno) + 1)


@functools.lru_cache(maxsize=8)
def source_lines(source: str) -> tuple[str, ...]:
    """The lines of ``source`` as Python's tokenizer counts them (once
    per source text): ``str.splitlines()`` also splits on form feeds,
    ``\\v``, ``\\x1c``-``\\x1e``, ``\\x85`` and ``\\u2028``/``\\u2029``, which
    Python reads inside a line, so line numbers would drift."""
    return tuple(python_lines(source))


def statement_text(source: str, node: ast.stmt, width: int = 40) -> str:
    """A short rendering of a statement for messages: ``probs = ...`` for
    an assignment, else its first line (comment-free), shortened."""
    def segment(part: ast.AST) -> str:
        # Targets are short: unparse them rather than re-split the whole
        # source per statement (ast.get_source_segment does), which made
        # this the grader's hottest line.
        if isinstance(part, (ast.Tuple, ast.List)):
            return ", ".join(segment(e) for e in part.elts)
        if part is not node:
            return " ".join(ast.unparse(part).split())
        first = source_lines(source)[node.lineno - 1][node.col_offset:]
        return " ".join(first.split("#")[0].split())

    if isinstance(node, ast.Assign):
        text = " = ".join(segment(t) for t in node.targets) + " = ..."
    elif isinstance(node, ast.AugAssign):
        op = _AUG_OPS.get(type(node.op), "?")
        text = f"{segment(node.target)} {op}= ..."
    elif isinstance(node, ast.AnnAssign):
        text = f"{segment(node.target)} = ..."
    else:
        text = segment(node)
    if len(text) > width:
        text = text[:width - 4].rstrip() + " ..."
    return text


_AUG_OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/",
            ast.FloorDiv: "//", ast.MatMult: "@", ast.Mod: "%",
            ast.Pow: "**"}


@dataclass
class _Candidates:
    """A statement's comment texts: on its own lines, in the comment-only
    lines right after it and right before it. ``*_shared``: the block
    touches another statement, which may own it instead."""

    own: str
    after: str
    before: str
    after_shared: ast.stmt | None    # the statement the block touches
    before_shared: ast.stmt | None

    def acceptable(self) -> list[str]:
        """Every text that may hold the statement's shape."""
        texts = [self.own, self.after, self.before]
        if self.own and self.after:
            texts.append(f"{self.own} {self.after}")   # wrapped groups
        return [t for t in texts if t]

    def reportable(self, belongs) -> list[str]:
        """The texts to quote in an issue, most likely owner first; a
        shared block for which ``belongs(text, neighbour)`` is left out."""
        texts = [self.own]
        if self.after and not (self.after_shared and
                               belongs(self.after, self.after_shared)):
            texts.append(f"{self.own} {self.after}".strip())
        order = [(self.after, self.after_shared),
                 (self.before, self.before_shared)]
        texts += [t for t, shared in order if not shared]
        texts += [t for t, shared in order
                  if shared and not belongs(t, shared)]
        return [t for t in texts if t]


def _candidates(node: ast.stmt, region: Region, lines: _Lines,
                starts: dict[int, ast.stmt],
                ends: dict[int, ast.stmt]) -> _Candidates:
    own = " ".join(lines.comment[n] for n in _span(node)
                   if n in lines.comment)
    after, n = [], node.end_lineno + 1
    while n <= region.end and n in lines.only:
        after.append(lines.comment[n])
        n += 1
    after_shared = starts.get(n) if n <= region.end else None
    before, n = [], node.lineno - 1
    while n >= region.start and n in lines.only:
        before.insert(0, lines.comment[n])
        n -= 1
    before_shared = ends.get(n) if n >= region.start else None
    return _Candidates(own, " ".join(after), " ".join(before),
                       after_shared, before_shared)


# --------------------------------------------------------------------------
# The check

_BINDING = (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Return)


def _target_names(node: ast.stmt) -> list[str]:
    """Names (``x``, ``self.x``) a statement binds or returns; subscripts
    and other targets are left out."""
    if isinstance(node, ast.Assign):
        targets = node.targets
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        targets = [node.target]
    elif isinstance(node, ast.Return) and node.value is not None:
        targets = [node.value]
    else:
        return []
    out: list[str] = []

    def walk(t: ast.expr) -> None:
        if isinstance(t, ast.Name):
            out.append(t.id)
        elif isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) \
                and t.value.id == "self":
            out.append(f"self.{t.attr}")
        elif isinstance(t, ast.Starred):
            walk(t.value)
        elif isinstance(t, (ast.Tuple, ast.List)):
            for elt in t.elts:
                walk(elt)

    for target in targets:
        walk(target)
    return out


def _hands_on(node: ast.stmt) -> bool:
    """A ``return`` of names only (``return att``, ``return att, probs``):
    the skeleton's given ending outside the markers, which hands on
    tensors the code between the markers made (and commented)."""
    value = node.value if isinstance(node, ast.Return) else None
    items = value.elts if isinstance(value, ast.Tuple) else [value]
    return value is not None and all(isinstance(v, ast.Name)
                                     for v in items)


def _only_subscripts(node: ast.stmt) -> bool:
    targets = node.targets if isinstance(node, ast.Assign) else \
        [getattr(node, "target", None)]
    return all(isinstance(t, ast.Subscript) for t in targets)


def _obviously_not_tensor(value: ast.expr | None) -> bool:
    """Values that can never be a tensor: literals, containers, sizes."""
    if value is None:
        return True
    if isinstance(value, (ast.Constant, ast.List, ast.Tuple, ast.Dict,
                          ast.Set, ast.ListComp, ast.DictComp, ast.SetComp,
                          ast.JoinedStr)):
        return True
    if isinstance(value, ast.Attribute) and value.attr == "shape":
        return True
    if isinstance(value, ast.Call):
        func = value.func
        name = func.id if isinstance(func, ast.Name) else \
            func.attr if isinstance(func, ast.Attribute) else ""
        return name in ("len", "int", "float", "range", "size", "dim",
                        "list", "tuple", "dict")
    return False


def dims_as_names(shape: list[int], dims: dict[str, int],
                  canonical: tuple[str, ...] = ()) -> str:
    """``[2, 5, 5]`` -> ``[batch_size, seq_len, seq_len]`` (a product of
    two names when no single one fits, else the number); the names of
    ``canonical`` (the notation's size keys) first, in its order."""
    order = [c for c in canonical if c in dims] + \
        [c for c in dims if c not in canonical]
    parts = []
    for size in shape:
        name = next((c for c in order if dims[c] == size), None)
        if name is None:
            name = next((f"{a} * {b}" for i, a in enumerate(order)
                         for b in order[i + 1:]
                         if dims[a] * dims[b] == size), str(size))
        parts.append(name)
    return "[" + ", ".join(parts) + "]"


def _example(shapes: list[list[int]], dims: dict[str, int],
             canonical: tuple[str, ...]) -> str:
    texts = [dims_as_names(s, dims, canonical) for s in shapes]
    if len(set(texts)) == 1:
        return f"# {texts[0]}"
    return "# " + ", ".join(texts)


def _shapes_text(shapes: list[list[int]]) -> str:
    return ", ".join(str(list(s)) for s in shapes)


def _wrong_message(line: int, parsed: Parsed, runs: list[list[list[int]]],
                   dims: dict[str, int], rest: int | None,
                   helper: bool = False) -> str:
    shapes = runs[0]
    if len(parsed.claims) == 1:
        claim = parsed.claims[0]
        told = f"{claim.text} = {claim.evaluated(dims)}"
    else:
        told = ", ".join(f"{c.text} = {c.evaluated(dims)}"
                         for c in parsed.claims)
    if len(shapes) == 1:
        actual = f"the tensor is {shapes[0]}"
    else:
        actual = f"the tensors are {_shapes_text(shapes)}"
    if len(runs) > 1:
        others = "; ".join(_shapes_text(r) for r in runs[1:4])
        actual += f" (in other calls: {others})"
    if _rest(parsed) and rest is None:
        actual += ": write every dimension out"
    elif _rest(parsed) and _too_few(parsed, rest) and helper:
        actual += (f": in a helper `...` may stand for the leading "
                   f"dimensions; name the last {rest}")
    elif _rest(parsed) and _too_few(parsed, rest) and \
            len(run_ranks(runs)) == 1:
        actual += (f": `...` may stand for the first dimension only; name "
                   f"the last {rest}")
    elif _rest(parsed) and _too_few(parsed, rest):
        actual += (f": `...` stands only for the leading dimensions that "
                   f"differ between its calls; the last {rest} are the "
                   f"same in every call: name them")
    return f"line {line}: comment claims {told} but {actual}"


def _unreadable_message(line: int, parsed: Parsed, hint: str) -> str:
    if parsed.unreadable == TOO_LONG:
        return (f"line {line}: the comment "
                f"{code_span('# ' + _shorten(parsed.text, 40))} "
                f"is {len(parsed.text):,} characters long; the grader reads "
                f"comments of at most {MAX_COMMENT_CHARS} characters: give "
                f"the shape in a short comment on the statement's line")
    if parsed.unreadable in (TOO_DEEP, TOO_BIG):
        limit = (f"brackets nested more than {MAX_NESTING} deep"
                 if parsed.unreadable == TOO_DEEP else
                 f"more than {MAX_DIMS} dimensions or {MAX_TERMS} terms in "
                 f"a dimension")
        return (f"line {line}: the shape comment "
                f"{code_span('# ' + _shorten(parsed.text, 40))} has {limit}, "
                f"which the "
                f"grader does not read; {hint}")
    if parsed.unreadable in ("...", "…"):
        # Unreadable only out of place: "..." is read first, before a
        # named dimension.
        what = ("`...` there: it may stand only first, before named "
                "dimensions (`# [..., seq, seq]`)")
    else:
        what = code_span(parsed.unreadable)
    # The comment is the student's text: a code span it cannot close
    return (f"line {line}: cannot read {what} in the shape comment "
            f"{code_span('# ' + _shorten(parsed.text, 60))}; "
            f"{hint}")


def _shorten(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 4] + " ..."


def check_shape_comments(
        source: str,
        observed: dict[int, list[list[list[int]]]],
        dims: dict[str, int],
        methods: dict[str, tuple[str, ...]],
        tasks: set[str] | None = None,
        dims_by_class: dict[str, dict[str, int]] | None = None,
        ran: dict[str, frozenset[int]] | None = None,
        classes: set[str] | None = None,
        *, notation: Notation,
        ranks: dict[int, set[tuple[int, ...]]] | None = None,
) -> list[ShapeIssue]:
    """The shape-comment issues of the student regions of ``source``.

    ``observed`` is ``ProbeResult.shapes`` (merged over the traced probes):
    first line of a statement -> the distinct lists of shapes it bound.
    ``dims`` maps size names to the sizes of the traced run: the keys of
    ``shape_notation.toml`` (batch_size, seq_len, ...) or names it lists
    (``d_out``), which supply their row's size; a key it does not list is
    ignored. ``dims_by_class`` overrides them for the regions of one
    class. ``methods`` is the graded rubric's task methods
    (``GradingConfig.task_methods``) and ``ran`` what ran while each
    task's traced calls ran (``regions.graded_regions``).
    ``tasks`` limits the check to the regions of those tasks, ``classes``
    to those of those classes (a task's deduction reads its own class:
    checking every class for each task made the check quadratic in the
    number of tasks times the source). ``notation`` is the homework's
    (``shape_notation.notation_of(config.profile)``): the names a comment
    may write. ``ranks``: per line, the ranks its tensors had in every
    traced call of the submission (``run_ranks``), every task's: a
    leading ``...`` is read only on a line bound at several ranks (a
    helper shared by a 3-d and a 4-d task), where it stands for the
    leading dimensions (within one task's calls, only those they do not
    share: ``_Statements.rest_named``).

    A statement that bound or returned a tensor needs a comment whose
    claim matches (else "missing", "unreadable" or "wrong"). A statement
    in a region that never ran is only checked for the presence of some
    comment, and only if the name it binds held a tensor elsewhere.
    Returns [] if the source does not parse (reported elsewhere).
    """
    try:
        tree = parse(source)
    except SyntaxError:
        return []
    regions = [r for r in graded_regions(source, methods=methods, ran=ran)
               if (tasks is None or r.task in tasks) and
               (classes is None or r.cls in classes)]
    statements = [(r, n) for r, n in student_statements(tree, regions)
                  if isinstance(n, _BINDING)]
    judge = _Statements(source, statements,
                        {int(k): v for k, v in observed.items()}, notation,
                        ranks or {})
    issues = []
    normalised: dict[str, dict[str, int]] = {}
    for region, node in statements:
        if region.cls not in normalised:
            normalised[region.cls] = notation.normalise_dims(
                (dims_by_class or {}).get(region.cls, dims))
        found = judge.issue(region, node, normalised[region.cls])
        if found is not None:
            issues.append(ShapeIssue(node.lineno, region.task, region.cls,
                                     *found))
    return issues


class _Statements:
    """The graded statements of one source with the shapes the traced run
    observed: what each statement's comments must say."""

    def __init__(self, source: str,
                 statements: list[tuple[Region, ast.stmt]],
                 observed: dict[int, list[list[list[int]]]],
                 notation: Notation,
                 ranks: dict[int, set[tuple[int, ...]]]) -> None:
        self.source = source
        self.notation = notation
        self.observed = observed
        self.ranks = ranks
        self.lines = _scan(source)
        self.starts = {n.lineno: n for _, n in statements}
        self.ends = {n.end_lineno: n for _, n in statements}
        self.ran_regions = {r for r, n in statements if self.runs_of(n)}
        # Per class, the names that held a tensor in some statement.
        self.tensor_names: dict[str, set[str]] = {}
        for region, node in statements:
            names, runs = _target_names(node), self.runs_of(node)
            if runs and (len(names) == 1 or
                         all(len(run) == len(names) for run in runs)):
                self.tensor_names.setdefault(region.cls, set()).update(names)

    def rest_named(self, node: ast.stmt) -> int | None:
        """How many trailing dimensions a ``...`` claim on the statement
        must name: where it bound tensors of one rank in every task's
        traced calls, all but the first (``[..., seq, seq]`` for a
        [bs, seq, seq] tensor: a generic helper's comment, no dodge);
        where this task's own calls bind several ranks, every trailing
        dimension they share (a dummy call on ``x[0]`` makes no line's
        comment vaguer); several ranks only across tasks (a helper shared
        by a 3-d and a 4-d task, whose sizes differ), any. None: nothing
        bound, no claim."""
        runs = self.runs_of(node)
        own = run_ranks(runs)
        if len(own) > 1:
            return common_tail(runs)
        if len(own | self.ranks.get(node.lineno, set())) > 1:
            return 0
        ranks = next(iter(own), ())
        return max(min(ranks) - 1, 1) if ranks else None

    def runs_of(self, node: ast.stmt) -> list[list[list[int]]]:
        """The shapes ``node`` bound, one list per execution."""
        # 0-dim tensors (a scale factor) have no shape worth a comment.
        runs = [[list(s) for s in run if s]
                for run in self.observed.get(node.lineno, [])]
        return [run for run in runs if run]

    def issue(self, region: Region, node: ast.stmt,
              dims: dict[str, int]) -> tuple[str, str] | None:
        """The (kind, message) of the statement's comment issue, if any."""
        if region.outside and _hands_on(node):
            return None
        cands = _candidates(node, region, self.lines, self.starts, self.ends)
        runs = self.runs_of(node)
        if not runs:
            return self._never_ran(region, node, cands)
        if _only_subscripts(node):
            return None
        read = self.notation.parse_comment
        parsed = [read(t) for t in cands.acceptable()]
        rest = self.rest_named(node)
        if region.helper and rest is not None:
            # A helper is written for any leading dimensions (numpy's
            # ``...``): it names the last ones it works on.
            rest = min(rest, HELPER_NAMED)
        if any(_matches(p, runs, dims, rest) for p in parsed):
            return None

        def belongs(text: str, neighbour: ast.stmt) -> bool:
            # A shared comment that fits the neighbour is the neighbour's.
            return _matches(read(text), self.runs_of(neighbour),
                            dims, self.rest_named(neighbour))

        report = next((p for p in (read(t)
                                   for t in cands.reportable(belongs))
                       if p.says_something), None)
        if report is None:
            return ("missing",
                    f"line {node.lineno}: "
                    f"{code_span(statement_text(self.source, node))} binds "
                    f"a tensor but has no shape comment (write e.g. "
                    f"`{_example(runs[0], dims, self.notation.canonical)}`)")
        if report.unreadable is not None:
            return "unreadable", _unreadable_message(
                node.lineno, report, self.notation.hint)
        return "wrong", _wrong_message(node.lineno, report, runs, dims,
                                       rest, region.helper)

    def _never_ran(self, region: Region, node: ast.stmt,
                   cands: _Candidates) -> tuple[str, str] | None:
        """A statement that never ran (or bound no tensor): a comment is
        needed only if a name it binds held a tensor elsewhere."""
        if region in self.ran_regions or _only_subscripts(node) or \
                _obviously_not_tensor(node.value):
            return None
        known = self.tensor_names.get(region.cls, set())
        held = [n for n in _target_names(node) if n in known]
        if not held or cands.acceptable():
            return None
        return ("missing",
                f"line {node.lineno}: "
                f"{code_span(statement_text(self.source, node))} has no "
                f"shape comment (the traced calls did not run this line, "
                f"but `{held[0]}` holds a tensor elsewhere; write its "
                f"shape, e.g. `# [batch_size, seq_len, hidden]`)")
