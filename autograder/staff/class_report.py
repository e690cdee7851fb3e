"""The staff's view of a graded batch: ``OUT/report.html``.

Reads what ``grade`` wrote (``OUT/grades.csv`` and each
``OUT/submissions/<name>/results.json``; nothing is re-graded) and writes one
self-contained HTML page (inline CSS, SVG and script; no network, works
opened from disk) with the score distribution, per-item pass rates, the
named mistakes ranked with their explanations and submissions, deduction
rates with the most frequent offending patterns, the submissions that hit
limits apart from the grader's own failures, links to each submission's
feedback and the per-question answer pages, and a table a TA can sort and
filter. Markdown pages it links to are rendered next to it as HTML
(``feedback.html``, ``answers/Q*.html``, ``answers/full/Q*/*.html``).
Student text is escaped everywhere (``mdsafe.html_text``: invisible
characters written out; markdown rendered with raw HTML and images
disabled and relative links only).
"""
from __future__ import annotations

import html
import json
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from autograder.files import atomic
from autograder.files.user_files import read_regular, read_regular_text
from autograder.report import layout
from autograder.text import csvsafe, mdsafe

REPORT_NAME = "report.html"
MAX_LISTED = 40                  # submissions listed per mistake or pattern

LIMIT_WORDS = {"timeout": "time limit", "memory": "memory limit",
               "crash": "crash or exit"}
# Fallback when results.json predates extra_data["limits"].
_LIMIT_TEXT = {"timeout": "did not finish", "memory": "used too much memory",
               "crash": "the worker running your code stopped"}
_STYLE_CODE = re.compile(r"\b([EW]\d{3}) ([^\n(]{0,60})")
_SHAPE_PATTERNS = (("has no shape comment", "missing shape comment"),
                   ("comment claims", "shape comment disagrees with the "
                                      "traced shape"),
                   ("cannot read", "unreadable shape comment"))
# The grader_access deduction's findings (checks/grader_access.py): what
# the code reached for, flagged to staff by construct.
_ACCESS = "code that reaches into the grader"
_ACCESS_FINDING = re.compile(r"^ *- line \d+: (`[^`\n]{1,60}`)$", re.M)


# --------------------------------------------------------------------------
# Reading a batch

@dataclass
class Item:
    """One rubric entry of one submission, as results.json has it."""

    number: str
    title: str
    task: str
    kind: str             # "item", "deduction" or "bonus"
    score: float
    max_score: float
    passed: bool
    output: str


@dataclass
class Submission:
    """One graded submission, read back from its results.json."""

    name: str
    score: float
    max_score: float
    tasks: dict[str, float] = field(default_factory=dict)
    items: list[Item] = field(default_factory=list)
    mistakes: list[str] = field(default_factory=list)
    limits: dict[str, int] = field(default_factory=dict)
    grader_failure: bool = False
    not_graded: str = ""      # why the code could not be graded (student)
    missing: str = ""         # results.json absent or unreadable
    extra: dict[str, str] = field(default_factory=dict)  # grades.csv extras
    # item -> where its values left the reference, and the relation named
    # (results.json's extra_data "diagnosis")
    diagnosis: dict[str, list[str]] = field(default_factory=dict)

    @property
    def failed_items(self) -> list[str]:
        """Numbers of the items (not deductions or bonuses) that failed."""
        return [i.number for i in self.items
                if i.kind == "item" and not i.passed]

    @property
    def deductions(self) -> list[Item]:
        """The deductions that applied."""
        return [i for i in self.items if i.kind == "deduction"
                and not i.passed]


@dataclass
class Batch:
    """Every submission of a graded folder."""

    out: Path
    submissions: list[Submission]
    task_ids: list[str]
    csv_extra: list[str] = field(default_factory=list)

    def item_order(self) -> list[tuple[str, str, str, str]]:
        """(number, title, task, kind) of every rubric entry, first seen
        order."""
        seen: dict[str, tuple[str, str, str, str]] = {}
        for sub in self.submissions:
            for item in sub.items:
                seen.setdefault(item.number, (item.number, item.title,
                                              item.task, item.kind))
        return list(seen.values())


def _kind(name: str) -> str:
    if name.startswith("Deduction ("):
        return "deduction"
    if name.startswith("Bonus ("):
        return "bonus"
    return "item"


def _title(name: str, number: str, kind: str) -> str:
    if kind != "item":
        return name.split("): ", 1)[-1]
    tail = name.split(" / ", 1)[-1]
    return tail[len(number):].strip() if tail.startswith(number) else tail


