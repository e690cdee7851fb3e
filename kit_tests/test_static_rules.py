"""Rules read from the code itself: style, shape comments, the bonus and
the grader-access rule judge the parsed module (``ast`` and Python's own
tokenizer), wherever a class or function is defined, and cost the parent
time linear in the source. Each attack is checked against its control:
the same code without the trick."""
from __future__ import annotations

import time

import pytest

from autograder import homework
from autograder.checks.grader_access import access_issues, findings
from autograder.checks.shape_comments import check_shape_comments
from autograder.checks.shape_notation import notation_of
from autograder.checks.statements import count_statements
from autograder.checks.style import style_issues
from autograder.submission import regions
from kit import variants
from kit_tests.reference_source import FULL_REFERENCE, first_two_classes
from kit_tests.rubrics import live_task_methods

METHODS = live_task_methods()
TASKS = tuple(METHODS)
REFERENCE = first_two_classes(FULL_REFERENCE)
DIMS = {"batch_size": 2, "seq_len": 5, "input_size": 7, "hidden": 12}

# A class with a PEP 8 violation (E225) and a statement without its
# shape comment, between the markers.
CLASS = '''class A:
    def forward(self, x):
        # YOUR CODE STARTS HERE
        y=x + 1
        return y  # [bs, seq, hidden]
        # YOUR CODE ENDS HERE
'''
A_METHODS = {"A": ("forward",)}


def _indented(code: str) -> str:
    return "if True:\n" + "".join(
        f"    {line}" if line.strip() else line
        for line in code.splitlines(keepends=True))


def _shape_kinds(source: str, observed: dict) -> list[tuple[str, str]]:
    return [(i.cls, i.kind) for i in check_shape_comments(
        source, observed, DIMS, A_METHODS,
        notation=notation_of(homework.current()))]


# --------------------------------------------------------------------------
# Lines as Python counts them

# Characters str.splitlines() ends a line at and Python does not.
SEPARATORS = ["\x0c", "\x0b", "\x1c", "\x1d", "\x1e", "\x85", "\u2028",
              "\u2029"]


@pytest.mark.parametrize("separator", SEPARATORS,
                         ids=[f"U+{ord(c):04X}" for c in SEPARATORS])
def test_style_violations_stay_on_their_lines_after_line_separators(
        separator):
    bad = REFERENCE.replace("q, k, v = self.q(x)", "q, k, v=self.q(x)")
    trick = bad.replace('"""', '"""' + separator * 1000, 1)
    assert trick.count("\n") == bad.count("\n")
    control = style_issues(bad, "SelfAttention", METHODS)
    assert [i.code for i in control] == ["E225"]
    assert style_issues(trick, "SelfAttention", METHODS) == control


@pytest.mark.parametrize("separator", SEPARATORS,
                         ids=[f"U+{ord(c):04X}" for c in SEPARATORS])
def test_shape_comments_stay_on_their_lines_after_line_separators(
        separator):
    source = f'"""{separator * 1000}"""\n' + CLASS
    control = '"""doc"""\n' + CLASS
    observed = {5: [[[2, 5, 12]]], 6: [[[2, 5, 12]]]}
    assert _shape_kinds(control, observed) == [("A", "missing")]
    assert _shape_kinds(source, observed) == [("A", "missing")]


def test_python_lines_split_where_python_does():
    text = "a = 1\rb = '\x0c\u2028'\r\nc = 3\n"
    assert regions.python_lines(text) == ["a = 1", "b = '\x0c\u2028'",
                                          "c = 3"]
    assert "".join(regions.python_lines(text, keepends=True)) == text


# --------------------------------------------------------------------------
# Classes and functions wherever they are defined

@pytest.mark.parametrize("wrap", [lambda c: c, _indented,
                                  lambda c: "try:\n" + _indented(c)[9:]
                                  + "except ImportError:\n    pass\n"],
                         ids=["top level", "under if True", "under try"])
def test_a_class_is_judged_wherever_it_is_defined(wrap):
    source = wrap(CLASS)
    compile(source, "wrapped", "exec")
    line = next(i for i, text in enumerate(source.splitlines(), 1)
                if "y=x + 1" in text)
    observed = {line: [[[2, 5, 12]]], line + 1: [[[2, 5, 12]]]}
    (region,) = regions.graded_regions(source, methods=A_METHODS)
    assert (region.cls, region.function) == ("A", "forward")
    assert _shape_kinds(source, observed) == [("A", "missing")]
    assert [i.code for i in style_issues(source, "A", A_METHODS)] == \
        ["E225"]


def test_an_unmarked_method_under_if_true_is_checked_whole():
    source = _indented(CLASS.replace("        # YOUR CODE STARTS HERE\n",
                                     "").replace(
        "        # YOUR CODE ENDS HERE\n", ""))
    (region,) = regions.graded_regions(source, methods=A_METHODS)
    assert not region.marked and region.cls == "A"


