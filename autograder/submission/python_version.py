"""What a submission uses that the grader's Python lacks.

A student may run a newer Python than the grader's (the student README
asks for 3.11 or newer; the grader runs 3.11 on Ubuntu 22.04's image). A
``type`` alias or ``typing.override`` passes the student's own checks and
fails to import on the grader, for 0 points. The features and the
grader's version are data (``autograder/python_features.toml``); this
module finds them in a source:

- ``check_warnings``: ``check``'s warning, naming both versions, for a
  student whose Python is newer than the grader's (nothing on the
  grader's own version);
- ``grader_note``: the grader's feedback when the module failed to
  import: its own version and the newer feature the code uses.
"""
from __future__ import annotations

import ast
import io
import re
import sys
import tokenize
import tomllib
from dataclasses import dataclass
from pathlib import Path

from autograder import homework

MAX_SOURCE = 200_000     # characters searched (the reference: ~14,000)
Version = tuple[int, int]


@dataclass(frozen=True)
class Use:
    """One use of a feature newer than some Python: where and what."""

    line: int
    what: str
    since: Version


def _version(text: str) -> Version:
    major, minor = str(text).split(".")[:2]
    return int(major), int(minor)


def _text(version: Version) -> str:
    return f"{version[0]}.{version[1]}"


def load_features(path: Path | None = None) -> dict:
    """The table, read and checked (an entry without ``since`` or with
    neither pattern nor detector is an error naming it)."""
    path = path or homework.current().python_features
    data = tomllib.loads(path.read_text())
    data["grader"] = _version(data["grader"])
    for entry in data.get("syntax", []):
        entry["since"] = _version(entry["since"])
        if "pattern" in entry:
            entry["regex"] = re.compile(entry["pattern"])
        elif entry.get("detector") not in _DETECTORS:
            raise ValueError(f"{path}: syntax entry {entry.get('what')!r} "
                             f"has no pattern and no known detector")
    for entry in data.get("name", []):
        entry["since"] = _version(entry["since"])
    return data


def grader_version(path: Path | None = None) -> Version:
    """The oldest Python the grader runs."""
    return load_features(path)["grader"]


def newer_uses(source: str, than: Version, *,
               path: Path | None = None) -> list[Use]:
    """The uses in ``source`` of features newer than Python ``than``, by
    line. Works whether or not this Python can parse ``source``; a
    source over ``MAX_SOURCE`` characters is not searched."""
    table = load_features(path)
    if len(source) > MAX_SOURCE:
        return []
    try:
        # One walk of the tree serves every search below.
        nodes: list[ast.AST] | None = list(ast.walk(ast.parse(source)))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        nodes = None
    found: set[Use] = set()
    starts = _statement_lines(source, nodes)
    lines = source.splitlines()
    for entry in table.get("syntax", []):
        if entry["since"] <= than:
            continue
        if "regex" in entry:
            for number in starts:
                if number <= len(lines) and \
                        entry["regex"].match(lines[number - 1]):
                    found.add(Use(number, entry["what"], entry["since"]))
        elif nodes is not None:
            for number in _DETECTORS[entry["detector"]](source, nodes):
                found.add(Use(number, entry["what"], entry["since"]))
    if nodes is not None:
        wanted = {f"{e['module']}.{e['name']}": e["since"]
                  for e in table.get("name", []) if e["since"] > than}
        for number, dotted in _names(nodes):
            if dotted in wanted:
                found.add(Use(number, f"`{dotted}`", wanted[dotted]))
    return sorted(found, key=lambda u: (u.line, u.what))


def _statement_lines(source: str, nodes: list[ast.AST] | None
                     ) -> list[int]:
    """The lines where a statement starts (not inside a string), from
    the tree's ``nodes`` or, where this Python cannot parse ``source``,
    its tokens."""
    if nodes is not None:
        return sorted({node.lineno for node in nodes
                       if isinstance(node, ast.stmt)})
    starts, new = set(), True
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type in (tokenize.NEWLINE, tokenize.NL,
                              tokenize.INDENT, tokenize.DEDENT,
                              tokenize.COMMENT):
                new = new or token.type != tokenize.COMMENT
                continue
            if new:
                starts.add(token.start[0])
            new = False
    except (tokenize.TokenError, SyntaxError):
        return list(range(1, source.count("\n") + 2))
    return sorted(starts)


