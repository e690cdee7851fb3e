"""The strings an expression of the parsed module can hold, as patterns:
``"mod" + "ules"`` holds ``modules``, ``"__glob" + suffix`` anything
starting ``__glob``, a variable what its assignments hold. The grader
access rule asks it so that a name built at run time is judged as the
name it builds (a second, run-time line stands behind it).

A pattern is a regular expression over the whole string; ``ANY`` stands
for a piece the grader cannot know. ``None`` means the expression is not
a string the grader can see at all (a parameter, an attribute).
"""
from __future__ import annotations

import ast
import re

from autograder.checks.scopes import Scopes

ANY = ".*"
MAX_PATTERNS = 16          # more alternatives than this: any string
MAX_DEPTH = 6              # names followed through their assignments
# str methods whose result on a known string with constant arguments the
# grader computes itself (none runs student code).
_STR_METHODS = frozenset({
    "upper", "lower", "casefold", "swapcase", "title", "capitalize",
    "strip", "lstrip", "rstrip", "replace", "removeprefix", "removesuffix",
})


class Strings:
    """Patterns of the string expressions of one module."""

    def __init__(self, scopes: Scopes) -> None:
        self.scopes = scopes

    def patterns(self, node: ast.AST, depth: int = 0) -> list[str] | None:
        """The patterns ``node`` may hold, or None if it is not a string
        the grader can see."""
        if depth > MAX_DEPTH:
            return [ANY]
        found = self._patterns(node, depth)
        if found is not None and len(found) > MAX_PATTERNS:
            return [ANY]
        return found

    def built(self, node: ast.AST) -> bool:
        """Whether ``node`` builds a string (rather than naming one)."""
        if isinstance(node, ast.JoinedStr):
            return True
        if isinstance(node, ast.BinOp):
            return self.patterns(node) is not None
        if isinstance(node, ast.Call):
            func = node.func
            return isinstance(func, ast.Name) and func.id == "chr" or \
                isinstance(func, ast.Attribute) and func.attr in (
                    "join", "format", "decode", *_STR_METHODS)
        if isinstance(node, ast.Subscript):
            return self.patterns(node.value) is not None
        return False

    # ------------------------------------------------------------------
    def _patterns(self, node: ast.AST, depth: int) -> list[str] | None:
        if isinstance(node, ast.Constant):
            if isinstance(node.value, str):
                return [re.escape(node.value)]
            if isinstance(node.value, bytes):
                return [re.escape(node.value.decode("latin-1"))]
            return None
        if isinstance(node, ast.JoinedStr):
            pieces: list[list[str]] = []
            for part in node.values:
                if isinstance(part, ast.Constant):
                    pieces.append([re.escape(str(part.value))])
                else:
                    inner = self.patterns(part.value, depth + 1) \
                        if part.conversion == -1 and part.format_spec is None\
                        else None
                    pieces.append(inner or [ANY])
            return _product(pieces)
        if isinstance(node, ast.BinOp):
            left = self.patterns(node.left, depth + 1)
            right = self.patterns(node.right, depth + 1)
            if isinstance(node.op, ast.Add) and (left or right):
                return _product([left or [ANY], right or [ANY]])
            if isinstance(node.op, ast.Mod) and left:
                return [re.sub(r"%[-+ 0#]*\d*(?:\.\d+)?[a-zA-Z%]", ANY, p)
                        for p in left]
            if isinstance(node.op, ast.Mult) and (left or right):
                return [ANY]
            return None
        if isinstance(node, ast.IfExp):
            a = self.patterns(node.body, depth + 1)
            b = self.patterns(node.orelse, depth + 1)
            return None if a is None and b is None else \
                (a or [ANY]) + (b or [ANY])
        if isinstance(node, ast.Subscript):
            value = self.patterns(node.value, depth + 1)
            if value is None:
                return None
            known = _literals(value)
            key = _constant(node.slice)
            if known is not None and key is not _UNKNOWN:
                try:
                    return [re.escape(str(v[key])) for v in known]
                except (TypeError, ValueError, IndexError):
                    return [ANY]
            return [ANY]
        if isinstance(node, ast.Call):
            return self._call(node, depth)
        if isinstance(node, ast.Name):
            return self._name(node, depth)
        return None

    def _call(self, node: ast.Call, depth: int) -> list[str] | None:
        func = node.func
        args = [_constant(a) for a in node.args]
        if isinstance(func, ast.Name) and func.id == "chr":
            if len(args) == 1 and isinstance(args[0], int) and \
                    0 <= args[0] < 0x110000:
                return [re.escape(chr(args[0]))]
            return [ANY]
        if isinstance(func, ast.Name) and func.id == "str" and node.args:
            return self.patterns(node.args[0], depth + 1) or [ANY]
        if not isinstance(func, ast.Attribute):
            return None
        owner = self.patterns(func.value, depth + 1)
        if func.attr == "join" and owner is not None and len(node.args) == 1:
            items = node.args[0]
            if isinstance(items, (ast.List, ast.Tuple)):
                parts = [self.patterns(e, depth + 1) or [ANY]
                         for e in items.elts]
                sep = owner
                joined: list[list[str]] = []
                for i, part in enumerate(parts):
                    joined += [sep, part] if i else [part]
                return _product(joined) if joined else [""]
            return [ANY]
        if owner is None:
            return None
        if func.attr in _STR_METHODS:
            known = _literals(owner)
            if known is not None and _UNKNOWN not in args and \
                    all(isinstance(a, str) for a in args) and \
                    not node.keywords:
                try:
                    return [re.escape(getattr(v, func.attr)(*args))
                            for v in known]
                except (TypeError, ValueError):
                    return [ANY]
            return [ANY]
        if func.attr in ("format", "decode", "format_map"):
            return [ANY] if func.attr != "decode" else owner
        return None

    def _name(self, node: ast.Name, depth: int) -> list[str] | None:
        values = self.scopes.values(node)
        if not values:
            return None
        if len(values) > MAX_PATTERNS:
            return [ANY]       # bounded work per use, whatever the code
        found: list[str] = []
        seen_string = False
        for value in values:
            if value is None:
                found.append(ANY)
                continue
            if isinstance(value, tuple) and value[0] == "aug":
                aug = value[1]
                extra = self.patterns(aug.value, depth + 1)
                if extra is not None:
                    seen_string = True
                    found.append(ANY + "".join(extra[:1]) if
                                 len(extra) == 1 else ANY)
                continue
            if isinstance(value, tuple) and value[0] == "for":
                items = value[1]
                if isinstance(items, (ast.List, ast.Tuple, ast.Set)):
                    for elt in items.elts:
                        got = self.patterns(elt, depth + 1)
                        if got is not None:
                            seen_string = True
                            found += got
                continue
            got = self.patterns(value, depth + 1)
            if got is not None:
                seen_string = True
                found += got
        return found if seen_string else None


