"""The student skeleton: generated from the reference, up to date, clean,
and free of solution code; the generator on references yet to come."""
from __future__ import annotations

import ast
import importlib.util
import re
import textwrap
from pathlib import Path

import pycodestyle
import pytest
import torch

from autograder import homework
from autograder.submission.regions import (END_MARKER, START_MARKER,
                                           find_regions)
from kit.generate.skeleton import generate_skeleton, solution_lines
from kit_tests.rubrics import (item_points, notebook_task_points,
                               other_points, points_words, rubric_with)

REFERENCE = homework.staff().reference
SKELETON = homework.current().module

ROOT = Path(__file__).resolve().parents[1]
REFERENCE_SOURCE = REFERENCE.read_text()
SKELETON_SOURCE = SKELETON.read_text()
# Derived, not listed, so that adding Part 3 to the reference needs no edit.
TASKS = [region.task for region in find_regions(REFERENCE_SOURCE)]


class _Collect(pycodestyle.BaseReport):
    """Keeps pycodestyle's messages instead of printing them."""

    def __init__(self, options):
        super().__init__(options)
        self.found: list[str] = []

    def error(self, line_number, offset, text, check):
        code = super().error(line_number, offset, text, check)
        if code:
            self.found.append(f"{line_number}:{offset + 1}: {text}")
        return code


def style_errors(source: str) -> list[str]:
    """pycodestyle messages for ``source``, default settings."""
    style = pycodestyle.StyleGuide(reporter=_Collect)
    pycodestyle.Checker(lines=source.splitlines(keepends=True),
                        options=style.options).check_all()
    return style.options.report.found


def import_file(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def raised_message(statements: list[ast.stmt]) -> str | None:
    """The message of ``raise NotImplementedError("...")`` if that is the
    only statement, else None."""
    if len(statements) != 1 or not isinstance(statements[0], ast.Raise):
        return None
    call = statements[0].exc
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
            and call.func.id == "NotImplementedError" and len(call.args) == 1
            and isinstance(call.args[0], ast.Constant)):
        return None
    return call.args[0].value


def region_bodies(source: str) -> list[tuple[str, list[ast.stmt]]]:
    """(task, statements) of every region of ``source``."""
    lines = source.splitlines()
    bodies = []
    for region in find_regions(source):
        code = textwrap.dedent("\n".join(lines[region.start - 1:region.end]))
        bodies.append((region.task, ast.parse(code).body))
    return bodies


def test_committed_skeleton_is_generated_from_the_reference():
    assert SKELETON_SOURCE == generate_skeleton(REFERENCE_SOURCE), (
        "transformer_lm/modeling_attention.py is stale: run `make skeleton`")


def test_stale_names_the_drifted_skeleton_and_the_fix(tmp_path: Path):
    from kit.generate.skeleton import stale
    assert stale(REFERENCE, SKELETON) is None
    drifted = tmp_path / "modeling_attention.py"
    drifted.write_text(SKELETON_SOURCE.replace("Hint: ~3 lines.",
                                               "Hint: ~4 lines.", 1))
    assert stale(REFERENCE, drifted) == (
        f"{drifted} is stale: run `make skeleton`")


def test_generation_writes_the_output(tmp_path: Path, capsys):
    # The generator's write, in this process (a second interpreter would
    # only import torch again; `python -m kit.generate` is test_generate's).
    from kit.generate.skeleton import write
    out = tmp_path / "skeleton.py"
    assert write(output=out) == 0
    assert out.read_text() == SKELETON_SOURCE
    assert f"wrote {out}" in capsys.readouterr().out


def test_skeleton_imports_and_raises_the_first_task():
    module = import_file(SKELETON, "skeleton_under_test")
    with pytest.raises(NotImplementedError, match=r"^Task 1\.1 not "):
        module.SelfAttention(7, 9)
    attention = module.MultiHeadSelfAttention(7, 9, 3, causal=True)
    with pytest.raises(NotImplementedError, match=r"^Task 2\.1 not "):
        attention(torch.zeros(1, 2, 7))


def test_skeleton_is_pycodestyle_clean():
    assert style_errors(SKELETON_SOURCE) == []


def test_style_check_would_catch_a_long_line():
    # Guards the helper above: an empty report must mean "clean".
    assert style_errors("x = 1\n" + "y = '" + "a" * 80 + "'\n")


def test_skeleton_keeps_markers_headers_and_given_code():
    def non_region_lines(source):
        lines = source.splitlines()
        inside = {n for r in find_regions(source)
                  for n in range(r.start, r.end + 1)}
        return [line for n, line in enumerate(lines, 1) if n not in inside]

    # Everything outside the regions, markers and Task headers included,
    # is carried over verbatim and in order.
    assert non_region_lines(SKELETON_SOURCE) == \
        non_region_lines(REFERENCE_SOURCE)
    assert {"1.1", "1.2", "2.1", "2.2", "2.3"} <= set(TASKS)
    for marker in (START_MARKER, END_MARKER):
        marker_lines = [line for line in SKELETON_SOURCE.splitlines()
                        if line.strip() == marker]
        assert len(marker_lines) == len(TASKS)
    headers = re.findall(r"# Task (\d+\.\d+)", SKELETON_SOURCE)
    assert headers == TASKS


def test_every_region_only_raises_naming_its_task():
    bodies = region_bodies(SKELETON_SOURCE)
    assert [task for task, _ in bodies] == TASKS
    for task, statements in bodies:
        message = raised_message(statements)
        assert message is not None, f"Task {task}: region is not one raise"
        assert message.startswith(f"Task {task} not implemented yet: ")
        assert len(message) > len(f"Task {task} not implemented yet: ") + 10