def _read_results(path: Path) -> dict[str, Any]:
    data = json.loads(read_regular(path, layout.MAX_RESULTS_BYTES))
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    return data


def read_submission(folder: Path, name: str) -> Submission:
    """The submission graded into ``folder`` (its results.json; one that
    cannot be read, or holds the wrong types, is ``missing``)."""
    path = folder / "results.json"
    try:
        return _parse_submission(_read_results(path), name)
    except (OSError, ValueError, TypeError, AttributeError,
            RecursionError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror \
            else str(exc)[:200]
        return Submission(name, 0.0, 0.0, missing=f"results.json: {why}")


def _parse_submission(data: dict[str, Any], name: str) -> Submission:
    extra = data.get("extra_data") or {}
    sub = Submission(name, float(data.get("score", 0.0)), 0.0,
                     tasks={str(k): float(v) for k, v in
                            (extra.get("tasks") or {}).items()},
                     mistakes=[str(m) for m in extra.get("mistakes") or []],
                     grader_failure=bool(extra.get("internal_error")
                                         or extra.get("fallback")))
    for test in data.get("tests") or []:
        name_ = str(test.get("name", ""))
        number = str(test.get("number") or "")
        if not number:       # "Grading" (no code graded), hidden details
            if name_ == "Grading" and not sub.grader_failure:
                # markdown-escaped for Gradescope; shown here as text
                sub.not_graded = re.sub(r"\\([!-/:-@\[-`{-~])", r"\1",
                                        str(test.get("output", "")))[:300]
            continue
        kind = _kind(name_)
        item = Item(number, _title(name_, number, kind),
                    str((test.get("tags") or [""])[0]), kind,
                    float(test.get("score", 0.0)),
                    float(test.get("max_score", 0.0)),
                    test.get("status") == "passed",
                    str(test.get("output", "")))
        sub.items.append(item)
    sub.max_score = sum(i.max_score for i in sub.items if i.kind == "item") \
        or float(sum(t.get("max_score", 0.0) for t in data.get("tests") or []
                     if t.get("name") == "Grading"))
    if not sub.not_graded and not sub.grader_failure:
        sub.not_graded = _import_failure(sub.items)
    found = extra.get("diagnosis")
    if isinstance(found, dict):
        sub.diagnosis = {str(k)[:20]: [str(c)[:200] for c in v[:20]]
                         for k, v in list(found.items())[:100]
                         if isinstance(v, list)}
    limits = extra.get("limits")
    if isinstance(limits, dict):
        sub.limits = {str(k): int(v) for k, v in limits.items() if v}
    else:
        outputs = "\n".join(i.output for i in sub.items)
        sub.limits = {k: 1 for k, text in _LIMIT_TEXT.items()
                      if text in outputs}
    return sub


_IMPORT_FAILED = re.compile(r"the module failed to import: ([^\n]{1,300})")
_MISSING_MODULE = re.compile(r"ModuleNotFoundError: No module named "
                             r"\\?'([\w.]{1,100})\\?'")


def _import_failure(items: list[Item]) -> str:
    """Why the code could not be graded when its module never imported
    (every item failed that way): a package the grader lacks, a syntax
    error, or another error at import. "" when the code ran."""
    graded = [i for i in items if i.kind == "item"]
    reasons = [_IMPORT_FAILED.search(i.output) for i in graded]
    if not graded or not all(reasons):
        return ""
    reason = re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", reasons[0].group(1))
    missing = _MISSING_MODULE.search(reason)
    if missing:
        return (f"imports {missing.group(1)}, a package the grader does "
                f"not have")
    if reason.startswith(("SyntaxError", "IndentationError", "TabError")):
        return f"does not parse: {reason}"
    return f"fails at import: {reason}"


def read_batch(out: Path | str) -> Batch:
    """The batch graded into ``out``: grades.csv's rows, in its order, each
    with its results.json (a folder without grades.csv: every folder that
    holds a results.json)."""
    out = Path(out)
    rows: list[dict[str, str]] = []
    header: list[str] = []
    csv_path = out / "grades.csv"
    if csv_path.is_file():
        header, rows = csvsafe.read_dicts(csv_path)
    else:
        rows = [{"submission": name} for name in
                layout.submission_dirs(out, "results.json")]
    subs = []
    for row in rows:
        name = row.get("submission", "")
        if not name or "/" in name or name.startswith("."):
            continue
        subs.append(read_submission(layout.submission_dir(out, name),
                                    name))
    task_ids = list(dict.fromkeys(t for s in subs for t in s.tasks))
    # Columns besides the scores (names, emails of a Gradescope export);
    # not the paths: the table keeps to names (each links its feedback)
    known = {"submission", "score", "max_score", layout.PATH_COLUMN,
             *task_ids}
    extra_cols = [c for c in header if c not in known]
    by_name = {r.get("submission", ""): r for r in rows}
    for sub in subs:
        sub.extra = {c: by_name[sub.name].get(c, "") for c in extra_cols}
    return Batch(out, subs, task_ids, extra_cols)


# --------------------------------------------------------------------------
# What the page says

def pass_rates(batch: Batch) -> list[dict[str, Any]]:
    """Per rubric entry: how many graded submissions passed it (items and
    bonuses) or had it applied (deductions)."""
    graded = [s for s in batch.submissions if s.items]
    rates = []
    for number, title, task, kind in batch.item_order():
        found = [i for s in graded for i in s.items if i.number == number]
        passed = sum(i.passed for i in found)
        rates.append({"number": number, "title": title, "task": task,
                      "kind": kind, "n": len(found), "passed": passed,
                      "rate": passed / len(found) if found else 0.0})
    return rates


def ranked_mistakes(batch: Batch) -> list[tuple[str, list[str]]]:
    """Named mistakes by how many submissions made them (most first)."""
    by: dict[str, list[str]] = {}
    for sub in batch.submissions:
        for mistake in sub.mistakes:
            by.setdefault(mistake, []).append(sub.name)
    return sorted(by.items(), key=lambda kv: (-len(kv[1]), kv[0]))


Causes = list[tuple[str, list[str]]]   # (cause, submissions) of one item


def failure_causes(batch: Batch) -> list[tuple[str, Causes]]:
    """Per item (rubric order), its failures grouped by where the values
    left the reference and the relation named (most submissions first);
    a failing submission with no diagnosis counts under "no diagnosis"."""
    order = [number for number, _, _, kind in batch.item_order()
             if kind == "item"]
    grouped: dict[str, dict[str, list[str]]] = {}
    for sub in batch.submissions:
        for number in sub.failed_items:
            causes = sub.diagnosis.get(number) or [NO_DIAGNOSIS]
            for cause in causes:
                grouped.setdefault(number, {}).setdefault(
                    cause, []).append(sub.name)
    return [(number, sorted(grouped[number].items(),
                            key=lambda kv: (kv[0] == NO_DIAGNOSIS,
                                            -len(kv[1]), kv[0])))
            for number in order if number in grouped]


NO_DIAGNOSIS = "no diagnosis (a named mistake, an error, or no relation)"


def deduction_patterns(item_outputs: list[tuple[str, str]]
                       ) -> list[tuple[str, list[str]]]:
    """The offending patterns of a deduction's outputs (pycodestyle codes,
    kinds of shape-comment problem, what code reached for in the grader)
    with the submissions that had them, most frequent first."""
    by: dict[str, list[str]] = {}
    for name, output in item_outputs:
        found = {f"{m.group(1)} {m.group(2).strip()}"
                 for m in _STYLE_CODE.finditer(output)}
        found |= {label for text, label in _SHAPE_PATTERNS if text in output}
        if _ACCESS in output:
            found |= {f"reaches into the grader: {m.group(1)}"
                      for m in _ACCESS_FINDING.finditer(output)}
        for pattern in found or {"other"}:
            by.setdefault(pattern, []).append(name)
    return sorted(by.items(), key=lambda kv: (-len(kv[1]), kv[0]))


# --------------------------------------------------------------------------
# Markdown pages as HTML

def _renderer() -> Any:
    """CommonMark without raw HTML and without images, whose links may only
    be relative paths to the pages written here (``.md`` shown as the
    ``.html`` rendered next to it). The pages' student text is escaped
    already (mdsafe); this is the second wall: an image would load from
    the network when a TA opens the page, a scheme could run script."""
    from markdown_it import MarkdownIt
    md = MarkdownIt("commonmark", {"html": False}).disable("image")
    md.validateLink = _relative_link
    plain = md.normalizeLink
    md.normalizeLink = lambda url: plain(_MD_LINK.sub(".html", url))
    return md


_MD_LINK = re.compile(r"\.md$")


def _relative_link(url: str) -> bool:
    # No scheme, no host, no absolute path: a page of the graded folder.
    return bool(url) and ":" not in url and not url.startswith(("/", "\\"))


def render_markdown(text: str, title: str) -> str:
    """A standalone HTML page of a markdown file, raw HTML and images
    disabled and only relative links (so nothing a student wrote becomes
    markup or reaches the network); a <pre> of the text when no markdown
    renderer is installed."""
    try:
        body = _renderer().render(text)
    except ImportError:
        body = f"<pre>{_e(text)}</pre>"
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'>"
            f"<title>{_e(title)}</title><style>{_PAGE_CSS}</style>"
            f"</head><body><p><a href='{'../' * title.count('/')}"
            f"{REPORT_NAME}'>&larr; class report</a></p>{body}</body>"
            f"</html>\n")


