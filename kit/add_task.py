"""Add a task and a question as the walkthrough says, in a copy, and test
there (`make test-add-task`).

``docs/architecture.md`` ("Adding a task", "Adding a question") promises
that a new task (its reference class, rubric entry, cases, a catalogue
mistake, a notebook section) and a new question are edits of the
walkthrough's source files alone, followed by ``make generate``. This
checks that promise end to end: the checkout is copied to a temporary
folder, :data:`EDITS` (Part 4, grouped-query attention, and question Q6)
are applied to the copy's sources, ``make generate`` runs there, and then
the tests of :data:`TESTS` (or pytest arguments given after ``--``). Any
other file the change needs by hand is a bug of the kit: this run turns
red. The checkout itself is never touched.

    python -m kit.add_task                  # edits, generate, TESTS
    python -m kit.add_task -- -x -k answers # pytest arguments instead
    python -m kit.add_task --keep           # keep the copy to look at it
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from autograder import homework
from kit.generate.rubric_change import ROOT, copy_checkout, run_timed


def _profile() -> homework.Homework:
    """The homework the proof edits (the one in use), read when it runs."""
    return homework.staff()


def _source(path: Path) -> str:
    """A file of the profile, relative to the homework's root."""
    return path.relative_to(_profile().root).as_posix()


# The walkthrough's names. A course that added its own Part 4 by the
# walkthrough already has them (and the item 4.1, the question Q6): the
# proof then takes the next part, the next question and these names with
# that part's number (:func:`plan`), so it never collides with the
# course's work.
TASK = "grouped_query_attention"   # the new task's rubric id
CLASS = "GroupedQueryAttention"     # its class in the reference
MISTAKE = "gqa_kv_heads_tiled"      # its catalogue mistake
CASE_NAMES = ("gqa_small", "gqa_groups_of_4")   # its public, hidden case


@dataclass(frozen=True)
class Plan:
    """The ids and names the proof adds, free in the checkout it edits."""

    part: int           # the new part's number (4 in the shipped kit)
    task: str
    item: str           # its one item, "<part>.1"
    cls: str
    mistake: str
    question: str       # the next Q<number>
    cases: tuple[str, str]
    suffix: str         # "" when the walkthrough's names are free, else
    #                     the part: the local names the catalogue's edits
    #                     quote carry it, so each quoted line stays unique

    @property
    def seeds(self) -> tuple[int, int]:
        return (self.part * 100 + 1, self.part * 100 + 2)


def plan(root: Path = ROOT) -> Plan:
    """The proof's ids and names for the checkout at ``root``, from its
    rubric, reference, catalogue, cases and questions at run time: the
    walkthrough's own where free (the shipped kit), else the next part's."""
    import ast
    import tomllib

    from autograder.rubric import load_rubric
    rubric = load_rubric(root / _source(_profile().rubric))
    items = [i.id for t in rubric.tasks for i in (*t.items, *t.deductions,
                                                  *t.bonuses)]
    part = 1 + max((int(m.group(1)) for i in items
                    if (m := re.match(r"(\d+)\.", i))), default=0)
    reference = (root / _source(_profile().reference)).read_text()
    defined = {node.name for node in ast.parse(reference).body
               if isinstance(node, (ast.ClassDef, ast.FunctionDef))}
    with open(root / _source(_profile().catalogue / "mistakes.toml"),
              "rb") as handle:
        mistakes = set(tomllib.load(handle))
    with open(root / _source(_profile().questions), "rb") as handle:
        questions = tomllib.load(handle).get("questions", {})
    # The notebook's source declares them (questions.toml is built from
    # it by `make generate`, which may not have run yet).
    notebook = (root / _source(_profile().notebook_source)).read_text()
    numbers = [int(q) for q in re.findall(r"\bQ(\d+)\b", " ".join(
        [*questions, *re.findall(r'"question": "(Q\d+)"', notebook)]))]
    cases = (root / _source(_profile().cases)).read_text()
    taken = ({t.id for t in rubric.tasks} & {TASK} or CLASS in defined
             or MISTAKE in mistakes
             or any(f'"{n}"' in cases for n in CASE_NAMES))
    suffix = str(part) if taken else ""
    return Plan(part, TASK + (f"_part{suffix}" if suffix else ""),
                f"{part}.1", CLASS + (f"Part{suffix}" if suffix else ""),
                MISTAKE + (f"_{suffix}" if suffix else ""),
                f"Q{max(numbers, default=0) + 1}",
                tuple(f"{n}_{suffix}" if suffix else n for n in CASE_NAMES),
                suffix)


