"""The grader on Part 3 submissions derived from the live reference.

Each entry replaces one region of the reference (a correct alternative
style) or one line (a common mistake), so the corpus follows the reference
as it evolves. Correct styles must earn full marks; each mistake must cost
its own item only (no cascade into the tasks that build on it) and be
explained.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from autograder import report
from autograder.grade import GradeResult, grade_source, sandbox_runner
from autograder.rubric import load_rubric
from autograder.values import load_cases
from kit.examples import apply_edits

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = (ROOT / "solutions" / "transformer_lm" /
             "modeling_attention.py").read_text()
PART3 = ("causal_attention", "multi_head_wrapper", "multi_head_attention",
         "gpt2_small_attention")
IMPORTS = ("import torch\nimport torch.nn as nn\n",
           "import math\n\nimport torch\nimport torch.nn as nn\n"
           "import torch.nn.functional as F\n")


def with_region(owner: str, body: str) -> str:
    """The reference with the first region of class/function ``owner``
    replaced by ``body`` (and math / F imported for the styles)."""
    source = REFERENCE.replace(*IMPORTS, 1)
    start = source.index(f"\nclass {owner}(") if f"\nclass {owner}(" in \
        source else source.index(f"\ndef {owner}(")
    marker = "# YOUR CODE STARTS HERE\n"
    a = source.index(marker, start) + len(marker)
    b = source.rindex("\n", 0, source.index("# YOUR CODE ENDS HERE", a)) + 1
    return source[:a] + body + source[b:]


def with_change(old: str, new: str) -> str:
    """The reference with one exact snippet (found once) replaced."""
    return apply_edits(REFERENCE, [(old, new)], "test_grading_part3")


STYLES = {
    "ca_einsum_tril": ("CausalAttention", '''\
        queries = self.W_query(x)  # [b, num_tokens, d_out]
        keys = self.W_key(x)  # [b, num_tokens, d_out]
        values = self.W_value(x)  # [b, num_tokens, d_out]
        scores = torch.einsum("bqd,bkd->bqk", queries, keys)
        # [b, num_tokens, num_tokens]
        keep = torch.ones(num_tokens, num_tokens, dtype=torch.bool).tril()
        # [num_tokens, num_tokens]
        scores = scores.masked_fill(~keep, float("-inf"))
        # [b, num_tokens, num_tokens]
        weights = F.softmax(scores * keys.size(-1) ** -0.5, dim=2)
        # [b, num_tokens, num_tokens]
        return self.dropout(weights) @ values  # [b, num_tokens, d_out]
'''),
    "wrapper_loop": ("MultiHeadAttentionWrapper", '''\
        outputs = []
        for head in self.heads:
            outputs.append(head(x))
        return torch.cat(outputs, dim=2)  # [b, num_tokens, num_heads * d_out]
'''),
    "mha_flat_heads": ("MultiHeadAttention", '''\
        nh, hd = self.num_heads, self.head_dim
        q = self.W_query(x).view(b, num_tokens, nh, hd).transpose(1, 2)
        # [b, nh, num_tokens, hd]
        q = q.reshape(b * nh, num_tokens, hd)  # [b * nh, num_tokens, hd]
        k = self.W_key(x).view(b, num_tokens, nh, hd).transpose(1, 2)
        # [b, nh, num_tokens, hd]
        k = k.reshape(b * nh, num_tokens, hd)  # [b * nh, num_tokens, hd]
        v = self.W_value(x).view(b, num_tokens, nh, hd).transpose(1, 2)
        # [b, nh, num_tokens, hd]
        v = v.reshape(b * nh, num_tokens, hd)  # [b * nh, num_tokens, hd]
        scores = torch.bmm(q, k.transpose(1, 2)) / math.sqrt(hd)
        # [b * nh, num_tokens, num_tokens]
        hide = self.mask[:num_tokens, :num_tokens] == 1
        # [num_tokens, num_tokens]
        scores = scores.masked_fill(hide, -1e9)
        # [b * nh, num_tokens, num_tokens]
        weights = self.dropout(scores.softmax(-1))
        # [b * nh, num_tokens, num_tokens]
        context = torch.bmm(weights, v)  # [b * nh, num_tokens, hd]
        context = context.view(b, nh, num_tokens, hd).transpose(1, 2)
        # [b, num_tokens, nh, hd]
        context = context.reshape(b, num_tokens, self.d_out)
        # [b, num_tokens, d_out]
        return self.out_proj(context)  # [b, num_tokens, d_out]
'''),
    "mha_sdpa": ("MultiHeadAttention", '''\
        split = (b, num_tokens, self.num_heads, self.head_dim)
        q = self.W_query(x).view(split).transpose(1, 2)
        # [b, num_heads, num_tokens, head_dim]
        k = self.W_key(x).view(split).transpose(1, 2)
        # [b, num_heads, num_tokens, head_dim]
        v = self.W_value(x).view(split).transpose(1, 2)
        # [b, num_heads, num_tokens, head_dim]
        p = self.dropout.p if self.training else 0.0
        context = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                 dropout_p=p)
        # [b, num_heads, num_tokens, head_dim]
        context = context.transpose(1, 2).reshape(b, num_tokens, -1)
        # [b, num_tokens, d_out]
        return self.out_proj(context)  # [b, num_tokens, d_out]
'''),
}

# name -> (source, Part 3 scores by task, text the feedback must contain)
MISTAKES = {
    "ca_dropout_on_output": (with_change(
        "        attn_weights = self.dropout(attn_weights)\n"
        "        # [b, num_tokens, num_tokens]\n"
        "        context_vec = attn_weights @ values  "
        "# [b, num_tokens, d_out]",
        "        context_vec = self.dropout(attn_weights @ values)\n"
        "        # [b, num_tokens, d_out]"),
        (1.5, 1, 2, 1), "not to the attention weights"),
    "ca_no_mask": (with_change(
        "        attn_scores = attn_scores.masked_fill(mask_bool, "
        "-torch.inf)\n"
        "        # [b, num_tokens, num_tokens]\n", ""),
        # The wrapper still earns its point: it concatenates its own heads.
        (0.5, 1, 2, 1), "earlier tokens can see the future"),
    "wrapper_cat_dim0": (with_change(
        "torch.cat([head(x) for head in self.heads], dim=-1)",
        "torch.cat([head(x) for head in self.heads], dim=0)"),
        (2, 0, 2, 1), "along the last dimension"),
    "mha_no_out_proj": (with_change(
        "        return self.out_proj(context_vec)  # [b, num_tokens, d_out]",
        "        return context_vec  # [b, num_tokens, d_out]"),
        (2, 1, 1, 1), "fused_no_out_proj"),
    "gpt2_no_qkv_bias": (with_change(
        "MultiHeadAttention(768, 768, 1024, 0.1, 12, qkv_bias=True)",
        "MultiHeadAttention(768, 768, 1024, 0.1, 12)"),
        (2, 1, 2, 0), "expected 2,362,368"),
}


@pytest.fixture(scope="module")
def graded() -> dict[str, GradeResult]:
    """Every entry graded once, with one shared warm sandbox."""
    from autograder.sandbox import Sandbox
    rubric, cases = load_rubric(), load_cases()
    sources = {"reference": REFERENCE,
               **{n: with_region(*spec) for n, spec in STYLES.items()},
               **{n: spec[0] for n, spec in MISTAKES.items()}}
    with Sandbox() as sandbox:
        runner = sandbox_runner(sandbox)

        def one(item: tuple[str, str]) -> tuple[str, GradeResult]:
            name, source = item
            return name, grade_source(source, f"{name}.py", rubric, cases,
                                      runner, name=name)

        with ThreadPoolExecutor(2) as pool:
            return dict(pool.map(one, sources.items()))


def _part3(grade: GradeResult) -> tuple[float, ...]:
    scores = {t.task.id: t.score for t in grade.tasks}
    return tuple(scores[task] for task in PART3)


@pytest.mark.parametrize("name", ["reference", *STYLES])
def test_correct_styles_earn_full_marks(graded, name):
    grade = graded[name]
    assert not grade.internal_error, grade.internal_error
    failed = [c.check.id for t in grade.tasks
              for c in (*t.items, *t.deductions) if not c.outcome.passed]
    assert failed == [], report.feedback_markdown(grade)
    assert grade.score == grade.max_score + 1


@pytest.mark.parametrize("name", list(MISTAKES))
def test_mistakes_cost_their_own_items(graded, name):
    grade = graded[name]
    _, expected, explanation = MISTAKES[name]
    feedback = report.feedback_markdown(grade)
    assert _part3(grade) == expected, feedback
    assert explanation in feedback
    parts_1_2 = {t.task.id: t.score for t in grade.tasks
                 if t.task.id not in PART3}
    assert parts_1_2 == {"self_attention": 5,
                         "multi_head_self_attention": 6}
