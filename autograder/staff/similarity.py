"""Similarity of what students wrote, ranked against the class's own
distribution: a lead for a human, never a verdict.

Code: the code of each graded ``source.py`` (kept by ``grade``) that the
grader grades, as it reads it (``regions.graded_regions`` with the
rubric's task methods: the TODO regions, a task method's lines outside
its markers, a whole method whose markers are gone, the helpers its code
calls), without the skeleton's given lines and comments, each region parsed and
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
absolute deviation, and its percentile). A distribution can hide a copy (a
class of near-copies of one another has a high median), so identical or
near-identical work is flagged whatever the z: code from CODE_FLOOR with at
least CODE_FLOOR_PRINTS fingerprints shared, an answer from ANSWER_FLOOR
with at least ANSWER_FLOOR_SHINGLES shingles shared (each question alone,
so one copied answer among honest ones is not averaged away). Earlier
editions' graded folders (``--archive``: a folder or a zip of one) are
compared with this batch from their kept ``source.py`` and
``answers.json``, never regraded. ``python -m autograder
similarity OUT`` prints the ranking and writes side-by-side pages under
``OUT/similarity/``; the class report has the same section.
"""
from __future__ import annotations

import ast
import functools
import hashlib
import json
import keyword
import os
import re
import stat
import statistics
import textwrap
import time
import unicodedata
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path
from typing import Any

from autograder import homework
from autograder.files import atomic
from autograder.report import layout
from autograder.files.user_files import open_regular
from autograder.text import mdsafe
from autograder.submission.regions import (END_MARKER, START_MARKER,
                                           graded_regions, python_lines)

KGRAM = 6                        # tokens per fingerprinted k-gram
WINDOW = 4                       # winnowing window (k-grams)
SHINGLE = 3                      # words per answer shingle
MIN_WORDS = 6                    # shorter answers are not compared
TOP = 15                         # pairs shown
LEAD_Z = 2.0                     # robust z from which a pair is a lead
# Absolute floors: flagged whatever the batch's distribution. Disguised
# copies (names, comments, order changed) score 0.93-1.00 and independent
# correct solutions at most 0.61 (kit_tests/test_similarity.py prints
# both); the minimum shared keeps two one-line answers of one task apart.
CODE_FLOOR = 0.9                 # share of fingerprints in common
CODE_FLOOR_PRINTS = 12           # fingerprints both share, at least
ANSWER_FLOOR = 0.7               # Jaccard of one question's shingles
ANSWER_FLOOR_SHINGLES = 8        # shingles both share, at least
# Bounds of the step's own time and memory (a source with a
# 100,000-character expression once raised MemoryError in the parser and
# took the class report with it). A source over a cap is left out, with
# a note; pairs stop at the time budget, with a note.
MAX_SOURCE_CHARS = 200_000       # of a kept source.py
MAX_TOKENS = 20_000              # of a submission's compared code
MAX_ANSWER_CHARS = 50_000        # of one inline answer
TIME_BUDGET = 60.0               # seconds for all pairs of a batch
MAX_ANSWERS_BYTES = 4 * 10 * MAX_ANSWER_CHARS   # of a kept answers.json
MAX_ARCHIVE_ENTRIES = 200_000    # of a zipped earlier edition
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
    floor: str = ""           # why the pair is flagged whatever its z
    #                           ("identical code", "Q2 near-identical")

    @property
    def flagged(self) -> bool:
        """Whether a person should look: a lead by the batch's
        distribution, or over an absolute floor."""
        return bool(self.floor) or self.z >= LEAD_Z

    @property
    def why(self) -> str:
        """Why the pair is flagged ("" if it is not)."""
        reasons = [self.floor] if self.floor else []
        if self.z >= LEAD_Z:
            reasons.append(f"robust z {self.z:.1f}")
        return "; ".join(reasons)


# --------------------------------------------------------------------------
# What a student wrote