@dataclass(frozen=True)
class SourceEdit:
    """Insert ``text`` into ``path`` just before ``anchor`` (which must
    occur exactly once), or at the end of the file when ``anchor`` is
    empty: an edit an instructor makes by hand."""

    path: str
    text: str
    anchor: str = ""

    def apply(self, root: Path) -> None:
        """Apply the edit to the file under ``root``; AddTaskError if the
        anchor is not found exactly once."""
        target = root / self.path
        source = target.read_text()
        if not self.anchor:
            target.write_text(source.rstrip("\n") + "\n" + self.text)
            return
        count = source.count(self.anchor)
        if count != 1:
            raise AddTaskError(
                f"{self.path}: the anchor {self.anchor.strip()[:60]!r} "
                f"occurs {count} times (expected once): update "
                f"kit/add_task.py's EDITS to the file")
        target.write_text(source.replace(self.anchor,
                                         self.text + self.anchor))


class AddTaskError(RuntimeError):
    """An edit of :data:`EDITS` no longer applies to the checkout."""


# Written unlike MultiHeadAttention's lines (the order of __init__'s
# assignments, out_proj's input size), as the walkthrough says: the
# catalogue's edits quote those lines, and each must match once.
REFERENCE_CLASS = '''

# Part {part}: grouped-query attention.


class {cls}(nn.Module):
    """Causal attention whose query heads share fewer key/value heads.

    Args:
        d_in: size of each input vector.
        d_out: output size, split into num_heads query heads.
        context_length: longest sequence the module is built for.
        num_heads: number of query heads; must divide d_out.
        num_kv_heads: number of key/value heads; must divide num_heads.
    """

    def __init__(self, d_in, d_out, context_length, num_heads,
                 num_kv_heads):
        super().__init__()
        self.context_length = context_length
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim = d_out // num_heads
        kv_size = num_kv_heads * self.head_dim
        self.W_query = nn.Linear(d_in, d_out, bias=False)
        self.W_key = nn.Linear(d_in, kv_size, bias=False)
        self.W_value = nn.Linear(d_in, kv_size, bias=False)
        self.out_proj = nn.Linear(num_heads * self.head_dim, d_out)

    def forward(self, x):
        """Grouped-query causal attention of ``x`` [b, num_tokens, d_in].

        Returns:
            Tensor of shape [b, num_tokens, d_out].
        """
        tokens = x.shape[1]
        # Task {item} (1 point): split the queries into num_heads heads and
        # the keys and values into num_kv_heads heads, repeat each key and
        # value head for its group of adjacent query heads, attend
        # causally (scale by sqrt(head_dim)), merge the heads and apply
        # out_proj. Hint: ~10 lines.
        # YOUR CODE STARTS HERE
        group{suffix} = self.num_heads // self.num_kv_heads
        per_query = (self.num_heads, self.head_dim)
        per_kv = (self.num_kv_heads, self.head_dim)
        q = self.W_query(x).unflatten(-1, per_query).transpose(1, 2)
        k = self.W_key(x).unflatten(-1, per_kv).transpose(1, 2)
        v = self.W_value(x).unflatten(-1, per_kv).transpose(1, 2)
        k = k.repeat_interleave(group{suffix}, dim=1)
        v = v.repeat_interleave(group{suffix}, dim=1)
        scores = q @ k.transpose(-2, -1) / self.head_dim ** 0.5
        later = torch.ones(tokens, tokens, dtype=torch.bool,
                           device=x.device).triu(1)
        weights = torch.softmax(scores.masked_fill(later, -torch.inf), -1)
        merged{suffix} = (weights @ v).transpose(1, 2).flatten(2)
        return self.out_proj(merged{suffix})
        # YOUR CODE ENDS HERE
'''

