"""Similarity of what students wrote, ranked against the class's own
distribution: a lead for a human, never a verdict.

Code: the TODO regions of each graded ``source.py`` (kept by ``grade``),
without the skeleton's given lines and comments, each region parsed and
unparsed (``ast``: redundant parentheses, line breaks, spacing and quotes
as Python writes them; a region that does not parse alone is kept as
written), then as tokens with local names replaced by one placeholder
(attribute and method names, i.e. the API a student chose, are kept; one
placeholder rather than names numbered in order of first appearance, so
that reordered statements keep their k-grams); fingerprinted by
winnowing hashed token k-grams, as MOSS does (Schleimer, Wilkerson and
Aiken, SIGMOD 2003); the skeleton's own fingerprints are boilerplate.
Written here rather than taken from copydetect: its import costs the
grading run more than a second (matplotlib), and its k-gram hashes use
Python's per-process ``hash()``, so its ranking changes from run to run.
Inline answers: word 3-gram shingles (NFKC, lowercased, punctuation
dropped), Jaccard per question, averaged over the questions both
answered. Both lose format characters first (Unicode category Cf: an
invisible U+2063 or U+200B inside every word must not hide a copy).

Correct solutions of a short homework converge, so a raw score means
little: each pair is placed against every other pair of the same batch
(robust z: distance from the median in units of the scaled median
absolute deviation, and its percentile). ``python -m autograder
similarity OUT`` prints the ranking and writes side-by-side pages under
``OUT/similarity/``; the class report has the same section.
"""
from __future__ import annotations

import ast
import hashlib
import json
import keyword
import re
import statistics
import textwrap
import time
import unicodedata
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path
from typing import Any

from autograder import homework
from autograder.report import atomic, layout
from autograder.submission.user_files import read_regular, read_regular_text
from autograder.text import mdsafe
from autograder.submission.regions import (END_MARKER, START_MARKER,
                                           find_regions)

SKELETON = homework.current().module
KGRAM = 6                        # tokens per fingerprinted k-gram
WINDOW = 4                       # winnowing window (k-grams)
SHINGLE = 3                      # words per answer shingle
MIN_WORDS = 6                    # shorter answers are not compared
TOP = 15                         # pairs shown
LEAD_Z = 2.0                     # robust z from which a pair is a lead
# Bounds of the step's own time and memory (a source with a
# 100,000-character expression once raised MemoryError in the parser and
# took the class report with it). A source over a cap is left out, with
# a note; pairs stop at the time budget, with a note.
MAX_SOURCE_CHARS = 200_000       # of a kept source.py
MAX_TOKENS = 20_000              # of a submission's compared code
MAX_ANSWER_CHARS = 50_000        # of one inline answer
TIME_BUDGET = 60.0               # seconds for all pairs of a batch
DISCLAIMER = ("Similarity is a lead for a human, not a verdict: correct "
              "solutions of a short homework look alike, and students may "
              "share a study group's understanding. Read the side-by-side "
              "view, and the submissions, before concluding anything.")


@dataclass
class Pair:
    """Two submissions and how alike they are."""

    a: str
    b: str
    score: float              # 0..1
    z: float = 0.0            # robust z against every pair of the batch
    percentile: float = 0.0   # share of the batch's pairs scoring lower
    detail: Any = None        # shared character spans (code) or per
    #                           question scores (answers)


# --------------------------------------------------------------------------
# What a student wrote

def _html(text: object) -> str:
    """Untrusted text (code, submission names, notes) for the HTML pages,
    through the one seam (``mdsafe.html_text``): escaped, and invisible
    characters written out visibly; never cut (code spans are offsets)."""
    text = str(text)
    return mdsafe.html_text(text, limit=max(len(text), 1))