def write_linked_pages(batch: Batch) -> dict[str, str]:
    """Render every feedback.md and answers/Q*.md next to itself as HTML;
    returns link targets (relative to OUT) by key ``feedback:<name>`` and
    ``answers:<Q>``."""
    links = {}
    for sub in batch.submissions:
        folder = layout.submission_link(batch.out, sub.name)
        source = batch.out / folder / "feedback.md"
        if source.is_file():
            atomic.write_text(source.with_suffix(".html"), render_markdown(
                read_regular_text(source, errors="replace"),
                f"{folder}/feedback"))
            links[f"feedback:{sub.name}"] = f"{quote(folder)}/feedback.html"
    for page in sorted((batch.out / "answers").glob("Q*.md")):
        atomic.write_text(page.with_suffix(".html"), render_markdown(
            read_regular_text(page, errors="replace"), f"answers/{page.stem}"))
        links[f"answers:{page.stem}"] = f"answers/{quote(page.name[:-3])}" \
                                        f".html"
    # Full answers, linked from where a question page cuts one
    for page in sorted((batch.out / "answers").glob("full/*/*.md")):
        atomic.write_text(page.with_suffix(".html"), render_markdown(
            read_regular_text(page, errors="replace"),
            f"answers/full/{page.parent.name}/{page.stem}"))
    return links