ABOVE = CLASS.replace("        # YOUR CODE STARTS HERE\n        y=x + 1\n",
                      "        y=x + 1\n        # YOUR CODE STARTS HERE\n")


@pytest.mark.parametrize("source", [CLASS, ABOVE],
                         ids=["between the markers", "above the markers"])
def test_code_above_the_markers_is_judged_as_between_them(source):
    line = next(i for i, text in enumerate(source.splitlines(), 1)
                if "y=x + 1" in text)
    observed = {line: [[[2, 5, 12]]], 6: [[[2, 5, 12]]]}
    assert _shape_kinds(source, observed) == [("A", "missing")]
    assert [i.code for i in style_issues(source, "A", A_METHODS)] == \
        ["E225"]


def test_the_given_ending_outside_the_markers_needs_no_comment():
    # The skeleton's `return att, probs` after END hands on tensors the
    # code between the markers made; a tensor made there is judged.
    given = CLASS.replace("        return y  # [bs, seq, hidden]\n"
                          "        # YOUR CODE ENDS HERE\n",
                          "        # YOUR CODE ENDS HERE\n"
                          "        return y, y\n")
    made = given.replace("return y, y", "return y + 1")
    observed = {4: [[[2, 5, 12]]], 6: [[[2, 5, 12]]]}
    assert _shape_kinds(given, observed) == [("A", "missing")]   # line 4
    assert _shape_kinds(made, observed) == [("A", "missing")] * 2


# --------------------------------------------------------------------------
# The bonus counts what runs for forward

HELPER = '''

def _attend(module, x):
    """The attention of x."""
    q = module.q(x)
    k = module.k(x)
    v = module.v(x)
    scores = q @ k.transpose(1, 2)
    probs = torch.softmax(scores / q.shape[-1] ** 0.5, dim=-1)
    return probs @ v
'''
OWN = '''        q, k, v = self.q(x), self.k(x), self.v(x)  # [bs, seq, hidden]
        probs = torch.softmax(
            q @ k.transpose(1, 2) / q.shape[-1] ** 0.5, dim=-1
        )  # [bs, seq, seq]
        return probs @ v  # [bs, seq, hidden]
'''


def _with_helper(call: str) -> str:
    assert OWN in REFERENCE
    return REFERENCE.replace(OWN, f"        return {call}  # [bs, seq, "
                                  f"hidden]\n") + HELPER


@pytest.mark.parametrize("call", ["_attend(self, x)",
                                  "self._attend_method(x)",
                                  "SelfAttention._attend_method(self, x)",
                                  "super()._attend_method(x)"])
def test_a_one_statement_forward_counts_its_helpers(call):
    # The control: the reference's own three statements.
    assert count_statements(REFERENCE, "SelfAttention", "forward") == 3
    source = _with_helper(call)
    if "_attend_method" in call:
        base = "class _Base(nn.Module):\n    def _attend_method(self, x):" \
            "\n        return _attend(self, x)\n\n\n"
        source = source.replace("class SelfAttention(nn.Module):",
                                base + "class SelfAttention(_Base):")
    compile(source, "helper", "exec")
    counted = count_statements(source, "SelfAttention", "forward")
    assert counted >= 1 + 6
    assert count_statements(source, "SelfAttention", "forward",
                            helpers=False) == 1


def test_a_helper_called_by_no_name_counts_when_it_ran():
    source = _with_helper('getattr(__name__ and _attend, "__call__")'
                          '(self, x)')
    helper_line = next(i for i, text in enumerate(source.splitlines(), 1)
                       if text.startswith("def _attend"))
    # The control: nothing ran, nothing named: forward alone.
    assert count_statements(source, "SelfAttention", "forward") == 1
    assert count_statements(source, "SelfAttention", "forward",
                            ran={helper_line}) == 7


def test_a_recursive_helper_counts_once():
    source = REFERENCE.replace(OWN, "        return _loop(self, x)\n") + \
        "\n\ndef _loop(m, x):\n    return _loop(m, x) if x is None else x\n"
    assert count_statements(source, "SelfAttention", "forward") == 2


# --------------------------------------------------------------------------
# Code that reaches into the grader

