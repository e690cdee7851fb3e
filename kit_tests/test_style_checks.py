"""pycodestyle violations are attributed to the class they occur in."""
from __future__ import annotations

import pytest

from autograder import homework
from autograder.checks.style import StyleIssue, style_issues
from kit_tests.reference_source import FULL_REFERENCE, first_two_classes
from kit_tests.rubrics import live_task_methods

REFERENCE = first_two_classes(FULL_REFERENCE)
CLASSES = ("SelfAttention", "MultiHeadSelfAttention")
METHODS = live_task_methods()


def line_of(source: str, text: str) -> int:
    """1-based number of the only line containing ``text``."""
    found = [i for i, line in enumerate(source.splitlines(), 1)
             if text in line]
    assert len(found) == 1, (text, found)
    return found[0]


@pytest.mark.parametrize("cls", CLASSES + ("",))
def test_reference_is_clean(cls):
    assert style_issues(REFERENCE, cls, METHODS) == []


# (class, the reference text, its replacement, expected code)
INJECTED = [
    ("SelfAttention", "q, k, v = self.q(x), self.k(x), self.v(x)",
     "q,k, v = self.q(x), self.k(x), self.v(x)", "E231"),
    ("SelfAttention", "return probs @ v  # [bs, seq, hidden]",
     "return probs @ v # [bs, seq, hidden]", "E261"),
    ("MultiHeadSelfAttention", "att = self.mix(att)  # [bs, seq, hidden]",
     "att = self.mix(att)  # [bs, seq, hidden]" + " " * 40 + "x", "E501"),
    ("MultiHeadSelfAttention", "split = (bs, seq,",
     "split = ( bs, seq,", "E201"),
    ("MultiHeadSelfAttention", "self.causal = causal",
     "self.causal=causal", "E225"),
]


@pytest.mark.parametrize("cls, old, new, code", INJECTED)
def test_injected_violation_goes_to_its_class_only(cls, old, new, code):
    assert old in REFERENCE
    source = REFERENCE.replace(old, new)
    line = line_of(source, new)
    found = style_issues(source, cls, METHODS)
    assert [(i.line, i.code) for i in found] == [(line, code)]
    for other in CLASSES + ("",):
        if other != cls:
            assert style_issues(source, other, METHODS) == []


def test_message_format():
    old = "att = self.mix(att)  # [bs, seq, hidden]"
    new = old + " " * (84 - 8 - len(old) - 1) + "x"   # 84 with indent
    source = REFERENCE.replace(old, new)
    line = line_of(source, "att = self.mix(att)")
    (issue,) = style_issues(source, "MultiHeadSelfAttention", METHODS)
    assert issue == StyleIssue(line, 80, "E501",
                               "line too long (84 > 79 characters)")
    assert issue.message == \
        f"line {line}:80 E501 line too long (84 > 79 characters)"


def test_decorator_lines_belong_to_the_class():
    source = REFERENCE.replace("class SelfAttention(nn.Module):",
                               "@staticmethod( )\nclass SelfAttention("
                               "nn.Module):")
    found = style_issues(source, "SelfAttention", METHODS)
    assert [(i.line, i.code) for i in found] == \
        [(line_of(source, "@staticmethod( )"), "E201")]
    assert style_issues(source, "", METHODS) == []


@pytest.mark.parametrize("ending, code", [("\n\n", "W391"), ("", "W292")])
def test_file_level_issues_belong_to_no_class(ending, code):
    source = REFERENCE.rstrip("\n") + ending
    for cls in CLASSES:
        assert style_issues(source, cls, METHODS) == []
    assert [i.code for i in style_issues(source, "", METHODS)] == [code]


def test_module_level_issue_outside_classes():
    source = REFERENCE.replace("import torch.nn as nn",
                               "import torch.nn as nn;")
    assert [i.code for i in style_issues(source, "", METHODS)] == ["E703"]
    for cls in CLASSES:
        assert style_issues(source, cls, METHODS) == []


def test_unparsable_source_gives_nothing():
    assert style_issues("class A:\n    def f(:\n", "A", METHODS) == []


@pytest.mark.parametrize("mark", ["# noqa", "# noqa: E501", "# NOQA",
                                  "# nopep8"])