def _html(text: object) -> str:
    """Untrusted text (code, submission names, notes) for the HTML pages,
    through the one seam (``mdsafe.html_text``): escaped, and invisible
    characters written out visibly; never cut (code spans are offsets)."""
    text = str(text)
    return mdsafe.html_text(text, limit=max(len(text), 1))


@functools.lru_cache(maxsize=1)
def task_methods() -> dict[str, tuple[str, ...]]:
    """Class ("" for a module-level function) -> the methods whose code
    the student writes, from the rubric (``GradingConfig.task_methods``):
    the code the grader grades is the code compared."""
    from autograder.rubric import load_rubric
    return {task.cls: task.methods for task in load_rubric().tasks}


Methods = Mapping[str, tuple[str, ...]]


def _region_texts(source: str, methods: Methods | None = None
                  ) -> list[list[str]] | None:
    """The lines of each region of ``source`` the grader grades (its TODO
    regions, a task method's lines outside them, a task method without
    markers, the helpers they call), in file order; None if it has none
    or does not parse."""
    lines = python_lines(source)
    try:
        regions = graded_regions(source, methods=task_methods()
                                 if methods is None else methods)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        # (CPython's parser reports a deeply nested expression as a
        # MemoryError or RecursionError: the source's, not the grader's)
        return None
    spans = sorted({(r.start, r.end) for r in regions})
    return [lines[start - 1:min(end, len(lines))]
            for start, end in spans] or None


def _given_lines(skeleton: str, methods: Methods | None = None) -> set[str]:
    return {shape(line_normalised(line))
            for block in _region_texts(skeleton, methods) or []
            for line in block}


def line_normalised(line: str) -> str:
    """One line of a region that does not parse as a whole (a block's
    header, ``if (self).causal:``, above its markers), as Python reads
    it where it parses alone or as a header; else stripped."""
    text = line.strip()
    for attempt in (text, text + " pass"):
        try:
            tree = ast.parse(attempt)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        try:
            return ast.unparse(tree).splitlines()[0] if tree.body else text
        except (ValueError, RecursionError, MemoryError):
            break
    return text