# --------------------------------------------------------------------------
# Charts (inline SVG)

def score_histogram(scores: list[float], max_score: float) -> str:
    """An SVG bar chart: how many submissions per whole point."""
    top = int(max(max_score, max(scores, default=0)))
    counts = [0] * (top + 1)
    for score in scores:
        counts[min(top, max(0, int(score)))] += 1
    width, height, pad = 640, 220, 30
    bar = (width - 2 * pad) / len(counts)
    peak = max(counts) or 1
    parts = [f"<svg class='chart' id='histogram' viewBox='0 0 {width} "
             f"{height}' width='{width}' height='{height}' role='img' "
             f"aria-label='score distribution'>"]
    for i, count in enumerate(counts):
        h = (height - 2 * pad) * count / peak
        x, y = pad + i * bar, height - pad - h
        parts.append(f"<rect class='bar' x='{x:.1f}' y='{y:.1f}' "
                     f"width='{bar - 2:.1f}' height='{h:.1f}'><title>{i}"
                     f" points: {count}</title></rect>")
        if count:
            parts.append(f"<text x='{x + bar / 2 - 1:.1f}' y='{y - 4:.1f}' "
                         f"text-anchor='middle'>{count}</text>")
        parts.append(f"<text x='{x + bar / 2 - 1:.1f}' y='{height - 12}' "
                     f"text-anchor='middle'>{i}</text>")
    parts.append(f"<line x1='{pad}' y1='{height - pad}' x2='{width - pad}' "
                 f"y2='{height - pad}' stroke='#444'/></svg>")
    return "".join(parts)


def rate_bars(rates: list[dict[str, Any]]) -> str:
    """An SVG of horizontal bars: each rubric item's pass rate."""
    items = [r for r in rates if r["kind"] == "item"]
    row, label_w, bar_w = 22, 330, 260
    height = row * len(items) + 10
    parts = [f"<svg class='chart' id='passrates' viewBox='0 0 "
             f"{label_w + bar_w + 60} {height}' width='{label_w + bar_w + 60}'"
             f" height='{height}' role='img' aria-label='pass rates'>"]
    for i, rate in enumerate(items):
        y = 5 + i * row
        label = f"{rate['number']} {rate['title']}"
        label = label if len(label) <= 48 else label[:46] + "…"
        w = bar_w * rate["rate"]
        parts.append(f"<text x='0' y='{y + 14}'>{html.escape(label)}"
                     f"<title>{html.escape(rate['title'])}</title></text>"
                     f"<rect x='{label_w}' y='{y}' width='{bar_w}' "
                     f"height='{row - 6}' fill='#eee'/>"
                     f"<rect class='bar' x='{label_w}' y='{y}' "
                     f"width='{w:.1f}' height='{row - 6}'/>"
                     f"<text x='{label_w + bar_w + 6}' y='{y + 14}'>"
                     f"{100 * rate['rate']:.0f}%</text>")
    parts.append("</svg>")
    return "".join(parts)


