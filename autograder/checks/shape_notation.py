"""The shape-comment notation: what a comment may say, and how it is read.

The notation is data, the homework's own (its profile's ``[data]
shape_notation``, attention's ``autograder/shape_notation.toml``): the
size names a student may write and the forms of a shape, each with an
example. A :class:`Notation` holds one (:func:`notation_of` a profile,
read at call time from the profile the config carries, never on
import). This module reads comments with it (:func:`parse_comment`) and
renders the notebook's table from it (:func:`notation_markdown`), so that
the notebook promises exactly what the grader reads. The grammar is the
promise and nothing more::

    comment  := text ( "->" text )*     the last part holding a shape counts
    shape    := "[" dims "]" | "(" dims ")"
    dims     := dim ( "," dim )* [","]
    dim      := factor ( "*" factor )*
    factor   := a name of the table (any case) | an integer

Parentheses are read only when a segment has no square brackets, and only
when they hold a comma and a known name (else they are prose).
"""
from __future__ import annotations

import functools
import math
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True, eq=False)
class Notation:
    """One homework's notation (its ``shape_notation.toml``, decoded):
    the size names a comment may write, the forms of a shape, and the
    sizes derived from two others. Built once per file
    (:func:`load_notation`) from the profile the config carries, and
    passed to what reads comments; compared and hashed by identity."""

    table: dict[str, Any]

    @functools.cached_property
    def vocabulary(self) -> dict[str, tuple[str, ...]]:
        """Size key -> the names students may write for it (the key
        first)."""
        return {row["key"]: tuple(row["names"])
                for row in self.table["size"]}

    @property
    def canonical(self) -> tuple[str, ...]:
        """The size keys, in the table's order."""
        return tuple(self.vocabulary)

    @functools.cached_property
    def derived(self) -> dict[str, tuple[str, str]]:
        """Size key -> (the size it divides, the size it divides by): a
        size the constructor does not show, derived from two it does."""
        return {row["key"]: (row["whole"], row["per"])
                for row in self.table.get("derived", [])}

    @functools.cached_property
    def _size_of(self) -> dict[str, str]:
        return {name.lower(): key for key, names in self.vocabulary.items()
                for name in names}

    @functools.cached_property
    def hint(self) -> str:
        """How to write a shape, naming every size: what feedback on an
        unreadable comment says."""
        return (
            "write shapes like `# [batch_size, seq_len, hidden]` with the "
            "names " + ", ".join(
                f"{names[0]} ({', '.join(names[1:])})" if names[1:] else
                names[0] for names in self.vocabulary.values()) +
            f", integers, and products such as "
            f"`{self.table.get('product_example', 'bs * seq')}`")

    def size_of(self, name: str) -> str | None:
        """The size key a written name stands for (``T`` -> seq_len), or
        None if the table does not list it."""
        return self._size_of.get(name.lower())

    def normalise_dims(self, dims: dict[str, int]) -> dict[str, int]:
        """``dims`` with lower-case keys, plus the size keys that a listed
        name among them stands for (``d_out`` -> hidden), and each derived
        size (the table's ``[[derived]]``, e.g. a head's size) when
        missing."""
        out = {k.lower(): v for k, v in dims.items()}
        for key, size in list(out.items()):
            if self.size_of(key):
                out.setdefault(self.size_of(key), size)
        for key, (whole, per) in self.derived.items():
            if key not in out and out.get(per) and \
                    out.get(whole, 0) % out[per] == 0:
                out[key] = out[whole] // out[per]
        return out

    def parse_comment(self, text: str) -> Parsed:
        """Read the shape claims of a comment (``#`` already stripped):
        :func:`parse_comment` with this notation."""
        return parse_comment(text, self)

    def markdown(self) -> str:
        """The notebook's notation: :func:`notation_markdown`."""
        return notation_markdown(self)


@functools.cache
def _load(path: Path) -> Notation:
    return Notation(tomllib.loads(path.read_text(encoding="utf-8")))


def load_notation(path: Path | str) -> Notation:
    """The notation in the file ``path`` (a profile's ``[data]
    shape_notation``), read once per process."""
    return _load(Path(path).resolve())


def notation_of(hw: Any) -> Notation:
    """The homework ``hw``'s notation (its profile's shape_notation)."""
    return load_notation(hw.shape_notation)