def _given_statements(skeleton: str, methods: Methods | None = None
                      ) -> set[str]:
    """The skeleton's given statements in its graded regions, unparsed."""
    found = set()
    for block in _region_texts(skeleton, methods) or []:
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
    ``given`` (the skeleton's, unparsed; compared by ``shape``, so
    with local names renamed too); None when it does not parse
    alone (a partial statement) or is too deep for the parser."""
    tree = _parsed(code.splitlines())
    if tree is None:
        return None
    # Given statements by their shape, so a copy's renamed names do not
    # make the skeleton's own lines its evidence.
    shapes = {shape(g) for g in given}
    tree.body = [s for s in tree.body if shape(ast.unparse(s)) not in shapes]
    try:
        return ast.unparse(tree) + "\n" if tree.body else ""
    except (ValueError, RecursionError, MemoryError):
        return None


def student_code(source: str, skeleton: str,
                 methods: Methods | None = None) -> str:
    """The code of ``source`` the grader grades (``_region_texts``:
    ``methods``, default the rubric's task methods), format characters
    removed, each region ``normalised`` without the skeleton's given
    statements; a region that does not parse alone, or a source without
    readable regions (a syntax error, no task method), as its lines that
    are not blank, comments, markers or the skeleton's given lines."""
    source = visible(source)
    blocks = _region_texts(source, methods)
    given = _given_lines(skeleton, methods)
    if blocks is None:
        given |= {shape(line) for line in skeleton.splitlines()}
    statements = frozenset(_given_statements(skeleton, methods))
    out = []
    for block in blocks or [python_lines(source)]:
        text = normalised("\n".join(block), statements) if blocks else None
        if text is None:
            kept = [line_normalised(line) for line in block
                    if _own(line, given)]
            text = "\n".join(kept) + "\n" if kept else ""
        out.append(text)
    return "".join(out)


def _own(line: str, given: set[str]) -> bool:
    """Whether ``line`` is the student's code: not blank, a comment, a
    marker or a line the skeleton gives."""
    text = line.strip()
    return bool(text) and not text.startswith("#") and \
        shape(line_normalised(text)) not in given and \
        text not in (START_MARKER, END_MARKER)


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


def shape(code: str) -> str:
    """``code`` as its ``tokens``: two statements of one shape differ only
    in local names, strings, comments or spacing."""
    return " ".join(t for t, _, _ in tokens(code))


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
               budget: float = TIME_BUDGET,
               archived: frozenset[str] = frozenset()) -> list[Pair]:
    """Every pair of submissions with code of their own, scored by the
    share of winnowed fingerprints they have in common (the mean over both
    sides, as MOSS reports it); a pair over the absolute floor (CODE_FLOOR,
    CODE_FLOOR_PRINTS) is flagged whatever its z. The top and flagged
    pairs carry the character spans both share, for the side-by-side
    view. Two ``archived`` submissions (an earlier edition's) are not
    compared with each other. Code of more than MAX_TOKENS tokens is left
    out, and pairs stop after ``budget`` seconds; both are said in
    ``notes``."""
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
    total = sum(1 for a, b in combinations(prints, 2)
                if a not in archived or b not in archived)
    for a, b in combinations(sorted(prints), 2):
        if a in archived and b in archived:
            continue
        if time.monotonic() > deadline:
            notes.append(f"code: stopped after {len(pairs)} of {total} "
                         f"pairs (time budget of {budget:g} s)")
            break
        shared = len(prints[a] & prints[b])
        score = (shared / len(prints[a]) + shared / len(prints[b])) / 2
        pair = Pair(a, b, score)
        if score >= CODE_FLOOR and shared >= CODE_FLOOR_PRINTS:
            # Names and string literals are normalised away: "identical"
            # says so, or a TA reads two files as byte-equal.
            pair.floor = ("identical code" if score == 1.0 else
                          "near-identical code") + f" ({shared} " \
                f"fingerprints shared; names and strings aside)"
        pairs.append(pair)
    ranked = rank(pairs)
    for pair in shown(ranked):   # spans only where a person will look
        every = {n: set(_kgram_hashes(tokens(codes[n]))) - boilerplate
                 for n in (pair.a, pair.b)}
        pair.detail = (shared_spans(codes[pair.a], every[pair.b]),
                       shared_spans(codes[pair.b], every[pair.a]))
    return ranked


def shown(pairs: list[Pair]) -> list[Pair]:
    """The pairs a person is shown: the TOP first, then every pair over
    an absolute floor (never cut off the list; leads by z alone beyond
    the TOP are counted, not listed: where most answers share nothing,
    any shared phrase stands out)."""
    return pairs[:TOP] + [p for p in pairs[TOP:] if p.floor]


def _shingles(text: str) -> set[tuple[str, ...]]:
    text = unicodedata.normalize("NFKC", visible(text))
    words = re.findall(r"[a-z0-9]+", text.lower())
    if len(words) < MIN_WORDS:
        return set()
    return {tuple(words[i:i + SHINGLE])
            for i in range(len(words) - SHINGLE + 1)}