# --------------------------------------------------------------------------
# The page

def _e(text: Any) -> str:
    # The one HTML seam (mdsafe): escaped, invisible characters shown.
    return mdsafe.html_text(text, 20_000)


def _pts(value: float) -> str:
    return f"{value:g}"


def _sub_link(name: str, links: dict[str, str]) -> str:
    target = links.get(f"feedback:{name}")
    return (f"<a href='{_e(target)}'>{_e(name)}</a>" if target
            else _e(name))


def _names(names: list[str], links: dict[str, str]) -> str:
    shown = ", ".join(_sub_link(n, links) for n in names[:MAX_LISTED])
    more = len(names) - MAX_LISTED
    return shown + (f" and {more} more" if more > 0 else "")


def _table(batch: Batch, links: dict[str, str]) -> str:
    mistakes = sorted({m for s in batch.submissions for m in s.mistakes})
    items = [n for n, _, _, kind in batch.item_order() if kind == "item"]
    head = ["submission", *batch.csv_extra, "score", *batch.task_ids,
            "failed items", "mistakes", "deductions", "flags"]
    controls = (
        "<div class='controls'><label>Filter <input id='filter' "
        "type='search' placeholder='name, item, mistake...'></label> "
        "<label>Mistake <select id='f-mistake'><option value=''>any"
        "</option>" + "".join(f"<option>{_e(m)}</option>" for m in mistakes)
        + "</select></label> <label>Failed item <select id='f-item'>"
        "<option value=''>any</option>" + "".join(
            f"<option>{_e(i)}</option>" for i in items)
        + "</select></label> <label>Flag <select id='f-flag'><option "
        "value=''>any</option><option>grader failure</option><option>"
        "limit</option><option>not graded</option></select></label> "
        "<span id='shown'></span></div>")
    rows = []
    for sub in batch.submissions:
        flags = []
        if sub.grader_failure:
            flags.append("grader failure")
        if sub.limits:
            flags.append("limit: " + ", ".join(LIMIT_WORDS.get(k, k)
                                               for k in sorted(sub.limits)))
        if sub.not_graded:
            flags.append("not graded")
        if sub.missing:
            flags.append("no results")
        cells = [f"<td data-v='{_e(sub.name)}'>"
                 f"{_sub_link(sub.name, links)}</td>"]
        cells += [f"<td>{_e(sub.extra.get(c, ''))}</td>"
                  for c in batch.csv_extra]
        cells.append(f"<td data-v='{sub.score}' class='num'>"
                     f"{_pts(sub.score)}</td>")
        cells += [f"<td data-v='{sub.tasks.get(t, 0.0)}' class='num'>"
                  f"{_pts(sub.tasks.get(t, 0.0))}</td>"
                  for t in batch.task_ids]
        cells.append(f"<td>{_e(' '.join(sub.failed_items))}</td>")
        cells.append(f"<td>{_e(' '.join(sub.mistakes))}</td>")
        cells.append(f"<td>{_e(' '.join(d.number for d in sub.deductions))}"
                     f"</td>")
        cells.append(f"<td>{_e('; '.join(flags))}</td>")
        rows.append(f"<tr data-mistakes=' {_e(' '.join(sub.mistakes))} ' "
                    f"data-items=' {_e(' '.join(sub.failed_items))} ' "
                    f"data-flags='{_e('; '.join(flags))}'>"
                    + "".join(cells) + "</tr>")
    # long task names break after "_" so that the table fits a laptop
    header = "".join(f"<th data-col='{i}' title='sort'>"
                     f"{_e(h).replace('_', '_<wbr>')}</th>"
                     for i, h in enumerate(head))
    return (controls + "<div class='scroll'><table id='submissions'>"
            "<thead><tr>" + header + "</tr></thead><tbody>" + "".join(rows)
            + "</tbody></table></div>")