def test_no_solution_line_in_the_skeleton():
    leaks = solution_lines(REFERENCE_SOURCE)
    assert len(leaks) >= 10  # guards against an empty, vacuous scan
    code_lines = {line.split("#")[0].strip()
                  for line in SKELETON_SOURCE.splitlines()}
    found = [(n, text) for n, text in leaks if text in code_lines]
    assert found == []
    assert not any(text in SKELETON_SOURCE for _, text in leaks)


def test_solution_lines_skip_trivia_and_given_code():
    source = textwrap.dedent('''\
        def given(x):
            y = compute_something(x)
            return y


        def task(x):
            # Task 9.1: do it. Hint: ~4 lines.
            # YOUR CODE STARTS HERE
            # a comment in the solution

            y = compute_something(x)
            z = torch.softmax(
                y / scale, dim=-1
            )  # [bs, seq]
            return z
            # YOUR CODE ENDS HERE
        ''')
    assert solution_lines(source) == [(12, "z = torch.softmax("),
                                      (13, "y / scale, dim=-1")]


PART_3 = textwrap.dedent('''\
    """A future reference with more classes and regions."""
    import torch


    def helper(x):
        # Task 0.1 (1 point): return "twice" x.
        # YOUR CODE STARTS HERE
        doubled = torch.cat([x, x], dim=-1)
        return doubled
        # YOUR CODE ENDS HERE


    class Block:
        def __init__(self, size):
            # Task 3.1 (2 points): store the size and build a layer norm
            # of that size, with learnable parameters as in the paper,
            # without bias: this line makes the hint long. Hint: ~2 lines.
            # YOUR CODE STARTS HERE
            self.size = size
            self.norm = torch.nn.LayerNorm(size, bias=False)
            # YOUR CODE ENDS HERE

        def forward(self, x, flag=False):
            # Task 3.2: normalise.
            # YOUR CODE STARTS HERE
            y = self.norm(x)
            # YOUR CODE ENDS HERE
            if flag:
                for _ in range(2):
                    # Task 3.3 (1 point): twice more.
                    # YOUR CODE STARTS HERE
                    y = self.norm(y) + torch.zeros_like(y)
                    # YOUR CODE ENDS HERE
            return y
    ''')


def test_generator_handles_more_classes_and_regions():
    skeleton = generate_skeleton(PART_3)
    assert style_errors(skeleton) == []
    bodies = region_bodies(skeleton)
    assert [task for task, _ in bodies] == ["0.1", "3.1", "3.2", "3.3"]
    messages = [raised_message(statements) for _, statements in bodies]
    assert messages == [
        'Task 0.1 not implemented yet: return "twice" x',
        "Task 3.1 not implemented yet: store the size and build a layer "
        "norm of that size, with learnable parameters as in the paper, "
        "without bias",
        "Task 3.2 not implemented yet: normalise",
        "Task 3.3 not implemented yet: twice more",
    ]
    assert not any(text in skeleton for _, text in solution_lines(PART_3))
    # Regenerating from a skeleton changes nothing.
    assert generate_skeleton(skeleton) == skeleton


@pytest.mark.parametrize("broken, error", [
    (PART_3.replace("        # YOUR CODE ENDS HERE\n", "", 1),
     "unbalanced markers"),
    (PART_3.replace("            # YOUR CODE ENDS HERE\n", "", 1)
     .replace("    # YOUR CODE STARTS HERE\n", "    # YOUR CODE ENDS HERE\n"
              "    # YOUR CODE STARTS HERE\n", 1),
     "without a matching"),
    (PART_3.replace("# Task 0.1 (1 point): return \"twice\" x.", "# do it"),
     "without a '# Task X.Y' header"),
])
def test_generator_refuses_broken_markup(broken: str, error: str):
    with pytest.raises(ValueError, match=error):
        generate_skeleton(broken)


def test_task_points_come_from_the_rubric():
    # The README's example: 2.2 from 1 to 2 points, changed in the rubric
    # only, reaches the skeleton students read.
    from kit.generate.skeleton import sync_points
    reference = REFERENCE.read_text()
    now, points = item_points("2.2"), other_points("2.2")
    assert f"# Task 2.2 ({points_words(now)})" in generate_skeleton(reference)
    changed = rubric_with("2.2", points)
    header = f"# Task 2.2 ({points_words(points)})"
    assert header in generate_skeleton(reference, changed)
    assert header in sync_points(reference, changed)
    # A task of several items adds them up; a bonus stays attached.
    halves = rubric_with("3.1c", item_points("3.1c") + 1)
    total = notebook_task_points("3.1", halves)
    assert total == notebook_task_points("3.1") + 1
    assert f"# Task 3.1 ({points_words(total)})" in \
        generate_skeleton(reference, halves)
    bonus = halves.tasks[0].bonuses[0].points
    assert f"# Task 1.2 ({points_words(item_points('1.2'))}, +{bonus:g} " \
        "bonus" in generate_skeleton(reference, halves)


def test_reference_headers_agree_with_the_rubric():
    from autograder.rubric import load_rubric
    from kit.generate.skeleton import sync_points
    reference = REFERENCE.read_text()
    assert sync_points(reference, load_rubric()) == reference, \
        "the reference's task headers disagree with rubric.toml: " \
        "run `make skeleton`"
