"""The catalogue of submission variants: each an edit of the live reference.

Correct styles, common mistakes, hostile code and the submissions that once
fooled the grader are all kept as edits of
``solutions/transformer_lm/modeling_attention.py`` in ``kit/variants/*.toml``
(one file per group), never as copies: a variant follows the reference when
it changes, and an edit that no longer applies is an error naming the entry
and what to update.

Every entry is a TOML table::

    [name]
    about = "what it is (and what the grader once got wrong)"
    edits = [["exact text in the reference", "its replacement"], ...]
    base = "skeleton"        # optional: edit the generated skeleton instead
    loses = ["2.1", "2.pep8"]   # rubric ids it must lose (default: none)
    mistake = "no_scale"     # catalogue mistake its feedback must name
    says = ["text the feedback must contain", ...]
    never = ["text the feedback must not contain", ...]
    timeout = 1.5            # seconds per probe (hostile code)
    scores = { task_id = points }   # only for a partially scored item
    known_bug = "..."        # a grader bug: the test skips with this reason
    in_process = false       # unsafe to run outside the sandbox

In group ``mistakes`` (``kit/variants/mistakes.toml``, the one home of a
common mistake) an entry's name is the mistake id, and it also says what
the student is told, which ``make generate`` (kit/generate/mistakes.py)
writes into the shipped ``autograder/mistakes.toml``; these keys are
refused elsewhere::

    items = ["1.2", "2.1"]   # the rubric items it fails, its own first
    message = "your output equals ..."   # the student-facing explanation
    raises = true            # optional: its code raises on some cases
    same_as = ["other_id"]   # optional: the public cases cannot tell them

``loses`` names items, deductions (taken) and bonuses; a bonus whose
``requires`` (rubric.toml) includes a lost id is lost too, without being
written. A task id stands for all of that task's items, ``"*"`` for every
item of every task. The score of every task is computed from the rubric
(:func:`expect`), so a change of points changes no entry. An entry of
group ``mistakes`` loses its ``items`` and its feedback must name it.

A replacement may use the words of :data:`EXPAND` for text too long to
write in the file.
"""
from __future__ import annotations

import ast
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autograder import homework

ROOT = Path(__file__).resolve().parents[1]
EXPAND = {"{DEEP}": "[" * 1500 + "]" * 1500}   # nested past any limit
BASES = ("reference", "skeleton")
# Group ``mistakes`` only: what the shipped autograder/mistakes.toml says.
MISTAKE_KEYS = {"items", "message", "raises", "same_as"}
KEYS = {"about", "edits", "base", "loses", "mistake", "says", "never",
        "timeout", "scores", "known_bug", "in_process"} | MISTAKE_KEYS


class VariantError(ValueError):
    """A variant's edit does not apply to the reference, or an entry is
    malformed; the message names the entry and what to update."""


def _occurrences(source: str, old: str) -> list[str]:
    """Where ``old`` occurs in ``source``: "Name (line n)" per occurrence,
    Name the top-level class or function around it."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        tree = ast.Module(body=[], type_ignores=[])
    spans = [(node.lineno, node.end_lineno, node.name) for node in tree.body
             if isinstance(node, (ast.ClassDef, ast.FunctionDef))]
    found, start = [], source.find(old)
    while start != -1:
        line = source.count("\n", 0, start) + 1
        names = [name for first, last, name in spans if first <= line <= last]
        found.append(f"{names[0] if names else 'module'} (line {line})")
        start = source.find(old, start + 1)
    return found


def edit_problems(source: str, edits, label: str,
                  where: str | None = None) -> tuple[str, list[str]]:
    """``source`` with each ``(old, new)`` edit applied where ``old``
    appears once, and one message per edit that does not (naming
    ``label``, the quoted text, where it occurs when it occurs more than
    once, and the fix). An ambiguous edit is applied at its first
    occurrence so that the entry's later edits are judged too. ``where``
    names the source (default: the homework in use's reference)."""
    where = where or homework.staff().reference.name
    problems = []
    for old, new in edits:
        count = source.count(old)
        if count > 1:
            problems.append(
                f"{label}: {old.strip()!r} appears {count} times in {where} "
                f"(expected once), in {', '.join(_occurrences(source, old))}:"
                f" if new code repeats these lines, write it differently or "
                f"quote more of the context in this edit so that it matches "
                f"once")
            source = source.replace(old, new, 1)
        elif count != 1:
            problems.append(
                f"{label}: {old.strip()!r} appears {count} times in {where} "
                f"(expected once): if the reference changed on purpose, "
                f"update this edit to match it")
        else:
            source = source.replace(old, new)
    return source, problems


def apply_edits(source: str, edits, label: str,
                where: str | None = None) -> str:
    """``source`` with each ``(old, new)`` edit applied; every ``old`` must
    appear exactly once (else VariantError naming ``label``, and where the
    text occurs when it occurs more than once: the first such edit)."""
    for old, new in edits:
        edited, problems = edit_problems(source, [(old, new)], label, where)
        if problems:
            raise VariantError(problems[0])
        source = edited
    return source


@dataclass(frozen=True)
class Variant:
    """One entry of the catalogue."""

    name: str
    group: str
    about: str
    edits: tuple[tuple[str, str], ...]
    fields: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"kit/variants/{self.group}.toml [{self.name}]"

    @property
    def key(self) -> str:
        """``group/name``: unique across the catalogue."""
        return f"{self.group}/{self.name}"

    def source(self, reference: str | None = None) -> str:
        """The reference (``reference`` text, else the live file), or the
        skeleton generated from it for ``base = "skeleton"``, with this
        variant's edits applied."""
        return apply_edits(self._base(reference), self._expanded(),
                           self.label)

    def problems(self, reference: str | None = None,
                 skeleton: str | None = None) -> list[str]:
        """Every edit of this entry that does not apply once to its base
        (``reference`` text, else the live file; ``skeleton``, the
        skeleton generated from it, if already at hand), one message
        each; empty when :meth:`source` succeeds."""
        if self.fields.get("base") == "skeleton" and skeleton is not None:
            base = skeleton
        else:
            base = self._base(reference)
        return edit_problems(base, self._expanded(), self.label)[1]

    def _base(self, reference: str | None) -> str:
        base = homework.staff().reference.read_text() if reference is None \
            else reference
        if self.fields.get("base") == "skeleton":
            from kit.generate.skeleton import generate_skeleton
            base = generate_skeleton(base)
        return base

    def _expanded(self) -> list[tuple[str, str]]:
        edits = []
        for old, new in self.edits:
            for word, text in EXPAND.items():
                new = new.replace(word, text)
            edits.append((old, new))
        return edits


def _is_strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(s, str) for s in value)