def build_report(batch: Batch, messages: dict[str, str],
                 links: dict[str, str] | None = None,
                 extra_sections: list[str] | None = None, *,
                 title: str = "") -> str:
    """The class report as one HTML page; ``messages`` (catalogue id ->
    explanation, the grading config's mistakes) explain the named
    mistakes; ``title`` (default "Class report: <OUT's name>") heads it."""
    links = links or {}
    subs = batch.submissions
    graded = [s for s in subs if s.items]
    scores = [s.score for s in graded]
    max_score = max((s.max_score for s in graded), default=0.0)
    out: list[str] = []
    mean = statistics.mean(scores) if scores else 0.0
    median = statistics.median(scores) if scores else 0.0
    full = sum(s.score >= s.max_score for s in graded)
    failures = [s for s in subs if s.grader_failure or s.missing]
    out.append(
        "<section id='summary'><h2>Summary</h2><ul class='cards'>"
        f"<li><b>{len(subs)}</b> submissions</li>"
        f"<li><b>{_pts(round(mean, 2))}</b> mean of {_pts(max_score)}</li>"
        f"<li><b>{_pts(median)}</b> median</li>"
        f"<li><b>{full}</b> full marks</li>"
        f"<li><b>{sum(bool(s.limits) for s in subs)}</b> hit a limit</li>"
        f"<li><b>{len(failures)}</b> grader failures</li></ul>"
        "<p class='note'>Scores include bonuses; submissions whose code "
        "could not be graded count as 0; grader failures are left out of "
        "the charts (they are not grades).</p></section>")
    out.append("<section id='distribution'><h2>Score distribution</h2>"
               + score_histogram(scores, max_score) + "</section>")
    rates = pass_rates(batch)
    out.append("<section id='items'><h2>Pass rate per item</h2>"
               + rate_bars(rates) + "<table class='small'><thead><tr>"
               "<th>item</th><th>task</th><th>passed</th><th>rate</th>"
               "</tr></thead><tbody>" + "".join(
                   f"<tr><td>{_e(r['number'])} {_e(r['title'])}</td>"
                   f"<td>{_e(r['task'])}</td><td class='num'>{r['passed']}"
                   f" / {r['n']}</td><td class='num'>"
                   f"{100 * r['rate']:.0f}%</td></tr>"
                   for r in rates if r["kind"] != "deduction")
               + "</tbody></table></section>")
    mistakes = ranked_mistakes(batch)
    out.append("<section id='mistakes'><h2>Named mistakes</h2>")
    if mistakes:
        out.append("<table class='small'><thead><tr><th>mistake</th>"
                   "<th>submissions</th><th>what it is</th><th>who</th></tr>"
                   "</thead><tbody>" + "".join(
                       f"<tr><td><code>{_e(m)}</code></td><td class='num'>"
                       f"{len(names)}</td><td>{_e(messages.get(m, ''))}</td>"
                       f"<td>{_names(names, links)}</td></tr>"
                       for m, names in mistakes) + "</tbody></table>")
    else:
        out.append("<p>No catalogued mistake was recognised.</p>")
    out.append("</section>")
    out.append(_causes_section(batch, links))
    out.append(_deductions_section(batch, rates, links))
    out.append(_failures_section(batch, links))
    answer_links = sorted(k for k in links if k.startswith("answers:"))
    out.append("<section id='answers'><h2>Inline answers</h2>" + (
        "<p>" + " · ".join(f"<a href='{_e(links[k])}'>{_e(k[8:])}</a>"
                           for k in answer_links) + "</p>"
        if answer_links else "<p>No notebook answers in this batch.</p>")
        + "</section>")
    out.extend(extra_sections or [])
    out.append("<section id='table-section'><h2>Submissions</h2>"
               + _table(batch, links) + "</section>")
    title = title or f"Class report: {batch.out.name}"
    return (f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
            f"<meta name='viewport' content='width=device-width'>"
            f"<title>{_e(title)}</title><style>{_PAGE_CSS}{_REPORT_CSS}"
            f"</style><script>{_ERROR_TRAP}</script></head><body>"
            f"<h1>{_e(title)}</h1><nav>" + " · ".join(
                f"<a href='#{a}'>{t}</a>" for a, t in _NAV) + "</nav>"
            + "".join(out) + f"<script>{_TABLE_JS}</script></body></html>\n")


def _causes_section(batch: Batch, links: dict[str, str]) -> str:
    causes = failure_causes(batch)
    out = ["<section id='causes'><h2>Where the values leave the "
           "reference</h2>"]
    if not causes:
        out.append("<p>No failing item.</p></section>")
        return "".join(out)
    out.append("<p class='note'>Each item's failures grouped by the first "
               "step whose values differ from the reference's and the "
               "relation named there (a submission may count under "
               "several when its cases differ).</p><table class='small'>"
               "<thead><tr><th>item</th><th>where, and why</th>"
               "<th>submissions</th><th>who</th></tr></thead><tbody>")
    for number, groups in causes:
        for i, (cause, names) in enumerate(groups):
            head = f"<td rowspan='{len(groups)}'>{_e(number)}</td>" \
                if i == 0 else ""
            out.append(f"<tr>{head}<td>{_e(cause)}</td><td class='num'>"
                       f"{len(names)}</td><td>{_names(names, links)}"
                       f"</td></tr>")
    out.append("</tbody></table></section>")
    return "".join(out)


