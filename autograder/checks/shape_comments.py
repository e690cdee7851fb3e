"""Check the shape comments of student statements against observed shapes.

Every student statement that binds or returns a tensor needs a comment
giving the tensor's shape, e.g. ``# [batch_size, seq_len, hidden]``. The
worker records, per statement, the shapes its tensors had in a traced run
(``ProbeResult.shapes``); this module reads the comments from the source
text alone (``ast`` + ``tokenize``) and compares. The accepted notation is
documented for students and staff in ``docs/shape-comments.md``.

Leniency is deliberate: a comment passes if ANY reading of it matches
(ambiguous names, any of the comment places, any traced execution). Only
a comment that cannot match under any reading loses points.
"""
from __future__ import annotations

import ast
import functools
import io
import re
import tokenize
from dataclasses import dataclass, field
from fractions import Fraction
from itertools import product
from typing import Collection

from autograder.mdsafe import code_span
from autograder.regions import (Region, graded_regions, parse,
                                student_statements)

CANONICAL = ("batch_size", "seq_len", "input_size", "hidden", "num_heads",
             "head_size")

# Canonical dimension -> the names students may write for it. Lookup is
# case-insensitive; a name listed under several dimensions is ambiguous and
# matches if any of them does.
VOCABULARY: dict[str, tuple[str, ...]] = {
    "batch_size": ("batch_size", "batchsize", "batch", "bs", "bsz", "b",
                   "n_batch", "nbatch", "num_batch", "n"),
    "seq_len": ("seq_len", "seqlen", "seq", "seq_length", "sequence_length",
                "sequence_len", "s", "t", "l", "len", "length", "n",
                "num_tokens", "n_tokens", "ntokens", "tokens", "n_seq",
                "num_positions", "positions"),
    "input_size": ("input_size", "input", "in", "d_in", "din", "input_dim",
                   "d_input", "in_features", "in_dim", "in_size", "i", "emb",
                   "d_emb", "embed_dim", "emb_dim", "embedding_dim", "e",
                   "c", "d", "dim"),
    "hidden": ("hidden", "hidden_size", "hidden_dim", "h", "d_model",
               "dmodel", "d", "d_out", "dout", "dim", "hid", "d_hidden",
               "d_hid", "out", "out_features", "output_size", "output_dim",
               "c", "emb", "d_emb", "embed_dim", "emb_dim", "embedding_dim",
               "e"),
    "num_heads": ("num_heads", "heads", "nh", "n_heads", "nheads", "n_head",
                  "num_head", "n_h", "h", "head"),
    "head_size": ("head_size", "head", "hs", "head_dim", "d_head", "d_k",
                  "dk", "d_v", "dv", "d_q", "dq", "d_h", "dh", "head_sz",
                  "headsize", "hd", "d", "dim"),
}

_MEANINGS: dict[str, frozenset[str]] = {}
for _canon, _names in VOCABULARY.items():
    for _name in _names:
        _MEANINGS[_name] = _MEANINGS.get(_name, frozenset()) | {_canon}

VOCABULARY_HINT = (
    "write shapes like `# [batch_size, seq_len, hidden]` with the names "
    "batch_size (bs, batch), seq_len (seq), input_size (input), hidden, "
    "num_heads (heads), head_size (head_dim), integers, and products such "
    "as `bs * num_heads` (the notebook lists more synonyms)")

# Budgets that keep the check linear in the size of the source, whatever
# a hostile comment holds: a comment text longer than MAX_COMMENT_CHARS,
# brackets nested deeper than MAX_NESTING, a shape of more than MAX_DIMS
# dimensions or a dimension of more than MAX_TERMS names and numbers is not
# read. Such a comment counts as unreadable (a deduction, with a message
# that says why), never as a pass. Real shape comments are far inside.
MAX_COMMENT_CHARS = 600
MAX_NESTING = 8
MAX_DIMS = 8
MAX_TERMS = 8
# The ``unreadable`` culprits that name a budget rather than a token.
TOO_LONG = "<too long>"
TOO_DEEP = "<nested too deeply>"
TOO_BIG = "<too many dimensions or terms>"

