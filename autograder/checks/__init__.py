"""Every check kind, one module per family, and what they share.

- ``entries``: the rubric's entries a kind reads (``Check``, ``Task``,
  ``Outcome``) and the cases a filter selects;
- ``registry``: ``register``, the decorator that names a kind for
  ``rubric.toml`` with its parameters dataclass; ``kinds`` imports every
  module that registers one (a new kind: its module, added there);
- ``base``: the context, a case's verdict, ``CaseCheck`` and ``aggregate``,
  and ``CheckKind``, the protocol every kind follows;
- ``outputs``: what a probed call returned (``returned_tensors``) and
  the catalogue mistake a wrong answer equals (``diagnose``), for every
  kind that reads a call's output;
- ``values``: the value kinds (``module_output``, ``linear_attributes``)
  and the module's second call (``Probe.again``);
- kinds only one homework uses live with it, beside the evidence they
  share (the attention homework's ``kinds/``: ``concatenated_heads``,
  ``module_size``, ``attention_probs``, ``causal_property``,
  ``dropout_train``, ``dropout_on_weights``, and ``projections``,
  ``attention_weights``, ``dropout_replay``), one package registered by
  ``kinds.register_homework_kinds``;
- ``source``: the kinds that judge the source text (``pycodestyle``,
  ``grader_access``, ``shape_comments``, ``statement_count``), on the
  static checks below;
- ``compare``: tensor comparison; ``style``, ``grader_access``,
  ``shape_comments``, ``statements``, ``shape_notation``,
  ``trace_integrity``: static checks,
  pure functions of the source (and, for shape comments, of the shapes a
  traced run observed) that parse student code with
  ``ast``/``tokenize``/``pycodestyle`` and never import or execute it.

Kinds judge in the grading parent. No module here imports
``autograder.rubric``: the rubric imports the registry.
"""
from autograder.checks.shape_comments import (ShapeIssue,
                                              check_shape_comments,
                                              statement_text)
from autograder.checks.statements import count_statements
from autograder.checks.style import StyleIssue, style_issues

__all__ = [
    "ShapeIssue", "StyleIssue", "check_shape_comments",
    "count_statements", "statement_text", "style_issues",
]