def _deductions_section(batch: Batch, rates: list[dict[str, Any]],
                        links: dict[str, str]) -> str:
    out = ["<section id='deductions'><h2>Deductions</h2><table "
           "class='small'><thead><tr><th>deduction</th><th>applied</th>"
           "<th>most frequent patterns</th></tr></thead><tbody>"]
    for rate in rates:
        if rate["kind"] != "deduction":
            continue
        number = rate["number"]
        hit = [(s.name, i.output) for s in batch.submissions
               for i in s.deductions if i.number == number]
        patterns = deduction_patterns(hit)[:5]
        applied = rate["n"] - rate["passed"]
        out.append(
            f"<tr><td>{_e(number)} {_e(rate['title'])}</td><td class='num'>"
            f"{applied} / {rate['n']} ({100 * (1 - rate['rate']):.0f}%)</td>"
            f"<td>" + "<br>".join(
                f"{_e(p)}: {len(names)} ({_names(names, links)})"
                for p, names in patterns) + "</td></tr>")
    out.append("</tbody></table></section>")
    return "".join(out)


def _failures_section(batch: Batch, links: dict[str, str]) -> str:
    grader = [s for s in batch.submissions if s.grader_failure or s.missing]
    limits = [s for s in batch.submissions if s.limits]
    ungraded = [s for s in batch.submissions if s.not_graded]
    out = ["<section id='failures'><h2>Limits and failures</h2>",
           "<h3>The grader's own failures (not the students'; regrade "
           "these)</h3>"]
    out.append("<ul>" + "".join(
        f"<li>{_sub_link(s.name, links)}: "
        f"{_e(s.missing or 'the autograder failed (see its feedback)')}"
        f"</li>" for s in grader) + "</ul>" if grader else "<p>None.</p>")
    out.append("<h3>Submissions that hit a limit (student code)</h3>")
    out.append("<ul>" + "".join(
        f"<li>{_sub_link(s.name, links)}: " + ", ".join(
            f"{LIMIT_WORDS.get(k, _e(k))} ({v} probe{'s' * (v > 1)})"
            for k, v in sorted(s.limits.items())) + "</li>"
        for s in limits) + "</ul>" if limits else "<p>None.</p>")
    out.append("<h3>Code that could not be graded (student)</h3>")
    out.append("<ul>" + "".join(
        f"<li>{_sub_link(s.name, links)}: {_e(s.not_graded)}</li>"
        for s in ungraded) + "</ul>" if ungraded else "<p>None.</p>")
    out.append("</section>")
    return "".join(out)


@dataclass(frozen=True)
class ReportOptions:
    """What a TA asks of the report besides the batch: earlier editions
    to compare with (similarity ``archive``), and the anonymised view
    (``anonymise``, its pseudonym ``key``: default OUT/pseudonyms.csv)."""

    archive: tuple[Path, ...] = ()
    anonymise: bool = False
    key: Path | None = None


def write_report(out: Path | str, messages: dict[str, str],
                 extra_sections: list[str] | None = None, *,
                 options: ReportOptions | None = None) -> Path:
    """Read the batch graded into ``out`` and write ``out/report.html``
    (and the HTML renderings of the pages it links), its named mistakes
    explained by ``messages``, its similarity section compared with
    ``options.archive`` too. Returns its path."""
    options = options or ReportOptions()
    batch = read_batch(out)
    links = write_linked_pages(batch)
    if extra_sections is None:
        extra_sections = _similarity_section(batch, links, options.archive)
    path = Path(out) / REPORT_NAME
    atomic.write_text(path, build_report(batch, messages, links,
                                         extra_sections))
    return path


def _similarity_section(batch: Batch, links: dict[str, str],
                        archive: tuple[Path, ...] = ()) -> list[str]:
    try:
        from autograder.staff import similarity
    except ImportError:
        return []
    try:
        return [similarity.report_section(batch.out, links,
                                          archive=archive)]
    except Exception as exc:   # noqa: BLE001 - the rest of the page stands
        # (MemoryError and RecursionError included: they are Exceptions)
        return [f"<section id='similarity'><h2>Similarity</h2><p>Not "
                f"computed: {_e(type(exc).__name__)}: "
                f"{_e(str(exc)[:300])}</p></section>"]


