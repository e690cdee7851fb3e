"""Static checks on a submission's source text.

Pure functions of the source (and, for shape comments, of the shapes a
traced run observed). They run in the grading parent: they parse student
code with ``ast``/``tokenize``/``pycodestyle`` and never import or execute
it.
"""
from autograder.checks.shape_comments import (ShapeIssue, VOCABULARY,
                                              check_shape_comments,
                                              statement_text)
from autograder.checks.statements import count_statements
from autograder.checks.style import StyleIssue, style_issues

__all__ = [
    "ShapeIssue", "StyleIssue", "VOCABULARY", "check_shape_comments",
    "count_statements", "statement_text", "style_issues",
]