def _region_texts(source: str) -> list[list[str]] | None:
    """The lines of each TODO region of ``source`` (None if it has none
    or does not parse)."""
    lines = source.splitlines()
    try:
        regions = find_regions(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        # (CPython's parser reports a deeply nested expression as a
        # MemoryError or RecursionError: the source's, not the grader's)
        return None
    return [[lines[i] for i in range(r.start - 1, min(r.end, len(lines)))]
            for r in regions] or None


def _given_lines(skeleton: str) -> set[str]:
    return {line.strip() for block in _region_texts(skeleton) or []
            for line in block}


def _given_statements(skeleton: str) -> set[str]:
    """The skeleton's given statements in its regions, unparsed."""
    found = set()
    for block in _region_texts(skeleton) or []:
        tree = _parsed(block)
        if tree is not None:
            found |= {ast.unparse(stmt) for stmt in tree.body}
    return found


def _parsed(block: list[str]) -> ast.Module | None:
    """A region's lines parsed alone (comment lines dropped, dedented), or
    None when they do not parse alone (a partial statement) or are too
    deep for the parser."""
    code = "\n".join(line for line in block
                     if not line.lstrip().startswith("#")) + "\n"
    try:
        return ast.parse(textwrap.dedent(code))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def visible(text: str) -> str:
    """``text`` without format characters (Unicode category Cf: zero-width
    spaces and joiners, invisible separators, direction marks), which
    change the characters of a copy but not what a reader sees."""
    return "".join(c for c in text if unicodedata.category(c) != "Cf")


def normalised(code: str, given: frozenset[str] = frozenset()
               ) -> str | None:
    """One region's code as Python reads it: parsed and unparsed, so that
    redundant parentheses (``(q) @ (k)``), line breaks inside brackets,
    spacing, comments and quote style are gone, without the statements
    ``given`` (the skeleton's, unparsed); None when it does not parse
    alone (a partial statement) or is too deep for the parser."""
    tree = _parsed(code.splitlines())
    if tree is None:
        return None
    tree.body = [s for s in tree.body if ast.unparse(s) not in given]
    try:
        return ast.unparse(tree) + "\n" if tree.body else ""
    except (ValueError, RecursionError, MemoryError):
        return None


def student_code(source: str, skeleton: str) -> str:
    """The code of ``source``'s TODO regions, format characters removed,
    each region ``normalised`` without the skeleton's given statements;
    a region that does not parse alone, or a source without readable
    regions (markers removed, a syntax error), as its lines that are not
    blank, comments, markers or the skeleton's given lines."""
    source = visible(source)
    blocks = _region_texts(source)
    given = _given_lines(skeleton)
    if blocks is None:
        given |= {line.strip() for line in skeleton.splitlines()}
    statements = frozenset(_given_statements(skeleton))
    out = []
    for block in blocks or [source.splitlines()]:
        text = normalised("\n".join(block), statements) if blocks else None
        if text is None:
            kept = [line for line in block if _own(line, given)]
            text = "\n".join(kept) + "\n" if kept else ""
        out.append(text)
    return "".join(out)


def _own(line: str, given: set[str]) -> bool:
    """Whether ``line`` is the student's code: not blank, a comment, a
    marker or a line the skeleton gives."""
    text = line.strip()
    return bool(text) and not text.startswith("#") and \
        text not in given and text not in (START_MARKER, END_MARKER)


_TOKEN = re.compile(r"""[A-Za-z_]\w*|\d[\w.]*|"(?:[^"\\\n]|\\.)*"|"""
                    r"""'(?:[^'\\\n]|\\.)*'|#[^\n]*|\S""")


def tokens(code: str) -> list[tuple[str, int, int]]:
    """(normalised token, start, end) of ``code``: comments dropped,
    local names and string literals replaced by placeholders; keywords,
    operators, numbers and attribute names kept."""
    out: list[tuple[str, int, int]] = []
    for match in _TOKEN.finditer(code):
        text = match.group(0)
        if text.startswith("#"):
            continue
        if text[0] in "\"'":
            text = "S"
        elif (text[0].isalpha() or text[0] == "_") and \
                not keyword.iskeyword(text) and \
                not (out and out[-1][0] == "."):
            text = "V"
        out.append((text, match.start(), match.end()))
    return out


def _kgram_hashes(toks: list[tuple[str, int, int]]) -> list[int]:
    return [int.from_bytes(hashlib.blake2b(
        "\x00".join(t for t, _, _ in toks[i:i + KGRAM]).encode(),
        digest_size=8).digest(), "big")
        for i in range(len(toks) - KGRAM + 1)]


def fingerprints(code: str) -> set[int]:
    """The winnowed fingerprints of ``code``: the smallest hash of every
    window of WINDOW consecutive k-grams (rightmost on ties)."""
    hashes = _kgram_hashes(tokens(code))
    if len(hashes) <= WINDOW:
        return set(hashes)
    chosen = set()
    for i in range(len(hashes) - WINDOW + 1):
        window = hashes[i:i + WINDOW]
        low = min(window)
        chosen.add(low)
    return chosen


def shared_spans(code: str, other: set[int]) -> list[tuple[int, int]]:
    """Character spans of ``code`` covered by a k-gram whose hash is in
    ``other`` (every k-gram hash of the other submission)."""
    toks = tokens(code)
    spans: list[tuple[int, int]] = []
    for i, value in enumerate(_kgram_hashes(toks)):
        if value not in other:
            continue
        start, end = toks[i][1], toks[i + KGRAM - 1][2]
        if spans and start <= spans[-1][1]:
            spans[-1] = (spans[-1][0], max(end, spans[-1][1]))
        else:
            spans.append((start, end))
    return spans


def code_pairs(codes: dict[str, str], skeleton: str,
               notes: list[str] | None = None,
               budget: float = TIME_BUDGET) -> list[Pair]:
    """Every pair of submissions with code of their own, scored by the
    share of winnowed fingerprints they have in common (the mean over both
    sides, as MOSS reports it); the top pairs carry the character spans
    both share, for the side-by-side view. Code of more than MAX_TOKENS
    tokens is left out, and pairs stop after ``budget`` seconds; both
    are said in ``notes``."""
    notes = notes if notes is not None else []
    deadline = time.monotonic() + budget
    boilerplate = set(_kgram_hashes(tokens(skeleton)))
    prints = {}
    for name, code in codes.items():
        toks = tokens(code)
        if len(toks) > MAX_TOKENS:
            notes.append(f"{name}: not compared ({len(toks)} tokens of "
                         f"code; the limit is {MAX_TOKENS})")
            continue
        found = fingerprints(code) - boilerplate
        if found:
            prints[name] = found
    pairs = []
    total = len(prints) * (len(prints) - 1) // 2
    for a, b in combinations(sorted(prints), 2):
        if time.monotonic() > deadline:
            notes.append(f"code: stopped after {len(pairs)} of {total} "
                         f"pairs (time budget of {budget:g} s)")
            break
        shared = len(prints[a] & prints[b])
        score = (shared / len(prints[a]) + shared / len(prints[b])) / 2
        pairs.append(Pair(a, b, score))
    ranked = rank(pairs)
    for pair in ranked[:TOP]:   # spans only where a person will look
        every = {n: set(_kgram_hashes(tokens(codes[n]))) - boilerplate
                 for n in (pair.a, pair.b)}
        pair.detail = (shared_spans(codes[pair.a], every[pair.b]),
                       shared_spans(codes[pair.b], every[pair.a]))
    return ranked


def _shingles(text: str) -> set[tuple[str, ...]]:
    text = unicodedata.normalize("NFKC", visible(text))
    words = re.findall(r"[a-z0-9]+", text.lower())
    if len(words) < MIN_WORDS:
        return set()
    return {tuple(words[i:i + SHINGLE])
            for i in range(len(words) - SHINGLE + 1)}


def answer_pairs(answers: dict[str, dict[str, str]],
                 notes: list[str] | None = None,
                 budget: float = TIME_BUDGET) -> list[Pair]:
    """Every pair of submissions that answered a common question, scored
    by the mean Jaccard similarity of their answers' word shingles (each
    answer's first MAX_ANSWER_CHARS characters; pairs stop after
    ``budget`` seconds, said in ``notes``)."""
    notes = notes if notes is not None else []
    deadline = time.monotonic() + budget
    shingled = {name: {q: _shingles(t[:MAX_ANSWER_CHARS])
                       for q, t in found.items()}
                for name, found in answers.items()}
    pairs = []
    total = len(shingled) * (len(shingled) - 1) // 2
    for a, b in combinations(sorted(shingled), 2):
        if time.monotonic() > deadline:
            notes.append(f"answers: stopped after {len(pairs)} of {total} "
                         f"pairs (time budget of {budget:g} s)")
            break
        per = {}
        for question, left in shingled[a].items():
            right = shingled[b].get(question, set())
            if left and right:
                per[question] = len(left & right) / len(left | right)
        if per:
            pairs.append(Pair(a, b, sum(per.values()) / len(per),
                              detail=per))
    return rank(pairs)


def rank(pairs: list[Pair]) -> list[Pair]:
    """Sort by score and place each pair against the batch: robust z
    (median, 1.4826 x median absolute deviation) and percentile."""
    if not pairs:
        return []
    scores = sorted(p.score for p in pairs)
    median = statistics.median(scores)
    mad = statistics.median(abs(s - median) for s in scores) * 1.4826
    scale = max(mad, 0.02)   # a batch of near-identical scores: no z blowup
    for pair in pairs:
        pair.z = (pair.score - median) / scale
        lower = sum(s < pair.score for s in scores)
        pair.percentile = 100.0 * lower / len(scores)
    return sorted(pairs, key=lambda p: (-p.score, p.a, p.b))


# --------------------------------------------------------------------------
# A graded folder

def read_folder(out: Path | str, notes: list[str] | None = None
                ) -> tuple[dict[str, str], dict[str, dict]]:
    """Sources (``source.py``) and answers (``answers.json``) kept by
    ``grade`` in each submission's folder; a source of more than
    MAX_SOURCE_CHARS characters is left out, said in ``notes``."""
    notes = notes if notes is not None else []
    sources, answers = {}, {}
    for name, folder in layout.submission_dirs(out).items():
        source = folder / "source.py"
        if source.is_file():
            size = source.stat().st_size
            if size > MAX_SOURCE_CHARS * 4:   # UTF-8: up to 4 bytes each
                notes.append(f"{name}: not compared (source of {size} "
                             f"bytes)")
                continue
            try:
                text = read_regular_text(source, errors="replace")
            except OSError:
                notes.append(f"{name}: not compared (source.py is not "
                             f"a readable file)")
                continue
            if len(text) > MAX_SOURCE_CHARS:
                notes.append(f"{name}: not compared (source of "
                             f"{len(text)} characters; the limit is "
                             f"{MAX_SOURCE_CHARS})")
                continue
            sources[name] = text
        found = folder / "answers.json"
        if found.is_file():
            try:
                data = json.loads(read_regular(found))
            except (OSError, ValueError):
                continue
            if isinstance(data, dict):
                answers[name] = {str(k): str(v)
                                 for k, v in data.items()}
    return sources, answers


def analyse(out: Path | str, skeleton: Path = SKELETON,
            notes: list[str] | None = None
            ) -> tuple[list[Pair], list[Pair], dict[str, str]]:
    """Code pairs, answer pairs and each submission's compared code; what
    was left out (caps, time budget) is said in ``notes``."""
    notes = notes if notes is not None else []
    sources, answers = read_folder(out, notes)
    skeleton_text = skeleton.read_text() if skeleton.is_file() else ""
    codes = {n: student_code(s, skeleton_text) for n, s in sources.items()}
    return (code_pairs(codes, skeleton_text, notes),
            answer_pairs(answers, notes), codes)


def _marked(code: str, spans: list[tuple[int, int]]) -> str:
    """``code`` as HTML with the shared spans highlighted."""
    out, at = [], 0
    for start, end in spans:
        start = max(start, at)
        if end <= start:
            continue
        out += [_html(code[at:start]), "<mark>",
                _html(code[start:end]), "</mark>"]
        at = end
    out.append(_html(code[at:]))
    return "".join(out)


def write_side_by_side(out: Path, pairs: list[Pair],
                       codes: dict[str, str]) -> dict[tuple[str, str], str]:
    """``OUT/similarity/pair-N.html`` for the top pairs; returns their
    paths relative to OUT."""
    folder = out / "similarity"
    folder.mkdir(exist_ok=True)
    links = {}
    for i, pair in enumerate(pairs[:TOP], 1):
        left, right = pair.detail
        page = (
            "<!DOCTYPE html><html><head><meta charset='utf-8'><title>"
            f"{_html(pair.a)} / {_html(pair.b)}</title><style>"
            "body{font-family:system-ui,sans-serif;margin:1em}"
            ".cols{display:flex;gap:1em}.cols div{flex:1;min-width:0}"
            "pre{background:#f6f6f6;padding:.5em;overflow:auto}"
            "mark{background:#ffd76e}</style></head><body>"
            "<p><a href='../report.html#similarity'>&larr; class report"
            f"</a></p><h1>{_html(pair.a)} and {_html(pair.b)}"
            f"</h1><p>score {pair.score:.2f}, robust z {pair.z:.1f}, above "
            f"{pair.percentile:.0f}% of this batch's pairs. Highlighted: "
            f"code both share (shown as compared: each region parsed and "
            f"unparsed, comments dropped; names and whitespace are "
            f"normalised)."
            f"</p><p><em>{_html(DISCLAIMER)}</em></p><div class='cols'>"
            f"<div><h2>{_html(pair.a)}</h2><pre>"
            f"{_marked(codes[pair.a], left)}</pre></div><div><h2>"
            f"{_html(pair.b)}</h2><pre>{_marked(codes[pair.b], right)}"
            f"</pre></div></div></body></html>\n")
        path = folder / f"pair-{i}.html"
        atomic.write_text(path, page)
        links[(pair.a, pair.b)] = f"similarity/{path.name}"
    return links


def _rows(pairs: list[Pair], links: dict, report_links: dict[str, str]
          ) -> str:
    def name(n: str) -> str:
        target = report_links.get(f"feedback:{n}")
        return (f"<a href='{_html(target)}'>{_html(n)}</a>"
                if target else _html(n))
    rows = []
    for pair in pairs[:TOP]:
        view = links.get((pair.a, pair.b))
        lead = " class='lead'" if pair.z >= LEAD_Z else ""
        rows.append(
            f"<tr{lead}><td>{name(pair.a)}</td><td>{name(pair.b)}</td>"
            f"<td class='num'>{pair.score:.2f}</td><td class='num'>"
            f"{pair.z:.1f}</td><td class='num'>{pair.percentile:.0f}%</td>"
            + (f"<td><a href='{_html(view)}'>side by side</a></td>"
               if view else "<td></td>") + "</tr>")
    return ("<table class='small'><thead><tr><th>submission</th>"
            "<th>submission</th><th>score</th><th>robust z</th>"
            "<th>percentile</th><th></th></tr></thead><tbody>"
            + "".join(rows) + "</tbody></table>")


def report_section(out: Path | str, report_links: dict[str, str],
                   skeleton: Path = SKELETON) -> str:
    """The class report's similarity section (writes the side-by-side
    pages it links)."""
    out = Path(out)
    head = "<section id='similarity'><h2>Similarity</h2>"
    notes: list[str] = []
    code, answers, codes = analyse(out, skeleton, notes)
    links = write_side_by_side(out, code, codes)
    leads = sum(p.z >= LEAD_Z for p in code)
    parts = [head, f"<p><strong>{_html(DISCLAIMER)}</strong></p>",
             f"<p>Code of the TODO regions (skeleton lines, comments, names "
             f"and whitespace normalised away): {len(code)} pairs; "
             f"{leads} at a robust z of {LEAD_Z:g} or more (highlighted)."
             f"</p>"]
    parts.append(_rows(code, links, report_links) if code else
                 "<p>No two submissions with code of their own.</p>")
    parts.append(f"<h3>Inline answers</h3><p>{len(answers)} pairs "
                 f"(word {SHINGLE}-grams, questions both answered).</p>")
    parts.append(_rows(answers, {}, report_links) if answers else
                 "<p>No two submissions answered a common question.</p>")
    if notes:
        parts.append("<h3>Left out</h3><ul>" + "".join(
            f"<li>{_html(n)}</li>" for n in notes) + "</ul>")
    parts.append("</section>")
    return "".join(parts)


def summary(out: Path | str, skeleton: Path = SKELETON) -> str:
    """The terminal ranking of ``python -m autograder similarity OUT``."""
    out = Path(out)
    notes: list[str] = []
    code, answers, codes = analyse(out, skeleton, notes)
    links = write_side_by_side(out, code, codes)
    lines = [DISCLAIMER, ""]
    for title, pairs in (("code (TODO regions)", code),
                         ("inline answers", answers)):
        lines.append(f"{title}: {len(pairs)} pairs")
        for pair in pairs[:TOP]:
            view = links.get((pair.a, pair.b), "") if pairs is code else ""
            lines.append(f"  {pair.score:5.2f}  z {pair.z:5.1f}  "
                         f"{pair.a} ~ {pair.b}  {view}".rstrip())
        lines.append("")
    lines += [f"left out: {note}" for note in notes]
    return "\n".join(lines)


__all__ = ["DISCLAIMER", "Pair", "analyse", "answer_pairs", "code_pairs",
           "fingerprints", "rank", "read_folder", "report_section",
           "shared_spans", "student_code", "summary", "tokens",
           "write_side_by_side"]