_NAV = (("summary", "Summary"), ("distribution", "Scores"),
        ("items", "Items"), ("mistakes", "Mistakes"), ("causes", "Causes"),
        ("deductions", "Deductions"), ("failures", "Limits and failures"),
        ("answers", "Answers"), ("similarity", "Similarity"),
        ("table-section", "Table"))

_PAGE_CSS = """
body{font-family:system-ui,sans-serif;margin:1.5em auto;max-width:1200px;
padding:0 1em;color:#222}
pre,code{background:#f4f4f4;font-size:90%}pre{padding:.6em;overflow:auto}
blockquote{border-left:3px solid #ccc;margin-left:0;padding-left:1em}
table{border-collapse:collapse}td,th{border:1px solid #ddd;padding:3px 6px;
vertical-align:top;text-align:left}
"""
_REPORT_CSS = """
nav{margin-bottom:1em}section{margin:1.5em 0}
.cards{display:flex;gap:1em;list-style:none;padding:0;flex-wrap:wrap}
.cards li{border:1px solid #ddd;border-radius:6px;padding:.5em 1em}
.cards b{font-size:140%;display:block}
.chart text{font-size:11px;fill:#333}.bar{fill:#3b78c2}
.num{text-align:right}.note{color:#666;font-size:90%}
table.small{font-size:90%}th[data-col]{cursor:pointer;background:#f0f4fa}
th.asc::after{content:" \\25B2"}th.desc::after{content:" \\25BC"}
.controls{margin:.5em 0}.controls label{margin-right:1em}
#submissions{font-size:90%}tr.hidden{display:none}
.scroll{overflow-x:auto}#submissions td{overflow-wrap:anywhere}
#submissions td.num{white-space:nowrap}
#similarity tr.lead td{background:#fff3cd}
"""
# Any script error is recorded on the page (the Chromium test reads it).
_ERROR_TRAP = """
window.reportErrors=[];window.addEventListener('error',function(e){
window.reportErrors.push(String(e.message));
document.documentElement.setAttribute('data-errors',
window.reportErrors.join(' | '));});
"""
_TABLE_JS = """
(function(){
var table=document.getElementById('submissions');
var body=table.tBodies[0];
var rows=Array.prototype.slice.call(body.rows);
function value(row,col){var cell=row.cells[col];
var v=cell.getAttribute('data-v');if(v===null){v=cell.textContent;}
var n=parseFloat(v);return (v!==''&&!isNaN(n)&&isFinite(v))?n:v.toLowerCase();}
Array.prototype.forEach.call(table.tHead.rows[0].cells,function(th){
th.addEventListener('click',function(){
var col=Number(th.getAttribute('data-col'));
var asc=!th.classList.contains('asc');
Array.prototype.forEach.call(table.tHead.rows[0].cells,function(o){
o.classList.remove('asc','desc');});
th.classList.add(asc?'asc':'desc');
rows.sort(function(a,b){var x=value(a,col),y=value(b,col);
if(typeof x!==typeof y){x=String(x);y=String(y);}
return (x<y?-1:x>y?1:0)*(asc?1:-1);});
rows.forEach(function(r){body.appendChild(r);});});});
var text=document.getElementById('filter');
var mistake=document.getElementById('f-mistake');
var item=document.getElementById('f-item');
var flag=document.getElementById('f-flag');
function apply(){var q=text.value.toLowerCase();var shown=0;
rows.forEach(function(r){
function has(attr,v){return r.getAttribute(attr).indexOf(v)>=0;}
var ok=(!q||r.textContent.toLowerCase().indexOf(q)>=0)&&
(!mistake.value||has('data-mistakes',' '+mistake.value+' '))&&
(!item.value||has('data-items',' '+item.value+' '))&&
(!flag.value||has('data-flags',flag.value));
r.classList.toggle('hidden',!ok);shown+=ok?1:0;});
document.getElementById('shown').textContent=
shown+' of '+rows.length+' shown';}
[text,mistake,item,flag].forEach(function(el){
el.addEventListener('input',apply);el.addEventListener('change',apply);});
apply();
document.documentElement.setAttribute('data-ready','1');
})();
"""

__all__ = ["Batch", "Item", "REPORT_NAME", "ReportOptions", "Submission",
           "build_report", "deduction_patterns", "failure_causes",
           "pass_rates", "ranked_mistakes", "read_batch", "read_submission",
           "render_markdown", "score_histogram", "write_linked_pages",
           "write_report"]