START = "# YOUR CODE STARTS HERE"
END = "# YOUR CODE ENDS HERE"


@dataclass(frozen=True)
class ShapeIssue:
    """One statement whose shape comment is missing, unreadable or wrong."""

    line: int
    task: str        # the Region's task, e.g. "2.1"
    cls: str         # the Region's class
    kind: str        # "missing" | "unreadable" | "wrong"
    message: str     # "line 57: ..." (student-facing)


def meanings(name: str, extra: Collection[str] = ()) -> frozenset[str]:
    """The dimensions a written name may stand for (may be empty): its
    canonical meanings, plus the name itself if it is one of ``extra``
    (the grader's own size names). ``self.`` and case are ignored."""
    name = name.lower()
    if name.startswith("self."):
        name = name[5:]
    found = _MEANINGS.get(name, frozenset())
    return found | {name} if name in extra else found


def normalise_dims(dims: dict[str, int]) -> dict[str, int]:
    """``dims`` with lower-case keys, plus the canonical sizes that a
    non-canonical key stands for unambiguously (``d_out`` -> hidden) and
    ``head_size`` from hidden and num_heads when missing."""
    out = {k.lower(): v for k, v in dims.items()}
    for key, size in list(out.items()):
        canon = _MEANINGS.get(key, frozenset())
        if key not in CANONICAL and len(canon) == 1:
            out.setdefault(next(iter(canon)), size)
    if "head_size" not in out and out.get("num_heads") and \
            out.get("hidden", 0) % out["num_heads"] == 0:
        out["head_size"] = out["hidden"] // out["num_heads"]
    return out


# --------------------------------------------------------------------------
# Parsing one comment into shape claims