def answer_pairs(answers: dict[str, dict[str, str]],
                 notes: list[str] | None = None,
                 budget: float = TIME_BUDGET,
                 archived: frozenset[str] = frozenset()) -> list[Pair]:
    """Every pair of submissions that answered a common question, scored
    by the mean Jaccard similarity of their answers' word shingles (each
    answer's first MAX_ANSWER_CHARS characters); a pair with one question
    over the absolute floor (ANSWER_FLOOR, ANSWER_FLOOR_SHINGLES) is
    flagged whatever its z. Two ``archived`` submissions are not compared
    with each other; pairs stop after ``budget`` seconds, said in
    ``notes``."""
    notes = notes if notes is not None else []
    deadline = time.monotonic() + budget
    shingled = {name: {q: _shingles(t[:MAX_ANSWER_CHARS])
                       for q, t in found.items()}
                for name, found in answers.items()}
    pairs = []
    total = sum(1 for a, b in combinations(shingled, 2)
                if a not in archived or b not in archived)
    for a, b in combinations(sorted(shingled), 2):
        if a in archived and b in archived:
            continue
        if time.monotonic() > deadline:
            notes.append(f"answers: stopped after {len(pairs)} of {total} "
                         f"pairs (time budget of {budget:g} s)")
            break
        per, copied = {}, []
        for question, left in shingled[a].items():
            right = shingled[b].get(question, set())
            if left and right:
                shared = len(left & right)
                per[question] = shared / len(left | right)
                if per[question] >= ANSWER_FLOOR and \
                        shared >= ANSWER_FLOOR_SHINGLES:
                    copied.append(question)
        if per:
            floor = ", ".join(f"{q} " + ("identical" if per[q] == 1.0
                                         else "near-identical")
                              for q in copied)
            pairs.append(Pair(a, b, sum(per.values()) / len(per),
                              detail=per, floor=floor))
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
        for file in ("source.py", "answers.json"):
            path = folder / file
            if path.is_file():
                try:
                    _keep(name, file, path.stat().st_size,
                          lambda cap, p=path: _read_capped(p, cap),
                          sources, answers, notes)
                except OSError:   # swapped for a FIFO, a link: not read
                    notes.append(f"{name}: not compared ({file} is not "
                                 f"a readable file)")
    return sources, answers


def _read_capped(path: Path, cap: int) -> bytes:
    with open_regular(path) as handle:
        return handle.read(cap + 1)


def _keep(name: str, file: str, size: int, read: Any,
          sources: dict[str, str], answers: dict[str, dict],
          notes: list[str]) -> None:
    """Keep ``name``'s ``file`` (source.py or answers.json) of ``size``
    bytes, read by ``read(cap)`` (at most cap + 1 bytes): a source over
    the caps is left out, said in ``notes``; unreadable answers are."""
    cap = MAX_SOURCE_CHARS * 4   # UTF-8: up to 4 bytes each
    if file == "source.py":
        data = read(cap) if size <= cap else b""
        if size > cap or len(data) > cap:
            notes.append(f"{name}: not compared (source of {size} bytes)")
            return
        text = data.decode(errors="replace")
        if len(text) > MAX_SOURCE_CHARS:
            notes.append(f"{name}: not compared (source of {len(text)} "
                         f"characters; the limit is {MAX_SOURCE_CHARS})")
            return
        sources[name] = text
        return
    cap = MAX_ANSWERS_BYTES
    data = read(cap) if size <= cap else b""
    if size > cap or len(data) > cap:
        notes.append(f"{name}: answers not compared ({size} bytes)")
        return
    try:
        found = json.loads(data.decode(errors="replace"))
    except (ValueError, RecursionError):
        return
    if isinstance(found, dict):
        answers[name] = {str(k): str(v) for k, v in found.items()}


_KEPT = re.compile(r"(?:^|/)submissions/([^/]{1,255})/(source\.py|"
                   r"answers\.json)$")


class ArchiveError(ValueError):
    """An archive named by the user is neither a graded folder nor a zip
    of one; the message names it and the fix."""


def archive_kind(path: Path | str) -> str:
    """"folder" or "zip" for an archive ``path`` (an earlier edition's
    graded folder, or a zip of one), known from ``os.stat`` before
    anything is opened (a FIFO or a device named here must not hang the
    command); ArchiveError otherwise."""
    try:
        info = os.stat(path)
    except OSError as exc:
        raise ArchiveError(f"--archive {path}: {exc.strerror}") from None
    if stat.S_ISDIR(info.st_mode):
        return "folder"
    if stat.S_ISREG(info.st_mode) and str(path).lower().endswith(".zip"):
        return "zip"
    raise ArchiveError(f"--archive {path}: not a graded folder or a .zip "
                       f"of one (give an earlier edition's `grade --out` "
                       f"folder, or that folder zipped)")