def _fstring_lines(source: str, nodes: list[ast.AST]) -> list[int]:
    """f-strings only Python >= 3.12 reads (PEP 701): a backslash, or
    the f-string's own single quote, inside a replacement field. (The
    source's lines are split once: student code may hold many f-strings.)
    """
    lines = source.splitlines(keepends=True)
    found: list[int] = []
    for node in nodes:
        if not isinstance(node, ast.JoinedStr):
            continue
        quote = _segment(lines, node, 8).lstrip("rRfFbBuU")[:3]
        quote = quote if quote in ('"""', "'''") else quote[:1]
        for part in node.values:
            if not isinstance(part, ast.FormattedValue):
                continue
            inner = _segment(lines, part.value)
            if "\\" in inner or (len(quote) == 1 and quote in inner):
                found.append(node.lineno)
                break
        if len(found) >= _ENOUGH:
            break
    return found


_ENOUGH = 50   # uses of one feature worth finding


def _segment(lines: list[str], node: ast.AST, limit: int = 0) -> str:
    """The source of ``node`` (at most its first ``limit`` bytes, if
    given); ast's column offsets count UTF-8 bytes."""
    start = node.lineno
    end = node.end_lineno or start
    first = lines[start - 1].encode()
    if start == end:
        text = first[node.col_offset:node.end_col_offset]
    elif limit:
        text = first[node.col_offset:]
    else:
        text = first[node.col_offset:] + \
            "".join(lines[start:end - 1]).encode() + \
            lines[end - 1].encode()[:node.end_col_offset]
    if limit:
        text = text[:limit]
    return text.decode(errors="replace")


_DETECTORS = {"fstring": _fstring_lines}


def _names(nodes: list[ast.AST]) -> list[tuple[int, str]]:
    """(line, "module.name") for every name imported from a module and
    every attribute read of an imported module (aliases resolved)."""
    aliases: dict[str, str] = {}
    found = []
    for node in nodes:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    aliases[alias.asname] = alias.name
                else:
                    top = alias.name.split(".")[0]
                    aliases[top] = top
        elif isinstance(node, ast.ImportFrom) and node.module and \
                not node.level:
            for alias in node.names:
                found.append((node.lineno, f"{node.module}.{alias.name}"))
    for node in nodes:
        if isinstance(node, ast.Attribute):
            parts = []
            value: ast.AST = node
            while isinstance(value, ast.Attribute):
                parts.append(value.attr)
                value = value.value
            if isinstance(value, ast.Name) and value.id in aliases:
                dotted = ".".join([aliases[value.id], *reversed(parts)])
                found.append((node.lineno, dotted))
    return found


def _listed(uses: list[Use]) -> str:
    return "; ".join(f"line {u.line}: {u.what} (Python {_text(u.since)})"
                     for u in uses[:5]) + \
        (f"; and {len(uses) - 5} more" if len(uses) > 5 else "")


def check_warnings(source: str, running: Version | None = None,
                   path: Path | None = None) -> list[str]:
    """``check``'s warning lines for a student whose Python (``running``)
    is newer than the grader's: what the grader's Python lacks, naming
    both versions. None on the grader's version or older."""
    running = running or (sys.version_info[0], sys.version_info[1])
    grader = grader_version(path)
    if running <= grader:
        return []
    uses = newer_uses(source, grader, path=path)
    if not uses:
        return []
    return [f"warning: you run Python {_text(running)}, the grader runs "
            f"Python {_text(grader)}, which lacks what your code uses: "
            f"{_listed(uses)}. There your module would not import (0 "
            f"points): write it for Python {_text(grader)}."]


def grader_note(source: str, running: Version | None = None,
                path: Path | None = None) -> str:
    """For a module that failed to import on the grader: the grader's
    Python (``running``) and the newer features the code uses ("" if
    none)."""
    running = running or (sys.version_info[0], sys.version_info[1])
    uses = newer_uses(source, running, path=path)
    if not uses:
        return ""
    return (f"the grader runs Python {_text(running)}; your code uses what "
            f"only a newer Python has: {_listed(uses)}. Write it for "
            f"Python {_text(running)}.")


__all__ = ["Use", "check_warnings", "grader_note",
           "grader_version", "load_features", "newer_uses"]