RUBRIC_TASK = '''
# --------------------------------------------------------------------------
[[task]]
id = "{task}"
title = "Task {item}: {cls}"
class = "{cls}"

[[task.item]]
id = "{item}"
title = "forward(x) matches the expected output on every case"
points = 1
kind = "module_output"
cases = {{ task = "{task}" }}

[[task.deduction]]
id = "{item}.pep8"
title = "PEP 8 (pycodestyle) inside {cls}"
points = 1
kind = "pycodestyle"

[[task.deduction]]
id = "{item}.access"
title = "no code that reaches into the grader (the rules' list), in \
{cls} or outside every task"
points = 1
kind = "grader_access"
'''

# Every size of a case distinct (kit_tests/test_case_table.py).
CASES = '''

# Part {part}: grouped-query attention.
CASES += [
    Case("{case_public}", "public", "{cls}",
         {{"d_in": 7, "d_out": 24, "context_length": 11, "num_heads": 6,
          "num_kv_heads": 3}}, 2, 5, {seed_public},
         description="six query heads of 4 share three key/value heads",
         arguments=ARGUMENTS["MultiHeadAttention"]),
    Case("{case_hidden}", "hidden", "{cls}",
         {{"d_in": 6, "d_out": 40, "context_length": 16, "num_heads": 8,
          "num_kv_heads": 2}}, 3, 10, {seed_hidden},
         description="eight query heads of 5 share two key/value heads",
         arguments=ARGUMENTS["MultiHeadAttention"]),
]
'''

MISTAKE_ENTRY = '''
[{mistake}]
about = "repeats the key/value heads as a block (repeat) instead of each \
over its group (repeat_interleave)"
items = ["{item}"]
message = "your output equals grouped-query attention whose query heads \
read the wrong key/value heads (the key/value heads repeated as a block, so \
query head i reads key/value head i % num_kv_heads): repeat each key/value \
head for its group of adjacent query heads (repeat_interleave(group, \
dim=1))."
edits = [
    ["k = k.repeat_interleave(group{suffix}, dim=1)",
     "k = k.repeat(1, group{suffix}, 1, 1)"],
    ["v = v.repeat_interleave(group{suffix}, dim=1)",
     "v = v.repeat(1, group{suffix}, 1, 1)"],
]
'''

NO_WORK_EDIT = '''\
    ["        return self.out_proj(merged{suffix})\\n",
     "        return torch.zeros_like(self.out_proj(merged{suffix}))\\n"],
'''

NOTEBOOK_ROW = ("| {item} | `{cls}.forward` | "
                "{{{{ table_points {item} }}}} |\n")

NOTEBOOK_SECTION = '''## Part {part}: grouped-query attention

Large models keep the keys and values of every past token in memory
while they generate. Grouped-query attention shrinks that cache: the
`num_heads` query heads share `num_kv_heads` key and value heads, each
key/value head serving a group of `num_heads // num_kv_heads` adjacent
query heads.

+++ {{"task": "{item}"}}

### Task {item} ({{{{ points {item} }}}})

Implement `{cls}.forward(x)`, returning `[b, num_tokens, d_out]`.

+++ {{"question": "{question}"}}

**{question}.** By what factor does grouped-query attention shrink the
keys and values a model keeps per token, and what is left of
multi-head attention when `num_kv_heads = 1`?

+++ {{"sample": "{question}"}}

**Answer {question}:**

By `num_heads / num_kv_heads`: only `num_kv_heads` heads of keys and
values are computed and kept. With one key/value head every query head
reads the same keys and values (multi-query attention).

+++

'''


def edits(chosen: Plan) -> tuple[SourceEdit, ...]:
    """The walkthrough's source files, and nothing else, edited to add
    ``chosen``'s part and question."""
    names = {"part": chosen.part, "task": chosen.task, "item": chosen.item,
             "cls": chosen.cls, "mistake": chosen.mistake,
             "question": chosen.question, "suffix": chosen.suffix,
             "case_public": chosen.cases[0], "case_hidden": chosen.cases[1],
             "seed_public": chosen.seeds[0], "seed_hidden": chosen.seeds[1]}

    def text(template: str) -> str:
        return template.format(**names)
    return (
        SourceEdit(_source(_profile().reference), text(REFERENCE_CLASS)),
        SourceEdit(_source(_profile().rubric), text(RUBRIC_TASK)),
        SourceEdit(_source(_profile().cases), text(CASES)),
        SourceEdit(_source(_profile().catalogue / "mistakes.toml"),
                   text(MISTAKE_ENTRY)),
        SourceEdit(_source(_profile().catalogue / "fidelity.toml"),
                   text(NO_WORK_EDIT),
                   anchor="    ['''\ndef gpt2_small_attention():\n"),
        SourceEdit(_source(_profile().notebook_source), text(NOTEBOOK_ROW),
                   anchor="| Q1-Q5 | your answers"),
        SourceEdit(_source(_profile().notebook_source), text(NOTEBOOK_SECTION),
                   anchor="## Checking and submitting\n"),
    )