def read_archive(path: Path | str, label: str,
                 notes: list[str] | None = None
                 ) -> tuple[dict[str, str], dict[str, dict]]:
    """Sources and answers of an earlier edition's graded folder (or a zip
    of one: its ``submissions/<name>/`` entries, each read with bounds),
    each name as ``<label>/<name>``; nothing is regraded."""
    notes = notes if notes is not None else []
    kind = archive_kind(path)
    if kind == "folder":
        sources, answers = read_folder(path, notes)
    else:
        sources, answers = {}, {}
        try:
            with zipfile.ZipFile(path) as archive:
                entries = archive.infolist()
                if len(entries) > MAX_ARCHIVE_ENTRIES:
                    raise ArchiveError(f"--archive {path}: more than "
                                       f"{MAX_ARCHIVE_ENTRIES} entries")
                for info in entries:
                    found = _KEPT.search(info.filename)
                    if found is None or info.is_dir():
                        continue

                    def read(cap: int, info: zipfile.ZipInfo = info
                             ) -> bytes:
                        with archive.open(info) as handle:
                            return handle.read(cap + 1)
                    _keep(found.group(1), found.group(2), info.file_size,
                          read, sources, answers, notes)
        except (zipfile.BadZipFile, OSError, RuntimeError,
                NotImplementedError, EOFError) as exc:
            raise ArchiveError(f"--archive {path}: not a readable zip "
                               f"({exc})") from None
    if not sources and not answers:
        notes.append(f"archive {label}: no kept source.py or answers.json")
    return ({f"{label}/{n}": t for n, t in sources.items()},
            {f"{label}/{n}": a for n, a in answers.items()})


def archive_labels(archives: Sequence[Path | str]) -> list[str]:
    """A distinct label per archive: its name (a zip's without ``.zip``),
    ``-2``, ``-3`` for repeats."""
    labels: list[str] = []
    for path in archives:
        base = re.sub(r"[^\w.-]+", "_", Path(path).name)
        base = re.sub(r"\.zip$", "", base, flags=re.I) or "archive"
        label, n = base, 1
        while label in labels:
            n += 1
            label = f"{base}-{n}"
        labels.append(label)
    return labels


def analyse(out: Path | str, skeleton: Path | None = None,
            notes: list[str] | None = None,
            archive: Sequence[Path | str] = ()
            ) -> tuple[list[Pair], list[Pair], dict[str, str]]:
    """Code pairs, answer pairs and each submission's compared code, this
    batch's and, against them, each ``archive``'s (an earlier edition's
    graded folder, named ``<label>/<name>``); what was left out (caps,
    time budget) is said in ``notes``."""
    notes = notes if notes is not None else []
    sources, answers = read_folder(out, notes)
    archived: set[str] = set()
    for path, label in zip(archive, archive_labels(archive)):
        old_sources, old_answers = read_archive(path, label, notes)
        sources.update(old_sources)
        answers.update(old_answers)
        archived |= set(old_sources) | set(old_answers)
    skeleton = skeleton or homework.current().module   # the one in use
    skeleton_text = skeleton.read_text() if skeleton.is_file() else ""
    codes = {n: student_code(s, skeleton_text) for n, s in sources.items()}
    return (code_pairs(codes, skeleton_text, notes,
                       archived=frozenset(archived)),
            answer_pairs(answers, notes, archived=frozenset(archived)),
            codes)


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


Names = Mapping[str, str]   # submission -> the name shown (pseudonyms)