_UNKNOWN = object()


def _constant(node: ast.AST):
    """The value of a constant (a slice of constants too), else
    ``_UNKNOWN``."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and \
            isinstance(node.operand, ast.Constant) and \
            isinstance(node.operand.value, int):
        return -node.operand.value
    if isinstance(node, ast.Slice):
        parts = [None if p is None else _constant(p)
                 for p in (node.lower, node.upper, node.step)]
        if _UNKNOWN in parts:
            return _UNKNOWN
        return slice(*parts)
    return _UNKNOWN


def _literals(patterns: list[str]) -> list[str] | None:
    """The strings ``patterns`` stand for when each is a known string."""
    found = []
    for p in patterns:
        text = re.sub(r"\\(.)", r"\1", p, flags=re.DOTALL)
        if re.escape(text) != p:
            return None
        found.append(text)
    return found


def _product(pieces: list[list[str]]) -> list[str]:
    """Every concatenation of one pattern of each piece (any string when
    there would be too many)."""
    found = [""]
    for piece in pieces:
        found = [a + b for a in found for b in piece]
        if len(found) > MAX_PATTERNS:
            return [ANY]
    return found


def could_be(patterns: list[str], names) -> list[str]:
    """The names of ``names`` some pattern of ``patterns`` matches whole,
    counting only patterns that fix at least three characters (a pattern
    that fixes nearly nothing, e.g. ``f"{a}{b}"``, says nothing)."""
    found = []
    for p in patterns:
        fixed = len(re.sub(r"\\(.)", r"\1", p.replace(ANY, "")))
        if fixed < 3 and ANY in p:
            continue
        rx = re.compile(p, re.DOTALL)
        found += [n for n in names if rx.fullmatch(n)]
    return sorted(set(found))
