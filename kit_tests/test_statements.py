"""Statement counts for the "at most three statements" bonus."""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from autograder.checks.statements import count_statements

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = (ROOT / "solutions/transformer_lm/modeling_attention.py"
             ).read_text()


def forward(body: str, docstring: bool = False) -> str:
    """A class ``A`` whose ``forward`` has ``body``."""
    doc = '"""Attend.\n\nMore text.\n"""\n' if docstring else ""
    return "class A:\n    def forward(self, x):\n" + textwrap.indent(
        doc + textwrap.dedent(body), "        ")


def test_reference_self_attention_forward_has_three():
    assert count_statements(REFERENCE, "SelfAttention", "forward") == 3


def test_reference_multi_head_forward():
    # bs/seq, 5 statements of 2.1, if + 2 statements, 5 of 2.3,
    # if + return, the final return.
    assert count_statements(REFERENCE, "MultiHeadSelfAttention",
                            "forward") == 1 + 5 + 3 + 5 + 2 + 1


@pytest.mark.parametrize("body, expected", [
    ("return x\n", 1),
    ("y = f(\n    x,\n    x,\n)\nreturn y\n", 2),
    ("if x:\n    a = 1\n    b = 2\n", 3),
    ("if x:\n    a = 1\nelse:\n    a = 2\n", 3),
    ("for i in x:\n    if i:\n        continue\n", 3),
    ("try:\n    a = 1\nexcept ValueError:\n    a = 2\n", 3),
    ("def g():\n    return 1\nreturn g()\n", 3),
    ("a = 1; b = 2\n", 2),
])
def test_counts(body, expected):
    assert count_statements(forward(body), "A", "forward") == expected


def test_docstring_does_not_count():
    assert count_statements(forward("return x\n", docstring=True), "A",
                            "forward") == 1


def test_only_the_first_string_is_the_docstring():
    source = forward('"""not first"""\nreturn x\n', docstring=True)
    assert count_statements(source, "A", "forward") == 2


def test_missing_method_or_class_or_syntax_error():
    assert count_statements(REFERENCE, "SelfAttention", "backward") is None
    assert count_statements(REFERENCE, "Attention", "forward") is None
    assert count_statements("class A:\n    def forward(:\n", "A",
                            "forward") is None