def _check_mistake(label: str, entry: dict, group: str) -> None:
    """The keys of a catalogue mistake: required in group ``mistakes``,
    refused elsewhere."""
    if group != "mistakes":
        misplaced = sorted(set(entry) & MISTAKE_KEYS)
        if misplaced:
            raise VariantError(f"{label}: {misplaced} belong to entries of "
                               f"kit/variants/mistakes.toml only")
        return
    if not isinstance(entry.get("message"), str) or \
            not entry["message"].strip():
        raise VariantError(f"{label}: a mistake needs `message`, what the "
                           f"student is told")
    if not entry.get("items") or not _is_strings(entry["items"]):
        raise VariantError(f"{label}: a mistake needs `items`, the rubric "
                           f"items it fails (a list of strings, its own "
                           f"first)")
    if not isinstance(entry.get("raises", False), bool):
        raise VariantError(f"{label}: `raises` must be true or false")
    if not _is_strings(entry.get("same_as", [])):
        raise VariantError(f"{label}: `same_as` must be a list of strings")


def _check_entry(label: str, entry: Any, group: str) -> None:
    if not isinstance(entry, dict) or "edits" not in entry:
        raise VariantError(f"{label}: an entry needs `edits`")
    edits = entry["edits"]
    if not isinstance(edits, list) or not all(
            isinstance(e, list) and len(e) == 2
            and all(isinstance(s, str) for s in e) for e in edits):
        raise VariantError(f"{label}: `edits` must be a list of "
                           f"[old, new] string pairs")
    unknown = sorted(set(entry) - KEYS)
    if unknown:
        raise VariantError(f"{label}: unknown key(s) {unknown}; an entry "
                           f"may have {sorted(KEYS)}")
    if entry.get("base", "reference") not in BASES:
        raise VariantError(f"{label}: `base` must be one of {BASES}")
    for key in ("loses", "says", "never"):
        if not _is_strings(entry.get(key, [])):
            raise VariantError(f"{label}: `{key}` must be a list of strings")
    _check_mistake(label, entry, group)


def load(group: str, catalogue: Path | None = None) -> dict[str, Variant]:
    """name -> :class:`Variant` of ``catalogue/<group>.toml``, in file
    order (default ``catalogue``: the homework in use's)."""
    path = (catalogue or homework.staff().catalogue) / f"{group}.toml"
    try:
        table = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise VariantError(f"kit/variants/{group}.toml: {exc}") from None
    variants = {}
    for name, entry in table.items():
        _check_entry(f"kit/variants/{group}.toml [{name}]", entry, group)
        rest = {k: v for k, v in entry.items() if k not in ("about", "edits")}
        variants[name] = Variant(name, group, entry.get("about", ""),
                                 tuple((old, new)
                                       for old, new in entry["edits"]),
                                 rest)
    return variants


