"""Near-copies of a submission, as students disguise them: local names
renamed, comments reworded, independent statements reordered. The
similarity tests and measurements use them (kit_tests/test_similarity.py).
"""
from __future__ import annotations

import io
import re
import tokenize

RENAMES = {"q": "query", "k": "key", "v": "value", "scores": "logits",
           "probs": "weights", "att": "result", "bs": "nb", "seq": "length",
           "x": "inp", "mask": "hide", "future": "ahead", "split": "dims",
           "w": "wts", "out": "res", "attn": "alpha"}


def rename(source: str) -> str:
    """Local names renamed (attributes and keywords untouched)."""
    out, prev = [], None
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.NAME and tok.string in RENAMES and \
                not (prev is not None and prev.string == "."):
            tok = tok._replace(string=RENAMES[tok.string])
        out.append(tok)
        if tok.type not in (tokenize.NL, tokenize.COMMENT):
            prev = tok
    return tokenize.untokenize(out)


def recomment(source: str) -> str:
    """Every comment's words changed (markers kept)."""
    def sub(match):
        text = match.group(0)
        if "YOUR CODE" in text or "Task" in text:
            return text
        return "# " + " ".join(reversed(text.lstrip("# ").split()))
    return re.sub(r"#[^\n]*", sub, source)


_ASSIGN = re.compile(r"^(\s*)(\w+) = (.+)$")


def reorder(source: str) -> str:
    """Swap each pair of adjacent independent assignments once."""
    lines = source.splitlines()
    i = 0
    while i < len(lines) - 1:
        a, b = _ASSIGN.match(lines[i]), _ASSIGN.match(lines[i + 1])
        if a and b and a.group(1) == b.group(1) and \
                not re.search(rf"\b{a.group(2)}\b", b.group(3)) and \
                not re.search(rf"\b{b.group(2)}\b", a.group(3)) and \
                a.group(2) != b.group(2):
            lines[i], lines[i + 1] = lines[i + 1], lines[i]
            i += 2
        else:
            i += 1
    return "\n".join(lines) + "\n"


def parenthesise(source: str) -> str:
    """Every name read or bound inside a function wrapped in parentheses
    (``(q) = (self).q((x))``): the same code, other characters."""
    import ast
    tree = ast.parse(source)
    spots = set()
    for func in ast.walk(tree):
        if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        skip = {id(n) for s in ast.walk(func) if isinstance(s, ast.JoinedStr)
                for n in ast.walk(s)}
        spots |= {(n.lineno, n.col_offset, n.end_col_offset)
                  for n in ast.walk(func)
                  if isinstance(n, ast.Name) and id(n) not in skip
                  and n.lineno == n.end_lineno}
    lines = source.splitlines(keepends=True)
    for line, start, end in sorted(spots, reverse=True):
        # ast's columns are UTF-8 byte offsets.
        raw = lines[line - 1].encode()
        lines[line - 1] = (raw[:start] + b"(" + raw[start:end] + b")"
                           + raw[end:]).decode()
    return "".join(lines)


def above_markers(source: str) -> str:
    """Every TODO region's code moved above its START marker, the markers
    left around nothing: the same code, graded as the task's (code above
    the markers is), outside every marked region."""
    lines = source.splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        if lines[i].strip() == "# YOUR CODE STARTS HERE":
            end = next(j for j in range(i + 1, len(lines))
                       if lines[j].strip() == "# YOUR CODE ENDS HERE")
            out += lines[i + 1:end] + [lines[i], lines[end]]
            i = end + 1
        else:
            out.append(lines[i])
            i += 1
    return "\n".join(out) + "\n"