# Budgets that keep reading linear in the size of the source, whatever a
# hostile comment holds: a comment text longer than MAX_COMMENT_CHARS,
# brackets nested deeper than MAX_NESTING, a shape of more than MAX_DIMS
# dimensions or a dimension of more than MAX_TERMS factors is not read.
# Such a comment counts as unreadable (a deduction, with a message that
# says why), never as a pass. Real shape comments are far inside.
MAX_COMMENT_CHARS = 600
MAX_NESTING = 8
MAX_DIMS = 8
MAX_TERMS = 8
# The ``unreadable`` culprits that name a budget rather than a token.
TOO_LONG = "<too long>"
TOO_DEEP = "<nested too deeply>"
TOO_BIG = "<too many dimensions or terms>"

REST = "..."    # first in a claim: any number of leading dimensions
_SQUARE = re.compile(r"\[([^\[\]]*)\]")
_ROUND = re.compile(r"\(([^()\[\]]*)\)")
_TOKEN = re.compile(r"\.\.\.|…|[A-Za-z_]\w*|\d+|\S")
_FACTOR = re.compile(r"[A-Za-z_]\w*|\d+")


@dataclass(frozen=True)
class Dim:
    """One dimension of a claim: a product of names and integers."""

    factors: tuple[str, ...]
    # Each factor's size key in the notation it was read with (an
    # integer: itself; a name the notation does not list: "").
    keys: tuple[str, ...] = ()

    @property
    def text(self) -> str:
        return " * ".join(self.factors)

    @property
    def is_rest(self) -> bool:
        """``...`` first in a claim: any number of leading dimensions (a
        helper called on 3-d and on 4-d tensors)."""
        return self.factors == (REST,)

    def value(self, dims: dict[str, int]) -> int | None:
        """The size it stands for; None if a name's size is not traced."""
        sizes = [int(k) if k.isdigit() else dims.get(k)
                 for k in self.keys]
        return None if None in sizes or not sizes else math.prod(sizes)


def _fits(claimed: int | None, size: int, grown: bool) -> bool:
    """A claimed size describes ``size``: equal, or (``grown``) a
    positive size that ``size`` is a multiple of."""
    if not grown or claimed is None:
        return claimed == size
    return claimed > 0 and size % claimed == 0


@dataclass(frozen=True)
class Claim:
    """The shape a comment claims for one tensor."""

    dims: tuple[Dim, ...]

    @property
    def text(self) -> str:
        return "[" + ", ".join(d.text for d in self.dims) + "]"

    def matches(self, shape: list[int], dims: dict[str, int],
                free: frozenset[int] = frozenset()) -> bool:
        """Same rank and every dimension fits (at a ``free`` position, a
        place that grows between executions, the size claimed need only
        divide the size: a piece of a tensor grown by concatenation); a
        leading ``...`` stands for any number of dimensions, the others
        fit the last ones."""
        named = self.dims[1:] if self.dims and self.dims[0].is_rest \
            else self.dims
        start = len(shape) - len(named)
        if start < 0 or (start and named is self.dims):
            return False
        return all(_fits(d.value(dims), size, start + i in free)
                   for i, (d, size) in enumerate(zip(named, shape[start:])))

    def evaluated(self, dims: dict[str, int]) -> str:
        """The claim in numbers, ``[2, 5, 5]`` (``?`` for a size the
        traced run does not have, ``...`` kept)."""
        values = (REST if d.is_rest else d.value(dims) for d in self.dims)
        return "[" + ", ".join("?" if v is None else str(v)
                               for v in values) + "]"


@dataclass(frozen=True)
class Parsed:
    """What one comment says: shape claims, or the token that could not be
    read (``unreadable``), or nothing shape-like at all."""

    text: str
    claims: tuple[Claim, ...] = ()
    unreadable: str | None = None

    @property
    def says_something(self) -> bool:
        return bool(self.claims) or self.unreadable is not None


class _Unreadable(Exception):
    """A shape that cannot be read; ``token`` is the culprit."""

    def __init__(self, token: str):
        super().__init__(token)
        self.token = token