_ARROW = re.compile(r"-+>|=+>|[→⟶⇒⟹↦]")
_TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<ellipsis>\.\.\.|…)
  | (?P<name>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)
  | (?P<int>\d+)
  | (?P<op>//|[*/+\-(),×·⋅])
  | (?P<other>.)
""", re.VERBOSE)
_PRODUCT = {"*", "×", "·", "⋅", "x", "X"}


class _Unreadable(Exception):
    """A shape-like text that cannot be read; ``token`` is the culprit."""

    def __init__(self, token: str):
        super().__init__(token)
        self.token = token


@dataclass(frozen=True)
class _Dim:
    """One dimension of a claim: an arithmetic expression over names."""

    text: str                       # as written, normalised spacing
    op: str = ""                    # "" for a leaf, else "*", "/", ...
    name: str = ""                  # leaf: a name ...
    value: int | None = None        # ... or an integer literal
    left: _Dim | None = None
    right: _Dim | None = None

    def names(self) -> list[str]:
        """The names used, in order."""
        if self.op:
            return self.left.names() + self.right.names()
        return [self.name] if self.name else []

    def values(self, dims: dict[str, int]) -> set[Fraction]:
        """Every size this dimension can stand for, one per reading of its
        (possibly ambiguous) names."""
        if not self.op:
            if self.value is not None:
                return {Fraction(self.value)}
            return {Fraction(dims[c]) for c in meanings(self.name, dims)
                    if c in dims}
        out = set()
        for a, b in product(self.left.values(dims), self.right.values(dims)):
            if self.op in _PRODUCT:
                out.add(a * b)
            elif self.op == "+":
                out.add(a + b)
            elif self.op == "-":
                out.add(a - b)
            elif b:
                out.add(a / b if self.op == "/" else Fraction(a // b))
        return out


@dataclass(frozen=True)
class _Claim:
    """The shape a comment claims for one tensor."""

    dims: tuple[_Dim, ...]

    @property
    def text(self) -> str:
        return "[" + ", ".join(d.text for d in self.dims) + "]"

    def matches(self, shape: list[int], dims: dict[str, int],
                free: frozenset[int] = frozenset()) -> bool:
        """Same rank and every dimension fits (those at ``free``
        positions are not checked)."""
        return len(shape) == len(self.dims) and all(
            i in free or Fraction(size) in d.values(dims)
            for i, (d, size) in enumerate(zip(self.dims, shape)))

    def evaluated(self, shape: list[int], dims: dict[str, int]) -> str:
        """The claim in numbers, ``[2, 5, 5]``; an ambiguous dimension
        shows the reading that fits ``shape``, else all of them."""
        parts = []
        for i, dim in enumerate(self.dims):
            vals = sorted(dim.values(dims))
            if i < len(shape) and Fraction(shape[i]) in vals:
                vals = [Fraction(shape[i])]
            parts.append("|".join(_num(v) for v in vals) or "?")
        return "[" + ", ".join(parts) + "]"


def _num(value: Fraction) -> str:
    return str(value.numerator) if value.denominator == 1 else str(value)


class _DimParser:
    """Recursive descent over the tokens of one shape: dims separated by
    ``,`` (then ``x``/``×`` multiply) or by ``x``/``×``/juxtaposition."""

    def __init__(self, tokens: list[tuple[str, str]], *, commas: bool,
                 juxtapose: bool, sums: bool = True):
        self.tokens = tokens
        self.i = 0
        self.commas = commas        # "," separates; "x" multiplies
        self.juxtapose = juxtapose  # "b h s d" (einops style)
        self.sums = sums

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self) -> tuple[str, str]:
        tok = self.tokens[self.i]
        self.i += 1
        return tok

    def is_sep(self, tok: tuple[str, str] | None) -> bool:
        if tok is None:
            return False
        if self.commas:
            return tok[1] == ","
        return tok[1] in ("x", "X", "×", ",")

    def starts_atom(self, tok: tuple[str, str] | None) -> bool:
        return tok is not None and (tok[0] in ("name", "int", "ellipsis")
                                    or tok[1] == "(") and not self.is_sep(tok)

    def dims(self, *, stop_early: bool = False) -> list[_Dim]:
        """All dims up to the end (or, with ``stop_early``, up to the first
        token that cannot continue the list)."""
        out = [self.sum()]
        while self.peek() is not None:
            if len(out) > MAX_DIMS:
                raise _Unreadable(TOO_BIG)
            tok = self.peek()
            if self.is_sep(tok):
                save = self.i
                self.take()
                if self.peek() is None and tok[1] == ",":
                    break               # "(seq,)": trailing comma
                if stop_early and not self.starts_atom(self.peek()):
                    self.i = save
                    break
                out.append(self.sum())
            elif self.juxtapose and self.starts_atom(tok):
                out.append(self.sum())
            elif stop_early:
                break
            else:
                raise _Unreadable(tok[1])
        return out

    def sum(self) -> _Dim:
        left = self.prod()
        terms = 1
        while self.sums and self.peek() is not None and \
                self.peek()[1] in ("+", "-"):
            terms += 1
            if terms > MAX_TERMS:
                raise _Unreadable(TOO_BIG)
            op = self.take()[1]
            right = self.prod()
            left = _Dim(f"{left.text} {op} {right.text}", op=op, left=left,
                        right=right)
        return left

    def prod(self) -> _Dim:
        left = self.atom()
        terms = 1
        while self.peek() is not None and (
                self.peek()[1] in ("*", "/", "//", "·", "⋅") or
                (self.commas and self.peek()[1] in ("x", "X", "×"))):
            terms += 1
            if terms > MAX_TERMS:
                raise _Unreadable(TOO_BIG)
            op = self.take()[1]
            right = self.atom()
            shown = "*" if op in _PRODUCT else op
            left = _Dim(f"{left.text} {shown} {right.text}", op=op,
                        left=left, right=right)
        return left

    def atom(self) -> _Dim:
        tok = self.peek()
        if tok is None:
            raise _Unreadable("end of the shape")
        kind, text = self.take()
        if kind == "ellipsis":
            raise _Unreadable("...")
        if kind == "int":
            return _Dim(text, value=int(text))
        if kind == "name" and not self.is_sep(tok):
            return _Dim(text, name=text)
        if text == "(":
            inner = self.sum()
            close = self.peek()
            if close is None or close[1] != ")":
                raise _Unreadable(close[1] if close else "(")
            self.take()
            return _Dim(f"({inner.text})", op=inner.op, name=inner.name,
                        value=inner.value, left=inner.left,
                        right=inner.right)
        raise _Unreadable(text)


def _tokens(text: str) -> list[tuple[str, str]]:
    """Tokens of a shape text; adjacent words that form one known name
    (``num heads``, ``batch size``) are merged."""
    text = re.sub(r"(?<=\d)\s*[x×]\s*(?=\d)", " x ", text)
    text = re.sub(r"(?<=[A-Za-z])-(?=[A-Za-z])", "_", text)   # seq-len
    out: list[tuple[str, str]] = []
    for match in _TOKEN.finditer(text):
        kind = match.lastgroup
        if kind == "ws":
            continue
        tok = (kind, match.group())
        if kind == "name" and out and out[-1][0] == "name":
            joined = f"{out[-1][1]}_{tok[1]}"
            if meanings(joined):
                out[-1] = ("name", joined)
                continue
        out.append(tok)
    return out


def _known(dim: _Dim, extra: Collection[str]) -> bool:
    names = dim.names()
    return bool(names) and all(meanings(n, extra) for n in names)


def _unknown(dims: list[_Dim], extra: Collection[str]) -> str | None:
    for dim in dims:
        for name in dim.names():
            if not meanings(name, extra):
                return name
    return None


def _bracket_groups(text: str) -> tuple[list[tuple[str, str]], bool]:
    """Top-level ``[...]`` and ``(...)`` groups of ``text`` as (opener,
    content); a call's parentheses (``torch.Size([2, 5])``) are searched
    for groups instead. The flag says a bracket was left open."""
    groups: list[tuple[str, str]] = []
    pairs = {"[": "]", "(": ")"}
    i = 0
    while i < len(text):
        ch = text[i]
        if ch not in pairs:
            i += 1
            continue
        depth, j = 0, i
        while j < len(text):
            if text[j] in "[(":
                depth += 1
            elif text[j] in "])":
                depth -= 1
                if depth == 0:
                    break
            j += 1
        if j == len(text):
            return groups, True
        content = text[i + 1:j]
        is_call = ch == "(" and i > 0 and (text[i - 1].isalnum() or
                                           text[i - 1] in "_.")
        if is_call:
            inner, unclosed = _bracket_groups(content)
            groups.extend(inner)
        else:
            groups.append((ch, content))
        i = j + 1
    return groups, False


@dataclass
class _Parsed:
    """What one comment says: shape claims, or the token that could not be
    read (``unreadable``), or nothing shape-like at all."""

    text: str
    claims: list[_Claim] = field(default_factory=list)
    unreadable: str | None = None
    unclosed: bool = False

    @property
    def says_something(self) -> bool:
        return bool(self.claims) or self.unreadable is not None


def _parse_group(opener: str, content: str, extra: Collection[str]
                 ) -> tuple[_Claim | None, str | None]:
    """(claim, None), (None, culprit) or (None, None) for prose."""
    tokens = _tokens(content)
    if not tokens:
        # "[]" is a 0-dim tensor; "()" is more likely "softmax()" prose.
        return (_Claim(()), None) if opener == "[" else (None, None)
    if len(tokens) == 1 and tokens[0][0] == "ellipsis":
        return (None, "...") if opener == "[" else (None, None)
    if tokens[0][1] == "[" and tokens[-1][1] == "]":
        tokens = tokens[1:-1]       # "([2, 5, 12])"
    commas = any(t[1] == "," for t in _top_level(tokens))
    try:
        # "[b h s d]" (einops style) is a shape; "(b h s d)" is prose.
        dims = _DimParser(tokens, commas=commas,
                          juxtapose=opener == "[").dims()
    except _Unreadable as exc:
        return (None, exc.token) if opener == "[" else (None, None)
    if opener == "(":
        # Parentheses are shapes only when clearly so: two or more dims
        # (or "(seq,)") with at least one known name; else prose.
        if not (len(dims) >= 2 or tokens[-1][1] == ",") or \
                not any(_known(d, extra) for d in dims):
            return None, None
    culprit = _unknown(dims, extra)
    if culprit is not None:
        return None, culprit
    return _Claim(tuple(dims)), None


def _top_level(tokens: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The tokens outside any nested brackets."""
    depth, out = 0, []
    for tok in tokens:
        if tok[1] in ("(", "["):
            depth += 1
        elif tok[1] in (")", "]"):
            depth -= 1
        elif depth == 0:
            out.append(tok)
    return out


def _parse_bare(text: str, extra: Collection[str]
                ) -> tuple[_Claim | None, str | None]:
    """A shape written without brackets: ``bs x seq x hidden`` (products
    only, at least one known name) or ``bs, seq, hidden`` (all names
    known). The first such run in the text counts."""
    tokens = _tokens(text)
    for start in range(len(tokens)):
        for commas in (False, True):
            parser = _DimParser(tokens[start:], commas=commas,
                                juxtapose=False, sums=False)
            if not parser.starts_atom(parser.peek()):
                break
            try:
                dims = parser.dims(stop_early=True)
            except _Unreadable:
                continue
            seps = {t[1] for t in tokens[start:start + parser.i]
                    if parser.is_sep(t)}
            if len(dims) < 2 or (commas and seps != {","}) or \
                    (not commas and not seps & {"x", "X", "×"}):
                continue
            if commas and all(_known(d, extra) for d in dims):
                return _Claim(tuple(dims)), None
            if not commas and (any(_known(d, extra) for d in dims) or
                               not any(d.names() for d in dims)):
                culprit = _unknown(dims, extra)
                if culprit is None:
                    return _Claim(tuple(dims)), None
                return None, culprit
    return None, None


def parse_comment(text: str, extra: Collection[str] = ()) -> _Parsed:
    """Read the shape claims of a comment (``#`` already stripped); see
    ``_parse_comment``. Cached: a statement's texts are read several times
    (as its own candidates and as its neighbours')."""
    return _parse_cached(text, tuple(sorted(k.lower() for k in extra)))


@functools.lru_cache(maxsize=4096)
def _parse_cached(text: str, extra: tuple[str, ...]) -> _Parsed:
    return _parse_comment(text, extra)


def _parse_comment(text: str, extra: Collection[str] = ()) -> _Parsed:
    """Read the shape claims of a comment (``#`` already stripped).

    In a chain (``[a] @ [b] -> [c]``) the part after the last arrow is the
    claim. Each ``[...]`` group (and each shape-like ``(...)`` group) is
    one claim, for one tensor or for all of a statement's tensors.
    """
    parsed = _Parsed(text)
    budget = _over_budget(text)
    if budget is not None:
        parsed.unreadable = budget
        return parsed
    try:
        return _parse_segments(parsed, text, extra)
    except RecursionError:      # the budgets should make this unreachable
        parsed.claims, parsed.unreadable = [], TOO_DEEP
        return parsed


def _over_budget(text: str) -> str | None:
    """Which budget ``text`` exceeds (TOO_LONG, TOO_DEEP), if any."""
    if len(text) > MAX_COMMENT_CHARS:
        return TOO_LONG
    depth = deepest = 0
    for ch in text:
        if ch in "[(":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "])":
            depth = max(depth - 1, 0)
    return TOO_DEEP if deepest > MAX_NESTING else None


def _parse_segments(parsed: _Parsed, text: str,
                    extra: Collection[str]) -> _Parsed:
    segments = _ARROW.split(text)
    for segment in reversed(segments):
        groups, unclosed = _bracket_groups(segment)
        parsed.unclosed = parsed.unclosed or unclosed
        claims, culprit = [], None
        for opener, content in groups:
            claim, bad = _parse_group(opener, content, extra)
            if claim is not None:
                claims.append(claim)
            culprit = culprit or bad
        if not claims and culprit is None and not unclosed:
            claim, culprit = _parse_bare(segment, extra)
            claims = [claim] if claim else []
        if claims or culprit:
            parsed.claims, parsed.unreadable = claims, culprit
            return parsed
    return parsed


# --------------------------------------------------------------------------
# Matching claims to the tensors a statement bound

def _assign(claims: list[_Claim], shapes: list[list[int]],
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


def _matches(parsed: _Parsed, runs: list[list[list[int]]],
             dims: dict[str, int]) -> bool:
    """Whether the claims describe some execution, or every execution
    when the sizes that vary between them (a tensor grown by ``torch.cat``
    in a loop) are left unchecked."""
    if parsed.unreadable is not None:
        # Shapes that vary between executions may need a loop variable
        # (``[bs, seq, (i + 1) * head_size]``): not the student's fault.
        return _varying(runs) is not None and \
            parsed.unreadable.isidentifier()
    if any(_assign(parsed.claims, shapes, dims) for shapes in runs):
        return True
    free = _varying(runs)
    return free is not None and _assign(parsed.claims, runs[0], dims, free)


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
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
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
        first = source.splitlines()[node.lineno - 1][node.col_offset:]
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


def dims_as_names(shape: list[int], dims: dict[str, int]) -> str:
    """``[2, 5, 5]`` -> ``[batch_size, seq_len, seq_len]`` (a product of
    two names when no single one fits, else the number)."""
    order = [c for c in CANONICAL if c in dims] + \
        [c for c in dims if c not in CANONICAL]
    parts = []
    for size in shape:
        name = next((c for c in order if dims[c] == size), None)
        if name is None:
            name = next((f"{a} * {b}" for i, a in enumerate(order)
                         for b in order[i + 1:]
                         if dims[a] * dims[b] == size), str(size))
        parts.append(name)
    return "[" + ", ".join(parts) + "]"


def _example(shapes: list[list[int]], dims: dict[str, int]) -> str:
    texts = [dims_as_names(s, dims) for s in shapes]
    if len(set(texts)) == 1:
        return f"# {texts[0]}"
    return "# " + ", ".join(texts)


def _shapes_text(shapes: list[list[int]]) -> str:
    return ", ".join(str(list(s)) for s in shapes)


def _wrong_message(line: int, parsed: _Parsed, runs: list[list[list[int]]],
                   dims: dict[str, int]) -> str:
    shapes = runs[0]
    if len(parsed.claims) == 1:
        claim = parsed.claims[0]
        told = f"{claim.text} = {claim.evaluated(shapes[0], dims)}"
    else:
        told = ", ".join(
            f"{c.text} = {c.evaluated(shapes[min(i, len(shapes) - 1)], dims)}"
            for i, c in enumerate(parsed.claims))
    if len(shapes) == 1:
        actual = f"the tensor is {shapes[0]}"
    else:
        actual = f"the tensors are {_shapes_text(shapes)}"
    if len(runs) > 1:
        others = "; ".join(_shapes_text(r) for r in runs[1:4])
        actual += f" (in other calls: {others})"
    return f"line {line}: comment claims {told} but {actual}"


def _unreadable_message(line: int, parsed: _Parsed) -> str:
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
        return (f"line {line}: the shape comment `# "
                f"{_shorten(parsed.text, 40)}` has {limit}, which the "
                f"grader does not read; {VOCABULARY_HINT}")
    if parsed.unreadable == "...":
        what = "`...`: write every dimension out"
    else:
        what = code_span(parsed.unreadable)
    # The comment is the student's text: a code span it cannot close
    return (f"line {line}: cannot read {what} in the shape comment "
            f"{code_span('# ' + _shorten(parsed.text, 60))}; "
            f"{VOCABULARY_HINT}")


def _shorten(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 4] + " ..."


def check_shape_comments(
        source: str,
        observed: dict[int, list[list[list[int]]]],
        dims: dict[str, int],
        tasks: set[str] | None = None,
        dims_by_class: dict[str, dict[str, int]] | None = None,
) -> list[ShapeIssue]:
    """The shape-comment issues of the student regions of ``source``.

    ``observed`` is ``ProbeResult.shapes`` (merged over the traced probes):
    first line of a statement -> the distinct lists of shapes it bound.
    ``dims`` maps canonical names (batch_size, seq_len, input_size,
    hidden, num_heads, head_size) to the sizes of the traced run;
    ``dims_by_class`` overrides them for the regions of one class.
    ``tasks`` limits the check to the regions of those tasks.

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
    observed = {int(k): v for k, v in observed.items()}
    regions = [r for r in graded_regions(source, tree)
               if tasks is None or r.task in tasks]
    statements = [(r, n) for r, n in student_statements(tree, regions)
                  if isinstance(n, _BINDING)]
    lines = _scan(source)
    starts = {n.lineno: n for _, n in statements}
    ends = {n.end_lineno: n for _, n in statements}

    def runs_of(node: ast.stmt) -> list[list[list[int]]]:
        # 0-dim tensors (a scale factor) have no shape worth a comment.
        runs = [[list(s) for s in run if s]
                for run in observed.get(node.lineno, [])]
        return [run for run in runs if run]

    ran_regions = {r for r, n in statements if runs_of(n)}
    tensor_names: dict[str, set[str]] = {}
    for region, node in statements:
        names, runs = _target_names(node), runs_of(node)
        if runs and (len(names) == 1 or
                     all(len(run) == len(names) for run in runs)):
            tensor_names.setdefault(region.cls, set()).update(names)

    issues = []
    for region, node in statements:
        dims_here = normalise_dims((dims_by_class or {}).get(region.cls,
                                                             dims))
        cands = _candidates(node, region, lines, starts, ends)
        runs = runs_of(node)
        text = statement_text(source, node)

        def issue(kind: str, message: str) -> None:
            issues.append(ShapeIssue(node.lineno, region.task, region.cls,
                                     kind, message))

        if not runs:
            # Never ran (or bound no tensor): presence check only.
            if region in ran_regions or _only_subscripts(node) or \
                    _obviously_not_tensor(node.value):
                continue
            known = tensor_names.get(region.cls, set())
            held = [n for n in _target_names(node) if n in known]
            if held and not cands.acceptable():
                issue("missing",
                      f"line {node.lineno}: {code_span(text)} has no shape "
                      f"comment "
                      f"(the traced calls did not run this line, but "
                      f"`{held[0]}` holds a tensor elsewhere; write its "
                      f"shape, e.g. `# [batch_size, seq_len, hidden]`)")
            continue
        if _only_subscripts(node):
            continue
        parsed = [parse_comment(t, dims_here) for t in cands.acceptable()]
        if any(_matches(p, runs, dims_here) for p in parsed):
            continue

        def belongs(text: str, neighbour: ast.stmt) -> bool:
            # A shared comment that fits the neighbour is the neighbour's.
            return _matches(parse_comment(text, dims_here),
                            runs_of(neighbour),
                            dims_here)

        report = next((p for p in (parse_comment(t, dims_here)
                                   for t in cands.reportable(belongs))
                       if p.says_something), None)
        if report is None:
            issue("missing",
                  f"line {node.lineno}: {code_span(text)} binds a tensor "
                  f"but has no "
                  f"shape comment (write e.g. "
                  f"`{_example(runs[0], dims_here)}`)")
        elif report.unreadable is not None:
            issue("unreadable", _unreadable_message(node.lineno, report))
        else:
            issue("wrong", _wrong_message(node.lineno, report, runs,
                                          dims_here))
    return issues
