"""Grading with another rubric (``autograder grade --rubric OTHER.toml``)
reads that rubric's task ``methods``, in the parent and in the worker that
traces the shapes: a method it says the student writes, left without
markers, is checked whole for shape comments."""
from __future__ import annotations

from autograder.grade import grade_source, sandbox_runner
from autograder.rubric import DEFAULT_RUBRIC, load_rubric
from autograder.values import load_cases
from kit.variants import REFERENCE, apply_edits


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


def test_another_rubrics_methods_are_checked_whole(tmp_path):
    anchor = 'class = "MultiHeadSelfAttention"\n'
    text = DEFAULT_RUBRIC.read_text()
    assert text.count(anchor) == 1
    other = tmp_path / "other.toml"
    other.write_text(text.replace(
        anchor, anchor + 'methods = ["forward", "merge"]\n'))
    reference = REFERENCE.read_text()
    sources = {name: apply_edits(reference, _merging(comment), name)
               for name, comment in (("commented", "  # [bs, seq, hidden]"),
                                     ("uncommented", ""))}
    from autograder.sandbox.pool import Sandbox
    shapes = {}
    with Sandbox() as sandbox:
        for name, source in sources.items():
            grade = grade_source(source, f"{name}.py", load_rubric(other),
                                 load_cases(), sandbox_runner(sandbox))
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