def _dims(content: str) -> list[Dim]:
    """The dimensions of one bracket's content (raises _Unreadable)."""
    if not content.strip():
        raise _Unreadable("[]")
    parts = content.split(",")
    if len(parts) > 1 and not parts[-1].strip():
        parts.pop()                         # "(seq,)"
    if len(parts) > MAX_DIMS:
        raise _Unreadable(TOO_BIG)
    dims = []
    if parts[0].strip() in (REST, "…"):      # "[..., seq, seq]"
        dims.append(Dim((REST,), (REST,)))
        parts = parts[1:]
        if not parts:
            raise _Unreadable(REST)         # "[...]" claims nothing
    for part in parts:
        factors = part.split("*")
        if len(factors) > MAX_TERMS:
            raise _Unreadable(TOO_BIG)
        dims.append(Dim(tuple(_factor(f, len(factors) > 1)
                              for f in factors)))
    return dims


def _factor(text: str, in_product: bool) -> str:
    """A name or an integer; else _Unreadable naming the first token that
    is neither (``;``, ``...``), the second of two names (``[b h d]``), or
    the separator before an empty factor."""
    tokens = _TOKEN.findall(text)
    if len(tokens) == 1 and _FACTOR.fullmatch(tokens[0]):
        return tokens[0]
    if not tokens:
        raise _Unreadable("*" if in_product else ",")
    bad = [t for t in tokens if not _FACTOR.fullmatch(t)] + tokens[1:]
    raise _Unreadable(bad[0])


def _unknown(dims: list[Dim], notation: Notation) -> str | None:
    """The first name the table does not list."""
    return next((f for d in dims if not d.is_rest for f in d.factors
                 if not f.isdigit() and not notation.size_of(f)), None)


def _resolved(dim: Dim, notation: Notation) -> Dim:
    """``dim`` with each factor's size key in ``notation``."""
    if dim.is_rest:
        return dim
    return Dim(dim.factors, tuple(
        f if f.isdigit() else notation.size_of(f) or ""
        for f in dim.factors))


def _read_segment(segment: str, notation: Notation
                  ) -> tuple[list[Claim], str | None]:
    """The claims of one part of a chain, and the first culprit."""
    claims, culprit = [], None
    square = _SQUARE.findall(segment)
    for content in square or _ROUND.findall(segment):
        try:
            dims = _dims(content)
        except _Unreadable as exc:
            if square:
                culprit = culprit or exc.token
            continue
        if not square and ("," not in content or all(
                f.isdigit() or not notation.size_of(f)
                for d in dims for f in d.factors)):
            continue                        # "(scaled)", "(q, k, v)": prose
        bad = _unknown(dims, notation)
        if bad is None:
            claims.append(Claim(tuple(_resolved(d, notation)
                                      for d in dims)))
        culprit = culprit or bad
    return claims, culprit


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


@functools.lru_cache(maxsize=4096)
def parse_comment(text: str, notation: Notation) -> Parsed:
    """Read the shape claims of a comment (``#`` already stripped), with
    the size names of ``notation``.

    In a chain (``[a] @ [b] -> [c]``) the last part that holds a shape is
    the claim. Each bracket group of that part is one claim, for one
    tensor or for all of a statement's tensors. Cached: a statement's
    texts are read several times (as its own and as its neighbours').
    """
    budget = _over_budget(text)
    if budget is not None:
        return Parsed(text, unreadable=budget)
    for segment in reversed(text.split("->")):
        claims, culprit = _read_segment(segment, notation)
        if claims or culprit:
            return Parsed(text, tuple(claims), culprit)
    return Parsed(text)


def notation_markdown(notation: Notation) -> str:
    """The notebook's notation: the table of size names and the forms of a
    shape, rendered from the same data the parser reads."""
    rows = [f"| {row['meaning']} | "
            f"{', '.join(f'`{n}`' for n in row['names'])} |"
            for row in notation.table["size"]]
    forms = [f"- {form['rule']}: `# {form['example']}`"
             for form in notation.table["form"]]
    return "\n".join([
        "Name the dimensions with this vocabulary (any name of a row "
        "works; case does not matter):",
        "",
        "| dimension | names |",
        "|-----------|-------|",
        *rows,
        "",
        "Write the shape like this:",
        "",
        *forms,
        "",
        "Nothing else is read: `...` only first, and no other arithmetic "
        "than products.",
    ]) + "\n"
