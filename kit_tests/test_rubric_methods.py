"""Grading with another rubric (``autograder grade --rubric OTHER.toml``)
reads that rubric's task ``methods``, in the parent and in the worker that
traces the shapes: a method it says the student writes, left without
markers, is checked whole for shape comments. The grading config is the
only rubric read: no function below the command reads the default one."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from autograder import homework
from autograder.config import load_config
from autograder.grade import grade_source
from autograder.local import in_process_runner
from autograder.rubric import RubricError, load_rubric
from kit.variants import apply_edits

REFERENCE = homework.staff().reference


def _merging(comment: str) -> list[list[str]]:
    """MultiHeadSelfAttention with a helper method ``merge`` (no markers)
    that the other rubric says the student writes."""
    return [
        ["        att = att.transpose(1, 2).reshape(bs, seq, -1)"
         "  # [bs, seq, hidden]\n",
         "        att = self.merge(att)  # [bs, seq, hidden]\n"],
        ["        if return_attention:\n            return att, probs\n"
         "        return att\n",
         "        if return_attention:\n            return att, probs\n"
         "        return att\n\n"
         "    def merge(self, att):\n"
         "        \"\"\"The heads of ``att`` side by side.\"\"\"\n"
         "        bs, _, seq, _ = att.shape\n"
         f"        out = att.transpose(1, 2).reshape(bs, seq, -1){comment}\n"
         f"        return out{comment}\n"]]


def _other_rubric(folder: Path) -> Path:
    """The live rubric, whose MultiHeadSelfAttention task says the student
    also writes ``merge``."""
    anchor = 'class = "MultiHeadSelfAttention"\n'
    text = homework.current().rubric.read_text()
    assert text.count(anchor) == 1
    other = folder / "other.toml"
    other.write_text(text.replace(
        anchor, anchor + 'methods = ["forward", "merge"]\n'))
    return other


def test_another_rubrics_methods_are_checked_whole(tmp_path):
    config = load_config(_other_rubric(tmp_path))
    reference = REFERENCE.read_text()
    sources = {name: apply_edits(reference, _merging(comment), name)
               for name, comment in (("commented", "  # [bs, seq, hidden]"),
                                     ("uncommented", ""))}
    shapes = {}
    for name, source in sources.items():
        # The worker's own code, in this process: what it traces comes
        # from the probes, with or without a jail around it.
        grade = grade_source(source, f"{name}.py", config,
                             in_process_runner)
        task = next(t for t in grade.tasks
                    if t.task.id == "multi_head_self_attention")
        assert all(i.outcome.passed for i in task.items), name
        shapes[name] = next(d for d in task.deductions
                            if d.check.id == "2.shapes").outcome
    # The parent reads merge whole, and says so ...
    assert shapes["commented"].passed, shapes["commented"].lines
    assert any("markers in MultiHeadSelfAttention.merge" in line
               for line in shapes["commented"].lines)
    # ... and the worker traced it: the tensor bound there needs a comment.
    assert not shapes["uncommented"].passed
    assert any("has no shape comment" in line
               for line in shapes["uncommented"].lines), \
        shapes["uncommented"].lines


def test_grading_reads_no_rubric_but_the_configs(tmp_path, monkeypatch):
    # Built once by the command, the config is all grading reads: with the
    # default rubric gone, a submission is graded by the other rubric, and
    # the method it adds is judged for its shape comments and its PEP 8.
    from autograder.local import in_process_runner
    config = load_config(_other_rubric(tmp_path))
    task = next(t for t in config.rubric.tasks
                if t.id == "multi_head_self_attention")
    config = replace(config, rubric=replace(config.rubric, tasks=(task,)))
    gone = replace(homework.current(), rubric=tmp_path / "gone.toml")
    monkeypatch.setattr(homework, "current", lambda: gone)
    with pytest.raises(RubricError):
        load_rubric()
    source = apply_edits(REFERENCE.read_text(), _merging(""), "uncommented")
    source = source.replace("        bs, _, seq, _ = att.shape\n",
                            "        bs, _, seq, _ = att.shape;\n", 1)
    line = source.splitlines().index("        bs, _, seq, _ = att.shape;") + 1
    merged = line + 1     # the merge's uncommented tensor
    grade = grade_source(source, "merging.py", config, in_process_runner)
    assert not grade.internal_error, grade.internal_error
    [graded] = grade.tasks
    assert all(i.outcome.passed for i in graded.items), \
        [i.outcome.lines for i in graded.items]
    outcome = {d.check.kind: d.outcome for d in graded.deductions}
    assert not outcome["shape_comments"].passed
    assert any(f"line {merged}:" in text and "has no shape comment" in text
               for text in outcome["shape_comments"].lines), \
        outcome["shape_comments"].lines
    assert not outcome["pycodestyle"].passed
    assert any(f"line {line}:" in text and "E703" in text
               for text in outcome["pycodestyle"].lines), \
        outcome["pycodestyle"].lines
