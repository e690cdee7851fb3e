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
  own backticks cannot close;
- ``html_text``: the same text for an HTML page (``html.escape`` after
  ``clean``).

Invisible characters (Unicode format characters such as U+2062 INVISIBLE
TIMES or U+00AD SOFT HYPHEN, bidirectional controls, the tag block
U+E0000-E007F, Hangul fillers) are shown as a visible ``<U+2062>``, so a TA
sees that something is hidden in an answer; control characters become
U+FFFD. CSV cells: ``autograder/text/csvsafe.py``.
"""
from __future__ import annotations

import html
import re
import unicodedata

INLINE_LIMIT = 2000      # characters of one quoted message or phrase
ANSWER_LIMIT = 6000      # characters of one inline answer
OUTPUT_LIMIT = 2000      # characters of printed output
SPAN_LIMIT = 200         # characters of a code span

# Characters that reorder or hide text but are not of category Cf
# (line/paragraph separators, fillers that render blank, the Braille blank,
# variation selectors): shown named, as every Cf character is, so an answer
# can neither visually rewrite the page nor hide words from the TA.
_INVISIBLE = {0x2028, 0x2029, 0x115F, 0x1160, 0x3164, 0xFFA0, 0x2800,
              0x180E, 0x034F, *range(0xFE00, 0xFE10),
              *range(0xE0100, 0xE01F0)}
# Escaped wherever they occur: they open emphasis, code, links, HTML,
# entities and table cells.
_ALWAYS = set("\\`*[]<>&|~!")
# Escaped at the start of a line (after indentation): headings, quotes,
# lists, thematic breaks, setext underlines, fences.
_LINE_START = set("#>-+=*_~`")
_ORDERED = re.compile(r"^(\s*\d{1,9})([.)])")


def invisible(char: str) -> bool:
    """Whether ``char`` renders as nothing (or reorders text) yet is no
    control character: Unicode category Cf (bidi controls, zero-width
    characters, U+00AD, U+2061-2064, the tag block), separators and
    fillers."""
    code = ord(char)
    return code in _INVISIBLE or unicodedata.category(char) == "Cf"


def visible(char: str) -> str:
    """An invisible character written out: ``<U+2062>``."""
    return f"<U+{ord(char):04X}>"


def clean(text: object, limit: int) -> str:
    """``text`` as a string of at most ``limit`` characters (plus a note
    of how many were cut), with newlines normalised, tab as a space,
    control characters as U+FFFD and invisible characters written out
    visibly (``<U+2062>``, see :func:`invisible`)."""
    text = str(text).replace("\r\n", "\n").replace("\r", "\n")
    cut = len(text) - limit
    if cut > 0:
        text = text[:limit]
    out = []
    for char in text:
        if char == "\n":
            out.append(char)
        elif char == "\t":
            out.append(" ")
        elif invisible(char):
            out.append(visible(char))
        elif unicodedata.category(char) in ("Cc", "Cs"):
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


def html_text(text: object, limit: int = INLINE_LIMIT) -> str:
    """Untrusted text for an HTML page (element text or a quoted attribute
    value): bounded, invisible characters shown, ``<>&'"`` escaped."""
    return html.escape(clean(text, limit), quote=True)


__all__ = ["ANSWER_LIMIT", "INLINE_LIMIT", "OUTPUT_LIMIT", "SPAN_LIMIT",
           "clean", "code_block", "code_span", "html_text", "inline",
           "invisible", "quote", "visible"]