def write_side_by_side(out: Path, pairs: list[Pair],
                       codes: dict[str, str], names: Names | None = None,
                       scrub: Any = None) -> dict[tuple[str, str], str]:
    """``OUT/similarity/pair-N.html`` for the pairs ``shown`` that carry
    code spans, each submission named by ``names`` (default: itself) and
    every page passed through ``scrub`` (the anonymised view's); returns
    their paths relative to OUT."""
    names = names or {}
    folder = out / "similarity"
    folder.mkdir(exist_ok=True)
    links = {}
    for i, pair in enumerate(shown(pairs), 1):
        if pair.detail is None:
            continue
        left, right = pair.detail
        a, b = names.get(pair.a, pair.a), names.get(pair.b, pair.b)
        flag = (f" <strong>Flagged: {_html(pair.why)}.</strong>"
                if pair.flagged else "")
        page = (
            "<!DOCTYPE html><html><head><meta charset='utf-8'><title>"
            f"{_html(a)} / {_html(b)}</title><style>"
            "body{font-family:system-ui,sans-serif;margin:1em}"
            ".cols{display:flex;gap:1em}.cols div{flex:1;min-width:0}"
            "pre{background:#f6f6f6;padding:.5em;overflow:auto}"
            "mark{background:#ffd76e}</style></head><body>"
            "<p><a href='../report.html#similarity'>&larr; class report"
            f"</a></p><h1>{_html(a)} and {_html(b)}"
            f"</h1><p>score {pair.score:.2f}, robust z {pair.z:.1f}, above "
            f"{pair.percentile:.0f}% of this batch's pairs.{flag} "
            f"Highlighted: code both share (shown as compared: the code "
            f"the grader grades, each region parsed and unparsed, comments "
            f"dropped; names and whitespace are normalised)."
            f"</p><p><em>{_html(DISCLAIMER)}</em></p><div class='cols'>"
            f"<div><h2>{_html(a)}</h2><pre>"
            f"{_marked(codes[pair.a], left)}</pre></div><div><h2>"
            f"{_html(b)}</h2><pre>{_marked(codes[pair.b], right)}"
            f"</pre></div></div></body></html>\n")
        path = folder / f"pair-{i}.html"
        atomic.write_text(path, scrub(page) if scrub else page)
        links[(pair.a, pair.b)] = f"similarity/{path.name}"
    return links


def _rows(pairs: list[Pair], links: dict, report_links: dict[str, str],
          names: Names | None = None) -> str:
    names = names or {}

    def name(n: str) -> str:
        target = report_links.get(f"feedback:{names.get(n, n)}")
        shown_as = _html(names.get(n, n))
        return (f"<a href='{_html(target)}'>{shown_as}</a>"
                if target else shown_as)
    rows = []
    for pair in shown(pairs):
        view = links.get((pair.a, pair.b))
        lead = " class='lead'" if pair.flagged else ""
        rows.append(
            f"<tr{lead}><td>{name(pair.a)}</td><td>{name(pair.b)}</td>"
            f"<td class='num'>{pair.score:.2f}</td><td class='num'>"
            f"{pair.z:.1f}</td><td class='num'>{pair.percentile:.0f}%</td>"
            f"<td>{_html(pair.why)}</td>"
            + (f"<td><a href='{_html(view)}'>side by side</a></td>"
               if view else "<td></td>") + "</tr>")
    return ("<table class='small'><thead><tr><th>submission</th>"
            "<th>submission</th><th>score</th><th>robust z</th>"
            "<th>percentile</th><th>flagged</th><th></th></tr></thead>"
            "<tbody>" + "".join(rows) + "</tbody></table>")


def _floors() -> str:
    return (f"code from {CODE_FLOOR:g} with {CODE_FLOOR_PRINTS} "
            f"fingerprints shared, an answer from {ANSWER_FLOOR:g} with "
            f"{ANSWER_FLOOR_SHINGLES} word {SHINGLE}-grams shared")


