"""Which code the grader checks: marked regions, and whole task methods
whose markers are missing."""
from __future__ import annotations

from autograder import homework
from autograder.submission.regions import (find_regions, graded_regions, nodes,
                                           owner_of_line, student_statements)
from kit_tests.reference_source import FULL_REFERENCE
from kit_tests.rubrics import live_task_methods

METHODS = live_task_methods()


def test_task_methods_are_the_skeletons_regions():
    found: dict[str, set[str]] = {}
    for region in find_regions(FULL_REFERENCE):
        owner = region.cls or region.function
        found.setdefault(owner, set()).add(
            region.function if region.cls else "")
    assert found == {k: set(v) for k, v in METHODS.items()}, \
        "a task's `methods` in autograder/rubric.toml differ from the " \
        "skeleton's marked regions"


def test_marked_source_has_no_unmarked_region():
    # Besides the marked regions, only the lines of the task methods
    # outside their markers (judged as if between them).
    found = graded_regions(FULL_REFERENCE, methods=METHODS)
    assert [r for r in found if not r.outside] == \
        find_regions(FULL_REFERENCE)
    assert all(not r.marked and not r.helper for r in found if r.outside)
    assert {(r.cls, r.function) for r in found if r.outside} <= \
        {(r.cls, r.function) for r in find_regions(FULL_REFERENCE)}


def test_method_without_markers_is_graded_whole():
    source = FULL_REFERENCE.replace(
        "        # YOUR CODE STARTS HERE\n        q, k, v = self.q(x)",
        "        q, k, v = self.q(x)", 1)
    source = source.replace("        return probs @ v  # [bs, seq, hidden]\n"
                            "        # YOUR CODE ENDS HERE\n",
                            "        return probs @ v  # [bs, seq, hidden]\n",
                            1)
    lines = source.splitlines()
    unmarked = [r for r in graded_regions(source, methods=METHODS)
                if not r.marked and not r.outside]
    assert [(r.cls, r.function, r.task) for r in unmarked] == [
        ("SelfAttention", "forward", "1.2")]
    region = unmarked[0]
    # From the first statement after the docstring to the method's end.
    assert lines[region.start - 1].strip().startswith("q, k, v = ")
    assert lines[region.end - 1].strip() == \
        "return probs @ v  # [bs, seq, hidden]"


def test_many_markers_are_all_regions():
    # Hostile: thousands of START markers without END (was quadratic).
    body = "".join(f"        # YOUR CODE STARTS HERE\n        y{i} = x\n"
                   for i in range(3000))
    source = ("class SelfAttention:\n    def forward(self, x):\n" + body +
              "        return x\n")
    import ast
    tree = ast.parse(source)
    regions = graded_regions(source, tree, methods=METHODS)
    assert len(regions) == 3000
    assert len(student_statements(tree, regions)) == 3001


def test_owner_of_line():
    line = next(i for i, text in enumerate(FULL_REFERENCE.splitlines(), 1)
                if "mask_bool = self.mask.bool()" in text)
    assert owner_of_line(FULL_REFERENCE, line) == "CausalAttention"
    assert owner_of_line(FULL_REFERENCE, 1) == ""
    assert owner_of_line("def (:", 1) == ""


def test_task_methods_must_be_a_list_of_names():
    import tomllib

    import pytest

    from autograder.rubric import RubricError, parse_rubric
    data = tomllib.loads(homework.current().rubric.read_text())
    data["task"][1]["methods"] = "forward"
    with pytest.raises(RubricError, match="methods must be a list"):
        parse_rubric(data)
    data["task"][1]["methods"] = ["forward", "merge_heads"]
    assert parse_rubric(data).tasks[1].methods == ("forward", "merge_heads")


def test_code_the_task_calls_is_graded_with_it():
    # Moving code into a helper (a method no rubric lists, a module-level
    # function, and what they call in turn) must not take it out of the
    # deductions; code nothing calls, and another task's function, stay
    # out. A helper belongs to the first task whose code calls it.
    source = '''
def _inner(t):
    return t * 2


def _outer(t):
    return _inner(t) + 1


def _unused(t):
    return t


class A:
    def forward(self, x):
        # YOUR CODE STARTS HERE
        y = self.helper(x)
        return _outer(y)
        # YOUR CODE ENDS HERE

    def helper(self, x):
        return x + 1

    def given(self, x):
        return x


class B:
    def forward(self, x):
        # YOUR CODE STARTS HERE
        return _outer(x)
        # YOUR CODE ENDS HERE
'''
    found = graded_regions(source, methods={"A": ("forward",),
                                            "B": ("forward",)})
    helpers = {(r.cls, r.function) for r in found if r.helper}
    assert helpers == {("A", "helper"), ("A", "_outer"), ("A", "_inner")}
    assert all(not r.marked for r in found if r.helper)


def test_nodes_of_a_source_that_does_not_parse_are_none():
    assert any(getattr(n, "id", None) == "x" for n in nodes("x = 1\n"))
    assert list(nodes("def broken(:\n")) == []
    assert list(nodes("x = (" * 300 + ")" * 300)) == []