REACHES = {
    "exec of a string at import": 'exec("def _h(x):\\n    return x\\n")',
    "eval": 'eval("1 + 1")',
    "compile": 'compile("x = 1", "<s>", "exec")',
    "__import__": '__import__("gc")',
    "import builtins": "import builtins",
    "from builtins": "from builtins import print as _p",
    "import gc": "import gc",
    "import inspect": "import inspect",
    "import ctypes": "import ctypes",
    "import importlib": "import importlib.util",
    "the grader's package": "from autograder.sandbox import worker",
    "the kit": "import kit.variants",
    "a relative import": "from . import sibling",
    "sys._getframe": "import sys\n_f = sys._getframe(0)",
    "from sys import _getframe": "from sys import _getframe",
    "sys.settrace": "import sys\nsys.settrace(None)",
    "sys.setprofile": "import sys\nsys.setprofile(None)",
    "sys.monitoring": "import sys\n_m = sys.monitoring",
    "sys.modules": "import sys\n_g = sys.modules",
    "threading.settrace": "import threading\nthreading.settrace(None)",
    "a frame's globals": "_g = (lambda: 0).__globals__",
    "f_back through getattr": '_b = getattr(None, "f_back", None)',
    "__builtins__": "_b = __builtins__",
    "__subclasses__": "_s = object.__subclasses__()",
    "a builtin's module": "_b = print.__self__",
    "globals()": "_g = globals()",
}
# The controls: what correct solutions use, and the same words as data.
FINE = {
    "torch.compile": "_c = torch.compile",
    "self.eval()": "_e = nn.Module().eval()",
    "imports of solutions": "import math\nimport typing\nimport functools\n"
                            "import dataclasses\nimport itertools\n"
                            "from collections import OrderedDict",
    "a word in a comment": "# exec, eval, builtins, sys._getframe",
    "a word in a string": '_s = "exec eval builtins gc f_back"',
    "sys for other things": "import sys\n_v = sys.version_info",
    "an attribute named like a module": "_g = nn.Module().training",
}


@pytest.mark.parametrize("name", REACHES)
def test_code_that_reaches_into_the_grader_costs_every_task(name):
    source = REFERENCE + "\n" + REACHES[name] + "\n"
    line = REFERENCE.count("\n") + 2 + REACHES[name].count("\n")
    found = findings(source)
    assert found and found[-1].line == line, found
    for cls in TASKS:
        assert access_issues(source, cls, TASKS), cls
    # The control: the reference.
    assert findings(REFERENCE) == ()


@pytest.mark.parametrize("name", FINE)
def test_what_solutions_use_does_not_reach_into_the_grader(name):
    assert findings(REFERENCE + "\n" + FINE[name] + "\n") == ()


def test_reaching_inside_a_class_costs_that_task_only():
    inside = REFERENCE.replace(
        OWN, "        __import__('gc')\n" + OWN)
    (finding,) = access_issues(inside, "SelfAttention", TASKS)
    assert "__import__" in finding.message
    assert access_issues(inside, "MultiHeadSelfAttention", TASKS) == []


def test_no_entry_of_the_catalogue_but_hostile_ones_reaches_in():
    flagged = []
    for key, variant in variants.load_all().items():
        if key.split("/")[0] in ("integrity", "fidelity", "hostile",
                                 "examples"):
            continue
        try:
            if findings(variant.source()):
                flagged.append(key)
        except SyntaxError:
            continue
    assert flagged == []


# --------------------------------------------------------------------------
# The parent's own time

def _static_seconds(returns: int) -> float:
    """CPU seconds of every static check of the rubric on the reference
    with ``returns`` unreachable ``return x`` after forward's return."""
    from autograder.config import load_config
    from autograder.grade import grade_source
    from autograder.sandbox.protocol import ProbeResult

    marker = "        return probs @ v  # [bs, seq, hidden]\n"
    source = FULL_REFERENCE.replace(marker, marker + "        return x\n"
                                    * returns, 1)
    config = load_config()

    def runner(text, filename, probes):
        return [ProbeResult(p.id, "ok") for p in probes]

    best = float("inf")
    for _ in range(2):
        start = time.process_time()
        grade = grade_source(source + "\n" * _, "m.py", config, runner)
        best = min(best, time.process_time() - start)
        assert not grade.internal_error, grade.internal_error
    return best


def test_static_checks_are_linear_in_unreachable_returns():
    small, large = _static_seconds(1500), _static_seconds(6000)
    # Four times the code: linear costs about 4x; the quadratic statement
    # text once cost 16x.
    assert large < 8 * small + 0.2, (small, large)


def test_staff_see_what_the_code_reached_for():
    from autograder.checks.base import Context
    from autograder.checks.source import GraderAccess
    from autograder.rubric import load_rubric
    from autograder.staff.class_report import deduction_patterns

    rubric = load_rubric()
    task = rubric.tasks[0]
    (check,) = [d for d in task.deductions if d.kind == "grader_access"]
    outputs = {}
    for name, source in (("control", FULL_REFERENCE),
                         ("trick", FULL_REFERENCE + "\nimport gc\n")):
        ctx = Context({}, source=source, task_methods=METHODS)
        outcome = GraderAccess().evaluate(check, task, [], {}, ctx)
        assert outcome.passed == (name == "control")
        assert outcome.points == (0 if name == "control" else check.points)
        outputs[name] = "\n".join(outcome.lines)
    assert deduction_patterns(list(outputs.items())) == [
        ("other", ["control"]),
        ("reaches into the grader: `import gc`", ["trick"])]