def report_section(out: Path | str, report_links: dict[str, str],
                   skeleton: Path | None = None, *,
                   archive: Sequence[Path | str] = (),
                   names: Names | None = None, pages: Path | None = None,
                   scrub: Any = None) -> str:
    """The class report's similarity section of the batch graded into
    ``out`` (and, against it, the ``archive``'s earlier editions); writes
    the side-by-side pages it links under ``pages`` (default ``out``),
    submissions named by ``names`` and pages passed through ``scrub``
    (the anonymised view's)."""
    out = Path(out)
    head = "<section id='similarity'><h2>Similarity</h2>"
    notes: list[str] = []
    code, answers, codes = analyse(out, skeleton, notes, archive)
    links = write_side_by_side(pages or out, code, codes, names, scrub)
    flagged = sum(p.flagged for p in code)
    parts = [head, f"<p><strong>{_html(DISCLAIMER)}</strong></p>",
             f"<p>Code the grader grades (the TODO regions, code above "
             f"their markers, the helpers it calls; skeleton lines, "
             f"comments, names and whitespace normalised away): "
             f"{len(code)} pairs; {flagged} flagged (highlighted): at a "
             f"robust z of {LEAD_Z:g} or more, or identical or "
             f"near-identical whatever the class's distribution "
             f"({_html(_floors())}).</p>"]
    if archive:
        parts.append(f"<p>Compared with earlier editions (not regraded): "
                     f"{_html(', '.join(archive_labels(archive)))}; their "
                     f"submissions are named <code>edition/name</code>."
                     f"</p>")
    parts.append(_rows(code, links, report_links, names) if code else
                 "<p>No two submissions with code of their own.</p>")
    parts.append(f"<h3>Inline answers</h3><p>{len(answers)} pairs "
                 f"(word {SHINGLE}-grams, questions both answered); "
                 f"{sum(p.flagged for p in answers)} flagged.</p>")
    parts.append(_rows(answers, {}, report_links, names) if answers else
                 "<p>No two submissions answered a common question.</p>")
    if notes:
        parts.append("<h3>Left out</h3><ul>" + "".join(
            f"<li>{_html(_renamed(n, names))}</li>" for n in notes)
            + "</ul>")
    parts.append("</section>")
    return "".join(parts)


def _renamed(note: str, names: Names | None) -> str:
    """A note of the left-out list with every submission named by
    ``names`` (notes start with the submission's name)."""
    for real, shown_as in (names or {}).items():
        if note.startswith(f"{real}: "):
            return shown_as + note[len(real):]
    return note


def summary(out: Path | str, skeleton: Path | None = None,
            archive: Sequence[Path | str] = ()) -> str:
    """The terminal ranking of ``python -m autograder similarity OUT``."""
    out = Path(out)
    notes: list[str] = []
    code, answers, codes = analyse(out, skeleton, notes, archive)
    links = write_side_by_side(out, code, codes)
    lines = [DISCLAIMER, f"flagged: robust z >= {LEAD_Z:g}, or whatever "
             f"the distribution: {_floors()}", ""]
    for title, pairs in (("code (the code the grader grades)", code),
                         ("inline answers", answers)):
        lines.append(f"{title}: {len(pairs)} pairs, "
                     f"{sum(p.flagged for p in pairs)} flagged")
        for pair in shown(pairs):
            view = links.get((pair.a, pair.b), "") if pairs is code else ""
            flag = f"  FLAGGED: {pair.why}" if pair.flagged else ""
            lines.append(f"  {pair.score:5.2f}  z {pair.z:5.1f}  "
                         f"{pair.a} ~ {pair.b}  {view}{flag}".rstrip())
        lines.append("")
    lines += [f"left out: {note}" for note in notes]
    return "\n".join(lines)


__all__ = ["ArchiveError", "DISCLAIMER", "Pair", "analyse", "answer_pairs",
           "archive_kind", "archive_labels", "code_pairs", "fingerprints",
           "line_normalised", "normalised", "rank", "read_archive",
           "read_folder", "report_section", "shape", "shared_spans", "shown",
           "student_code", "summary", "task_methods", "tokens",
           "write_side_by_side"]