def groups(catalogue: Path | None = None) -> list[str]:
    """The catalogue's groups (its file names), sorted."""
    catalogue = catalogue or homework.staff().catalogue
    return sorted(p.stem for p in catalogue.glob("*.toml"))


def load_all(catalogue: Path | None = None) -> dict[str, Variant]:
    """``group/name`` -> :class:`Variant` of every group, groups sorted."""
    return {v.key: v for g in groups(catalogue)
            for v in load(g, catalogue).values()}


def catalogue_problems(catalogue: Path | None = None,
                       reference: str | None = None) -> list[str]:
    """Every problem of the whole catalogue at once, in group and file
    order: a malformed group file, and each edit of each entry that does
    not apply exactly once to ``reference`` (text; the live reference by
    default) or to the skeleton generated from it. Empty when every entry
    applies. ``make generate`` prints them all (kit/generate/mistakes.py),
    so that a new class that repeats quoted lines shows every clash in one
    run."""
    from kit.generate.skeleton import generate_skeleton
    reference = homework.staff().reference.read_text() if reference is None \
        else reference
    skeleton = None
    found: list[str] = []
    for group in groups(catalogue):
        try:
            entries = load(group, catalogue)
        except VariantError as exc:
            found.append(str(exc))
            continue
        for variant in entries.values():
            if variant.fields.get("base") == "skeleton" and skeleton is None:
                skeleton = generate_skeleton(reference)
            found += variant.problems(reference, skeleton)
    return found


def find(name: str, catalogue: Path | None = None) -> Variant:
    """The entry ``group/name`` (for tests that need one variant)."""
    group, _, entry = name.partition("/")
    try:
        return load(group, catalogue)[entry]
    except (KeyError, FileNotFoundError):
        raise VariantError(f"no entry {name!r} in kit/variants/: expected "
                           f"'group/name'") from None


# --------------------------------------------------------------------------
# What an entry must get, from the rubric


@dataclass(frozen=True)
class Expectation:
    """What grading a variant must give: the rubric ids lost (items failed,
    deductions taken, bonuses not earned), each task's score, and what the
    feedback must (not) say."""

    lost: frozenset[str]
    scores: dict[str, float]
    mistake: str | None = None
    says: tuple[str, ...] = ()
    never: tuple[str, ...] = ()


def mistake_items(catalogue: Path | None = None) -> dict[str, list[str]]:
    """Catalogue mistake id -> the rubric items it fails (the ``items`` of
    its entry in ``catalogue``/mistakes.toml)."""
    return {mid: list(entry.fields["items"])
            for mid, entry in load("mistakes", catalogue).items()}


def expect(variant: Variant, rubric, mistakes: dict[str, list[str]]
           | None = None) -> Expectation:
    """The :class:`Expectation` of ``variant`` under ``rubric`` (an
    ``autograder.rubric.Rubric``); ``mistakes`` is :func:`mistake_items`
    (read when an entry of another group names a mistake). A mistake of
    group ``mistakes`` loses its own ``items``. Raises VariantError on an
    id the rubric or the mistake catalogue does not know."""
    f = variant.fields
    mistake = f.get("mistake")
    loses = list(f.get("loses", []))
    if variant.group == "mistakes":
        mistake = variant.name
        loses += f["items"]
    elif mistake is not None:
        mistakes = mistake_items() if mistakes is None else mistakes
        if mistake not in mistakes:
            raise VariantError(f"{variant.label}: {mistake!r} is not a "
                               f"mistake of kit/variants/mistakes.toml")
    ids = {c.id for c in rubric.checks()}
    lost: set[str] = set()
    for word in loses:
        task = next((t for t in rubric.tasks if t.id == word), None)
        if word == "*":
            lost |= {i.id for t in rubric.tasks for i in t.items}
        elif task is not None:
            lost |= {i.id for i in task.items}
        elif word in ids:
            lost.add(word)
        else:
            raise VariantError(
                f"{variant.label}: `loses` names {word!r}, which is no "
                f"item, deduction, bonus or task of autograder/rubric.toml; "
                f"update the entry to the rubric")
    scores = {}
    for task in rubric.tasks:
        for bonus in task.bonuses:
            if any(r in lost for r in bonus.requires):
                lost.add(bonus.id)
        earned = sum(i.points for i in task.items if i.id not in lost)
        for deduction in task.deductions:
            if deduction.id in lost:
                earned -= min(deduction.points, earned)
        earned += sum(b.points for b in task.bonuses if b.id not in lost)
        scores[task.id] = earned
    override = f.get("scores", {})
    unknown = set(override) - set(scores)
    if unknown:
        raise VariantError(f"{variant.label}: `scores` names unknown "
                           f"task(s) {sorted(unknown)}")
    scores.update(override)
    return Expectation(frozenset(lost), scores, mistake,
                       tuple(f.get("says", [])), tuple(f.get("never", [])))
