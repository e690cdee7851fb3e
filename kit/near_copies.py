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
