"""Student text as data: render untrusted text inside markdown (and HTML)
so that it shows verbatim and can change nothing around it.

Everything a submission controls (inline answers, printed output,
exception messages and type names, file names inside a zip) reaches
``feedback.md``, ``results.json`` (Gradescope renders its ``output`` as
markdown), the TAs' answer pages and the class report. Quoted raw, a
``</blockquote>`` plus a heading forges another student's answer on a TA
page and ``<script>`` or ``onerror=`` pass through to any renderer that
allows HTML. Each helper here bounds the length, drops control characters
and escapes what markdown or HTML would interpret:

- ``inline``: a phrase inside a sentence (backslash escapes, so every
  CommonMark renderer shows it literally, HTML included);
- ``quote``: a multi-line answer as a blockquote of escaped lines;
- ``code_block``: printed output in a fence longer than any backtick run
  it contains;
- ``code_span``: a short snippet (a line of code) in a code span that its
  own backticks cannot close.
"""
from __future__ import annotations

import re
import unicodedata

INLINE_LIMIT = 2000      # characters of one quoted message or phrase
ANSWER_LIMIT = 6000      # characters of one inline answer
OUTPUT_LIMIT = 2000      # characters of printed output
SPAN_LIMIT = 200         # characters of a code span

# Characters that reorder or hide text (bidirectional overrides, zero-width
# joiners): shown as U+FFFD so an answer cannot visually rewrite the page.
_INVISIBLE = {0x200B, 0x200C, 0x200D, 0x200E, 0x200F, 0x2028, 0x2029,
              0x202A, 0x202B, 0x202C, 0x202D, 0x202E, 0x2060, 0x2066,
              0x2067, 0x2068, 0x2069, 0xFEFF}
# Escaped wherever they occur: they open emphasis, code, links, HTML,
# entities and table cells.
_ALWAYS = set("\\`*[]<>&|~!")
# Escaped at the start of a line (after indentation): headings, quotes,
# lists, thematic breaks, setext underlines, fences.
_LINE_START = set("#>-+=*_~`")
_ORDERED = re.compile(r"^(\s*\d{1,9})([.)])")


def clean(text: object, limit: int) -> str:
    """``text`` as a string of at most ``limit`` characters (plus a note
    of how many were cut), with newlines normalised and every control or
    invisible formatting character except newline replaced (tab by a
    space, the rest by U+FFFD)."""
    text = str(text).replace("\r\n", "\n").replace("\r", "\n")
    cut = len(text) - limit
    if cut > 0:
        text = text[:limit]
    out = []
    for char in text:
        code = ord(char)
        if char == "\n":
            out.append(char)
        elif char == "\t":
            out.append(" ")
        elif code in _INVISIBLE or unicodedata.category(char) in ("Cc",
                                                                  "Cs"):
            out.append("\ufffd")
        else:
            out.append(char)
    text = "".join(out)
    if cut > 0:
        text += f" [... {cut} more characters not shown]"
    return text


def _escape_line(line: str) -> str:
    out = []
    for i, char in enumerate(line):
        if char in _ALWAYS:
            out.append("\\" + char)
        elif char == "_" and not (0 < i < len(line) - 1
                                  and line[i - 1].isalnum()
                                  and line[i + 1].isalnum()):
            # snake_case names stay readable; emphasis cannot open
            out.append("\\_")
        else:
            out.append(char)
    text = "".join(out)
    stripped = text.lstrip(" ")
    indent = len(text) - len(stripped)
    if stripped[:1] in _LINE_START:
        text = text[:indent] + "\\" + stripped
    return _ORDERED.sub(lambda m: m.group(1) + "\\" + m.group(2), text)


def inline(text: object, limit: int = INLINE_LIMIT) -> str:
    """Untrusted text to put inside a markdown sentence or list item: every
    character markdown or HTML would interpret is backslash-escaped, so it
    renders literally; its line breaks stay line breaks."""
    lines = clean(text, limit).split("\n")
    return "\n".join(_escape_line(line) for line in lines)


def quote(text: object, limit: int = ANSWER_LIMIT) -> str:
    """A multi-line answer as a markdown blockquote whose lines are
    escaped: it can neither leave the quote nor format itself."""
    lines = inline(text.strip() if isinstance(text, str) else text,
                   limit).split("\n")
    # Two trailing spaces keep the student's line breaks (hard breaks).
    return "\n".join(f"> {line}  " if line.strip() else ">"
                     for line in lines).rstrip(" ")


def code_block(text: object, limit: int = OUTPUT_LIMIT) -> str:
    """Printed output as a fenced code block: the fence is longer than any
    backtick run inside, so the output cannot close it."""
    body = clean(text, limit).rstrip("\n")
    longest = max((len(run) for run in re.findall(r"`+", body)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n{body}\n{fence}"


def code_span(text: object, limit: int = SPAN_LIMIT) -> str:
    """A short snippet as one code span (line breaks become spaces) that
    its own backticks cannot close."""
    body = clean(text, limit).replace("\n", " ")
    longest = max((len(run) for run in re.findall(r"`+", body)), default=0)
    ticks = "`" * (longest + 1)
    pad = " " if body.startswith("`") or body.endswith("`") or \
        (body.startswith(" ") and body.endswith(" ") and body.strip()) \
        else ""
    return f"{ticks}{pad}{body}{pad}{ticks}"


__all__ = ["ANSWER_LIMIT", "INLINE_LIMIT", "OUTPUT_LIMIT", "SPAN_LIMIT",
           "clean", "code_block", "code_span", "inline", "quote"]