# The tests run in the copy after the grading proof (prove_graded): the
# files whose tables come from the rubric, the cases, the catalogue and
# the questions. Not the whole of `make test` (`make test-rubric-change`
# runs it after a point change): the catalogue's grading
# (test_grading_corpus.py) alone takes minutes, and what it would prove of
# the new task, the reference in full and the new mistake named, the
# grading proof shows on two submissions. Nor test_test_values.py (four
# minutes of regenerations): the values the copy generated are checked
# fresh before any test (python -m kit.generate --check), and the
# generator checks them against the reference's own float64 run.
TESTS = (
    "kit_tests/test_case_table.py",
    "kit_tests/test_mistake_catalogue.py",
    "kit_tests/test_variants.py",
    "kit_tests/test_answers.py",
    "kit_tests/test_questions.py",
    "kit_tests/test_notebook_source.py",
    "kit_tests/test_skeleton.py",
    "kit_tests/test_facts.py",
    "kit_tests/test_code_style.py",
)


def apply_all(root: Path, chosen: Plan | None = None) -> list[str]:
    """Apply :func:`edits` of ``chosen`` (default: the plan for ``root``)
    to the checkout at ``root``; the files they touch, in order, each
    once."""
    done = edits(chosen or plan(root))
    for edit in done:
        edit.apply(root)
    return list(dict.fromkeys(edit.path for edit in done))


ANSWER = "Keys and values shrink by num_heads / num_kv_heads."


def _submissions(root: Path, into: Path, chosen: Plan) -> list[Path]:
    """Two submissions built from the checkout at ``root``: the reference
    with the built notebook, the new question answered; and the new
    catalogue mistake."""
    import nbformat

    from kit import variants
    reference, mistake = into / "reference", into / "mistake"
    for folder in (reference, mistake):
        folder.mkdir(parents=True)
    copy = homework.load(root, staff=True)
    source = copy.reference
    (reference / copy.module_name).write_text(source.read_text())
    notebook = nbformat.read(str(copy.notebook), 4)
    cells = [c for c in notebook.cells
             if c.metadata.get("kit") == {"question": chosen.question}]
    if len(cells) != 1:
        raise AddTaskError(f"the built notebook has {len(cells)} answer "
                           f"cells of {chosen.question} (expected one)")
    cells[0].source = f"**Answer {chosen.question}:**\n\n{ANSWER}"
    nbformat.write(notebook, str(reference / copy.notebook.name))
    entry = variants.find(f"mistakes/{chosen.mistake}", copy.catalogue)
    (mistake / copy.module_name).write_text(entry.source(
        source.read_text()))
    return [reference, mistake]