def test_noqa_does_not_silence_the_check(mark):
    # pycodestyle honours "# noqa" for some checks (E501 among them); the
    # grader's rule has no such switch.
    source = REFERENCE.replace("self.causal = causal",
                               f"self.causal = causal  {mark}" + " " * 60 +
                               "x")
    line = line_of(source, "self.causal = causal")
    assert [(i.line, i.code) for i in
            style_issues(source, "MultiHeadSelfAttention", METHODS)] == \
        [(line, "E501")]


# -- the rule's options are rubric parameters ------------------------------

def _pycodestyle_outcome(source: str, cls: str, **params):
    """The pycodestyle deduction of ``cls``'s task, from a copy of the
    live rubric with ``params`` set on it, applied to ``source``."""
    import tomllib

    from autograder.checks.base import Context
    from autograder.rubric import kind, parse_rubric
    data = tomllib.loads(homework.current().rubric.read_text())
    (task,) = [t for t in data["task"] if t["class"] == cls]
    (entry,) = [d for d in task["deduction"] if d["kind"] == "pycodestyle"]
    entry.update(params)
    rubric = parse_rubric(data, "temp.toml")
    (parsed,) = [t for t in rubric.tasks if t.cls == cls]
    (check,) = [d for d in parsed.deductions if d.kind == "pycodestyle"]
    ctx = Context(mistake_messages={}, source=source, task_methods=METHODS)
    return kind(check).impl.evaluate(check, parsed, [], {}, ctx)


LONG = ("att = self.mix(att)  # [bs, seq, hidden]",
        "att = self.mix(att)  # [bs, seq, hidden]" + " " * 40 + "x")


def test_ignore_e501_in_the_rubric_stops_the_deduction():
    source = REFERENCE.replace(*LONG)
    charged = _pycodestyle_outcome(source, "MultiHeadSelfAttention")
    assert charged.points > 0 and "E501" in "\n".join(charged.lines)
    spared = _pycodestyle_outcome(source, "MultiHeadSelfAttention",
                                  ignore=["E501"])
    assert spared.points == 0, spared.lines


def test_max_line_length_in_the_rubric_moves_the_limit():
    source = REFERENCE.replace(*LONG)
    longest = max(len(line) for line in source.splitlines())
    assert _pycodestyle_outcome(source, "MultiHeadSelfAttention",
                                max_line_length=longest).points == 0
    assert _pycodestyle_outcome(source, "MultiHeadSelfAttention",
                                max_line_length=longest - 1).points > 0


def test_ignored_codes_add_to_pycodestyles_default_list():
    # E226 is in pycodestyle's default list: still ignored with E501 added
    source = REFERENCE.replace(*LONG).replace("att = self.mix(att)  #",
                                              "att = self.mix(att*1)  #")
    assert _pycodestyle_outcome(source, "MultiHeadSelfAttention",
                                ignore=["E501"]).points == 0


def test_a_base_class_of_the_file_is_its_subclass_s_code():
    # The constructor moved into a base: its
    # violations are the task class's, and the base's own base's too.
    source = REFERENCE.replace(
        "class SelfAttention(nn.Module):",
        "class _Root(nn.Module):\n    x=1\n\n\n"
        "class _Base(_Root):\n    y=2\n\n\n"
        "class SelfAttention(_Base):")
    found = style_issues(source, "SelfAttention", METHODS)
    assert [(i.line, i.code) for i in found] == [
        (line_of(source, "x=1"), "E225"), (line_of(source, "y=2"), "E225")]
    assert style_issues(source, "MultiHeadSelfAttention", METHODS) == []
    # A base the file does not define (nn.Module) adds nothing.
    assert style_issues(REFERENCE, "SelfAttention", METHODS) == []
    # A task class as the base: its lines stay its own task's only.
    derived = REFERENCE.replace(
        "class MultiHeadSelfAttention(nn.Module):",
        "class MultiHeadSelfAttention(SelfAttention):").replace(
        "q, k, v = self.q(x), self.k(x), self.v(x)",
        "q,k, v = self.q(x), self.k(x), self.v(x)")
    assert style_issues(derived, "MultiHeadSelfAttention", METHODS) == []
    assert len(style_issues(derived, "SelfAttention", METHODS)) == 1