def graded_problems(root: Path, out: Path, chosen: Plan) -> list[str]:
    """What is wrong with the grades in ``out`` of :func:`_submissions`
    (empty when right): the reference earns the new task's points, the
    mistake loses its item, is named and keeps every other task's points,
    and the new question's answer reaches answers.json and its page."""
    from autograder.report.layout import submission_dir
    from autograder.rubric import load_rubric
    task_id, mistake_id, question = chosen.task, chosen.mistake, \
        chosen.question
    task = next(t for t in load_rubric(root / "autograder" / "rubric.toml"
                                       ).tasks if t.id == task_id)
    full = sum(i.points for i in task.items)
    found = {name: json.loads((submission_dir(out, name) / "results.json"
                               ).read_text())
             for name in ("reference", "mistake")}
    reference, mistake = (found[n]["extra_data"] for n in found)
    problems = []
    if reference["tasks"].get(task_id) != full:
        problems.append(f"the reference scores "
                        f"{reference['tasks'].get(task_id)} on {task_id}, "
                        f"not {full}")
    if mistake["tasks"].get(task_id) != full - task.items[0].points or \
            mistake_id not in mistake["mistakes"]:
        problems.append(f"the mistake {mistake_id}: {task_id} "
                        f"{mistake['tasks'].get(task_id)}, mistakes named "
                        f"{mistake['mistakes']}")
    others = {k: v for k, v in mistake["tasks"].items() if k != task_id}
    if others != {k: v for k, v in reference["tasks"].items()
                  if k != task_id}:
        problems.append(f"the mistake {mistake_id} loses another task: "
                        f"{others}")
    answers = json.loads((submission_dir(out, "reference") / "answers.json"
                          ).read_text())
    page = out / "answers" / f"{question}.md"
    if answers.get(question) != ANSWER or not page.is_file() or \
            ANSWER not in page.read_text():
        problems.append(f"{question}'s answer is not collected "
                        f"(answers.json {sorted(answers)}, {page.name})")
    return problems


def prove_graded(root: Path, env: dict[str, str], chosen: Plan) -> float:
    """Grade :func:`_submissions` in the checkout at ``root`` with the
    real grader; its seconds; AddTaskError naming what is wrong."""
    work = Path(tempfile.mkdtemp(prefix="add-task-grades-"))
    try:
        subs = _submissions(root, work / "subs", chosen)
        seconds = run_timed(
            [sys.executable, "-m", "autograder", "grade",
             "--out", str(work / "out"), *map(str, subs)], root, env)
        problems = graded_problems(root, work / "out", chosen)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if problems:
        raise AddTaskError("; ".join(problems))
    return seconds


def main(argv: list[str] | None = None) -> int:
    """Copy, edit the sources, generate, test; 0 when green."""
    chosen = plan(ROOT)
    item, question = chosen.item, chosen.question
    parser = argparse.ArgumentParser(
        prog="python -m kit.add_task",
        description=f"Add task {item} ({chosen.cls}) and question "
                    f"{question} by the walkthrough's source files alone "
                    f"in a copy of the checkout, run `make generate` and "
                    f"the tests there: they must stay green.")
    parser.add_argument("--keep", action="store_true",
                        help="keep the copy (its path is printed)")
    parser.add_argument("pytest_args", nargs="*",
                        help="after --: pytest arguments to run instead of "
                             "the default test files")
    args = parser.parse_args(argv)
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTEST_ADDOPTS", "MAKEFLAGS")}
    workdir = Path(tempfile.mkdtemp(prefix="add-task-"))
    start = time.monotonic()
    try:
        copy = copy_checkout(ROOT, workdir)
        touched = apply_all(copy, chosen)
        print(f"task {item} ({chosen.cls}) and question {question} added "
              f"by hand to: {', '.join(touched)}", flush=True)
        generate = run_timed(
            ["make", f"PY={sys.executable}", "generate"], copy, env)
        in_copy = {**env, "PYTHONPATH": str(copy)}
        grading = prove_graded(copy, in_copy, chosen)
        print(f"graded: the reference earns task {item}, "
              f"{chosen.mistake} is named, {question}'s answer is "
              f"collected", flush=True)
        tests = run_timed(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
             *(args.pytest_args or ["-q", "-m", "not e2e", *TESTS])],
            copy, in_copy)
    except AddTaskError as exc:
        print(f"RED: {exc}", file=sys.stderr)
        return 1
    except subprocess.CalledProcessError as exc:
        print(f"RED: `{' '.join(map(str, exc.cmd))}` failed (exit "
              f"{exc.returncode}) after task {item} and question "
              f"{question} were added by the walkthrough's files alone: "
              f"a test or a generator assumes the shipped tasks or "
              f"questions (fix it there, not in the copy)", file=sys.stderr)
        return 1
    finally:
        if args.keep:
            print(f"the copy: {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    print(f"GREEN: task {item} and question {question} added by hand "
          f"to {len(touched)} files: make generate {generate:.0f} s, grading "
          f"{grading:.0f} s, tests {tests:.0f} s, "
          f"{time.monotonic() - start:.0f} s in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
