"""Build the otter-assign master notebook ``assignment/attention.ipynb``.

``python -m kit.notebook`` writes it; ``python -m kit.notebook --check``
exits 1 when the committed file differs from what this module builds. The
cells live below as plain strings, one small function per section.

The output is an otter-grader 7 *master* notebook: ``otter assign`` turns it
into a student notebook (sample answers removed, ``grader.check(...)`` cells
added, tests written to ``tests/task_*.py``). Structure used here:

* a raw ``# ASSIGNMENT CONFIG`` cell (yaml) at the top;
* every task is a question block ``# BEGIN QUESTION`` (``name: task_1_2``,
  ``points: 3``) with one exception-based test cell in ``# BEGIN TESTS``.
  The test cell defines ``test_task_1_2()``, which calls the kit's public
  check ``transformer_lm.checks.run_check("1.2")``; otter keeps only that
  function. The cell's second statement, ``report(test_task_1_2)``, runs it
  in the master without raising (``report`` is defined in a ``# BEGIN
  IGNORE`` block, so it exists only in the master);
* every inline question Qn is a manual question (``manual: true``) with a
  prompt block (the answer cell the student edits) and a solution block
  (our sample answer, deleted by otter assign from the student notebook).

Answer-cell convention (read by the answer extractor): each inline question
Qn ("Q1".."Q5") has exactly one student answer cell in the student notebook,
a markdown cell with ``metadata["kit"] == {"question": "Qn"}``, cell id
``answer-qn`` and a source whose first line is ``**Answer Qn:**``; the
student writes below that line. The master also holds the sample answer, a
markdown cell with ``metadata["kit"] == {"question": "Qn", "sample": True}``,
id ``sample-qn`` and the same first line. Students may change cell ids, so
the extractor should match on the metadata first and fall back to the
heading line.
"""
from __future__ import annotations

import argparse
import base64
import re
import sys
import textwrap
from pathlib import Path

import nbformat

from autograder.local import (SCOPE, bonus_points, bonus_rule,
                              points_text, task_points)
from autograder.rubric import Rubric, load_rubric

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "assignment" / "attention.ipynb"

# What each task asks for, in the intro's table (points from the rubric).
TASK_SUMMARIES = {
    "1.1": "the query, key and value projections of `SelfAttention`",
    "1.2": "`SelfAttention.forward`",
    "2.1": "multi-head split and attention scores",
    "2.2": "the causal mask",
    "2.3": "probabilities, dropout, merging the heads",
    "3.1": "`CausalAttention.forward`",
    "3.2": "`MultiHeadAttentionWrapper.forward`",
    "3.3": "`MultiHeadAttention.forward` (fused heads)",
    "3.4": "`gpt2_small_attention()`",
}
# The benchmark chart (``python -m kit.bench_attention``), embedded in the
# notebook as a cell attachment so that it ships with it.
BENCH_CHART = ROOT / "assignment" / "figures" / "bench_attention.png"
QUESTION_POINTS = 0  # inline questions: feedback only; change here if graded

CONFIG = """\
# ASSIGNMENT CONFIG
name: attention
files:
  - ../transformer_lm
tests:
  files: true
  ok_format: false
init_cell: true
check_all_cell: false
export_cell: false
generate: false
run_tests: false
"""

KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python",
              "name": "python3"}


# -- cell helpers ----------------------------------------------------------

def _text(source: str) -> str:
    """Dedent a triple-quoted cell and drop surrounding blank lines."""
    return textwrap.dedent(source).strip("\n")


def task_table(rubric: Rubric | None = None) -> str:
    """The intro's markdown table of tasks and points."""
    points, bonus = task_points(rubric), bonus_points(rubric)
    rows = ["| Task | What you write | Points |",
            "|------|----------------|--------|"]
    for task_id, summary in TASK_SUMMARIES.items():
        extra = f" (+{bonus[task_id]:g} bonus)" if task_id in bonus else ""
        rows.append(f"| {task_id} | {summary} | "
                    f"{points[task_id]:g}{extra} |")
    return "\n".join(rows)


def _facts(text: str) -> str:
    """Fill in the rubric's facts: ``@points(1.2)``, ``@task_table``,
    ``@bonus_rule(1.2)`` (the rule as the rubric states it)."""
    text = text.replace("@task_table", task_table())
    text = re.sub(r"@bonus_rule\((\d\.\d)\)",
                  lambda m: bonus_rule(m.group(1)), text)
    return re.sub(r"@points\((\d\.\d)\)",
                  lambda m: points_text(m.group(1)), text)


def md(source: str, cell_id: str | None = None,
       kit: dict | None = None) -> nbformat.NotebookNode:
    """A markdown cell; ``kit`` goes to ``metadata["kit"]``."""
    cell = nbformat.v4.new_markdown_cell(_facts(_text(source)))
    cell.id = cell_id
    if kit is not None:
        cell.metadata["kit"] = kit
    return cell


def code(source: str, cell_id: str | None = None) -> nbformat.NotebookNode:
    """A code cell without outputs."""
    cell = nbformat.v4.new_code_cell(_text(source))
    cell.id = cell_id
    return cell


def raw(source: str) -> nbformat.NotebookNode:
    """A raw cell (otter-assign directives)."""
    cell = nbformat.v4.new_raw_cell(_text(source))
    cell.id = None
    return cell


def task(task_id: str, statement: str) -> list[nbformat.NotebookNode]:
    """An autograded task: statement, then a test cell calling run_check."""
    name = "task_" + task_id.replace(".", "_")
    # otter shows these under the cell's verdict: say what was checked.
    test = f'''\
        """ # BEGIN TEST CONFIG
        success_message: 'passed on the public cases ({SCOPE})'
        failure_message: 'the failing items are listed below ({SCOPE})'
        """ # END TEST CONFIG
        def test_{name}():
            from transformer_lm.checks import run_check
            run_check("{task_id}")


        report(test_{name})
        '''
    return [
        raw(f"# BEGIN QUESTION\nname: {name}\n"
            f"points: {task_points()[task_id]:g}"),
        md(statement),
        raw("# BEGIN TESTS"),
        code(test, cell_id=f"check-{name.replace('_', '-')}"),
        raw("# END TESTS"),
        raw("# END QUESTION"),
    ]


def inline_question(qid: str, prompt: str,
                    sample: str) -> list[nbformat.NotebookNode]:
    """A manual question: prompt, the student's answer cell, our sample."""
    heading = f"**Answer {qid}:**"
    slug = qid.lower()
    return [
        raw(f"# BEGIN QUESTION\nname: {slug}\nmanual: true\n"
            f"points: {QUESTION_POINTS}"),
        md(prompt),
        raw("# BEGIN PROMPT"),
        md(f"{heading}\n\n_Type your answer here, replacing this text._",
           cell_id=f"answer-{slug}", kit={"question": qid}),
        raw("# END PROMPT"),
        raw("# BEGIN SOLUTION"),
        md(f"{heading}\n\n{_text(sample)}", cell_id=f"sample-{slug}",
           kit={"question": qid, "sample": True}),
        raw("# END SOLUTION"),
        raw("# END QUESTION"),
        md("---"),  # otter locks the cell after a manual question
    ]


# -- sections --------------------------------------------------------------

def intro() -> list[nbformat.NotebookNode]:
    """Title, task table, setup and helper cells."""
    return [
        md("""
        # Attention from scratch

        In this homework you implement the layer at the heart of every
        transformer: scaled dot-product self-attention (Part 1) and its
        multi-head version with causal masking and dropout (Part 2). Part 3
        rebuilds causal multi-head attention the way chapter 3 of Sebastian
        Raschka's *Build a Large Language Model (From Scratch)* does: one
        causal head, a stack of heads, the fused module, and its GPT-2
        size.

        You write code in `transformer_lm/modeling_attention.py`, only
        between the `# YOUR CODE STARTS HERE` and `# YOUR CODE ENDS HERE`
        markers. This notebook explains the ideas, checks each task right
        after you finish it, and asks five short questions (Q1-Q5): write
        your answers in the cells that start with **Answer Qn:**.

        @task_table

        Each check cell runs the grader's own checks of its task on the
        public test values. They check values only; `make check` adds the
        PEP 8 and shape-comment deductions. The final grade also runs
        hidden cases (a single token, one head, long sequences, dropout in
        training mode), so a passing check is necessary, not sufficient.
        """),
        code("""
        %load_ext autoreload
        %autoreload 2
        %matplotlib inline

        import math
        import re

        import matplotlib.pyplot as plt
        import torch

        from transformer_lm import modeling_attention

        _ = torch.manual_seed(0)
        """),
        md("""
        `autoreload` re-imports `modeling_attention` whenever you save the
        file, so you never need to restart the kernel after an edit. The
        next cell defines a helper for the plots: it shows a plot once the
        code it needs is written, and a reminder before.
        """),
        code("""
        def if_implemented(task, plot):
            \"\"\"Call ``plot()``; if it needs unwritten code, say which.\"\"\"
            try:
                plot()
            except NotImplementedError as missing:
                found = re.search(r"Task \\d\\.\\d", str(missing))
                needed = found.group(0) if found else f"Task {task}"
                print(f"Finish {needed} to see this plot.")
        # BEGIN IGNORE


        def report(check):
            \"\"\"Master only: run a check; print why if it fails.\"\"\"
            try:
                check()
            except AssertionError as failure:
                print(f"FAILED: {failure}")
        # END IGNORE
        """),
    ]


def grading_rules() -> list[nbformat.NotebookNode]:
    """Shape-comment rule, dimension vocabulary, PEP 8."""
    return [md("""
        ## Shape comments and style (read before you start)

        Every line you write that produces a tensor carries a comment with
        the tensor's shape in square brackets, either trailing the line or
        on a comment line right after the statement (handy for long ones):

        ```python
        scores = q @ k.transpose(1, 2)  # [bs, seq, seq]
        probs = torch.softmax(
            scores / math.sqrt(hidden), dim=-1
        )
        # [bs, seq, seq]
        ```

        Name the dimensions with this vocabulary (any name of a row works):

        | dimension | names |
        |-----------|-------|
        | batch size | `batch_size`, `bs`, `batch`, `b` |
        | sequence length | `seq_len`, `seq`, `T`, `num_tokens` |
        | input size | `input_size`, `d_in` |
        | hidden size | `hidden`, `hidden_size`, `d_model`, `d_out` |
        | number of heads | `num_heads`, `heads`, `nh`, `n_heads` |
        | size of one head | `head_size`, `head`, `head_dim`, `hs`, `d_head` |

        Merged axes are products: `[bs * num_heads, seq, seq]`. A comment
        may show a chain, `# [bs, seq, hidden] @ [bs, hidden, seq] -> [bs,
        seq, seq]`; only the last shape counts.

        Deductions, per task: **-1** if its code has any PEP 8 violation
        (as reported by `pycodestyle`), **-1** if any of its shape
        comments is missing or wrong. `make check` reports both.
        """)]


def part1() -> list[nbformat.NotebookNode]:
    """Scaled dot-product attention, Tasks 1.1 and 1.2."""
    return [
        md(r"""
        ## Part 1: scaled dot-product self-attention

        ### Why attention?

        A recurrent network squeezes everything it has read into one state
        vector; a convolution sees a fixed window. Attention lets every
        position look at every other position directly and decide, from
        their content, how much to read from each: the routing is computed
        from the data instead of being fixed by the architecture. Any two
        tokens are one step apart, and all positions are computed in
        parallel.

        ### Queries, keys and values

        For one sequence $X \in \mathbb{R}^{T \times d_{in}}$ of $T$ input
        vectors, three learned linear maps give

        $$Q = XW_Q + b_Q, \qquad K = XW_K + b_K, \qquad V = XW_V + b_V,
        \qquad Q, K, V \in \mathbb{R}^{T \times h}.$$

        The query $q_i$ says what position $i$ is looking for, the key
        $k_j$ what position $j$ offers, and the value $v_j$ what it hands
        over when chosen. Scores are dot products, a softmax over each row
        turns them into weights, and the output is the weighted average of
        the values:

        $$\operatorname{Attention}(Q, K, V) =
        \operatorname{softmax}\!\left(\frac{QK^\top}{\sqrt{h}}\right) V,
        \qquad P_{ij} = \frac{\exp(q_i \cdot k_j / \sqrt{h})}
        {\sum_{t=1}^{T} \exp(q_i \cdot k_t / \sqrt{h})}.$$

        Row $i$ of $P \in \mathbb{R}^{T \times T}$ is a probability
        distribution over positions: where position $i$ reads from.

        ### Why divide by $\sqrt{h}$?

        If the entries of $q$ and $k$ are independent with mean 0 and
        variance 1, then

        $$\operatorname{Var}(q \cdot k) = \sum_{m=1}^{h}
        \operatorname{Var}(q_m k_m) = h,$$

        so a typical score grows like $\sqrt{h}$. The softmax is not
        scale-invariant: multiplying all scores by a large factor pushes it
        towards a one-hot vector on the largest score. A saturated softmax
        has an almost zero Jacobian,
        $\partial p_i / \partial s_j = p_i(\delta_{ij} - p_j) \approx 0$,
        so hardly any gradient reaches the queries and keys and learning
        stalls. Dividing by $\sqrt{h}$ brings the variance of the scores
        back to 1 whatever the width of the layer. You will measure this
        after Task 1.2.
        """),
        *task("1.1", """
        ### Task 1.1 (@points(1.1))

        In `SelfAttention.__init__`, create the projections `self.q`,
        `self.k` and `self.v`, each an `nn.Linear` from `input_size` to
        `hidden` with a bias. Keep these names: the checks load frozen
        weights into them by name. Run the cell below to check.
        """),
        *task("1.2", """
        ### Task 1.2 (@points(1.2))

        Implement `SelfAttention.forward(x)` for `x` of shape
        `[batch_size, seq_len, input_size]`: project `x` to queries, keys
        and values, compute the scaled scores
        `[batch_size, seq_len, seq_len]`, take the softmax over the *key*
        axis (the last one, so each query's weights sum to one) and return
        the weighted sum of the values, `[batch_size, seq_len, hidden]`.

        `k.transpose(1, 2)` transposes each matrix of a batch, and `@`
        multiplies batches of matrices. @bonus_rule(1.2)
        """),
    ]


def scaling_questions() -> list[nbformat.NotebookNode]:
    """The softmax-sharpness experiment with Q1 and Q2."""
    return [
        md(r"""
        ### How sharp is the softmax? An experiment

        The next cell draws queries and keys with unit-variance entries for
        growing hidden sizes $h$ and measures, averaged over queries, two
        things about the attention distribution over 16 keys: its entropy
        (in nats; a uniform distribution has $\ln 16 \approx 2.77$) and its
        largest probability. It does so with and without the
        $1/\sqrt{h}$ scaling.
        """),
        code("""
        def softmax_sharpness(hidden, scale, num_keys=16, num_queries=256):
            \"\"\"Mean entropy and mean max probability of the attention.\"\"\"
            q = torch.randn(num_queries, hidden)
            k = torch.randn(num_keys, hidden)
            scores = q @ k.T
            if scale:
                scores = scores / math.sqrt(hidden)
            probs = scores.softmax(dim=-1)
            entropy = -(probs * probs.clamp_min(1e-12).log()).sum(dim=-1)
            largest = probs.max(dim=-1).values
            return entropy.mean().item(), largest.mean().item()


        hiddens = [2, 8, 32, 128, 512, 2048]
        fig, (ax_entropy, ax_max) = plt.subplots(1, 2, figsize=(11, 3.5))
        for scale in (False, True):
            stats = [softmax_sharpness(h, scale) for h in hiddens]
            label = "scores / sqrt(h)" if scale else "unscaled scores"
            ax_entropy.plot(hiddens, [s[0] for s in stats], "o-", label=label)
            ax_max.plot(hiddens, [s[1] for s in stats], "o-", label=label)
        ax_entropy.axhline(math.log(16), color="gray", linestyle=":",
                           label="uniform")
        ax_entropy.set(xscale="log", xlabel="hidden size h",
                       ylabel="entropy (nats)", title="entropy of a row")
        ax_max.set(xscale="log", xlabel="hidden size h",
                   ylabel="max probability", title="largest weight of a row")
        ax_entropy.legend()
        ax_max.legend()
        plt.tight_layout()
        plt.show()
        """),
        *inline_question("Q1", """
        **Q1.** Look at the unscaled curves. What happens to the attention
        distribution as the hidden size grows, why, and why is that a
        problem for training?
        """, r"""
        Without scaling the softmax sharpens as $h$ grows: the entropy
        falls towards 0 and the largest weight climbs towards 1, so each
        query attends to essentially one key. The scores $q \cdot k$ are
        sums of $h$ unit-variance products, so their standard deviation is
        $\sqrt{h}$ and the gaps between scores grow with the width; the
        softmax turns large gaps into a near one-hot vector. A saturated
        softmax has a near-zero Jacobian, so the gradient to the queries
        and keys vanishes and the attention pattern barely learns; the
        model is also stuck with a hard, random choice at initialisation.
        """),
        *inline_question("Q2", r"""
        **Q2.** What does dividing the scores by $\sqrt{h}$ do to the
        curves? Why $\sqrt{h}$, and not $h$?
        """, r"""
        The scaled curves are flat: entropy and largest weight no longer
        depend on $h$ and stay in the soft, trainable regime (at
        initialisation the weights are spread over several keys). Dividing
        by $\sqrt{h}$ makes $\operatorname{Var}(q \cdot k / \sqrt{h}) = 1$
        for every $h$, i.e. it removes exactly the growth of the standard
        deviation. Dividing by $h$ would over-correct: the variance would be
        $1/h$, the scores would shrink to 0 as $h$ grows and the softmax
        would tend to the uniform distribution, so attention could not
        focus.
        """),
    ]


def multi_head_notes() -> list[nbformat.NotebookNode]:
    """Heads, splitting and merging, masking, dropout, layout."""
    return [
        md(r"""
        ## Part 2: multi-head self-attention

        One head gives one distribution per position, so it can look for
        one kind of thing at a time. Multi-head attention runs $n_h$
        attentions in parallel on smaller subspaces. With
        $\text{hidden} = n_h \cdot d_{head}$ and $Q_j, K_j, V_j$ the $j$-th
        block of $d_{head}$ columns of $Q, K, V$:

        $$\text{head}_j = \operatorname{softmax}\!\left(
        \frac{Q_j K_j^\top}{\sqrt{d_{head}}} + M\right) V_j, \qquad
        \operatorname{MHSA}(X) = [\text{head}_1, \dots, \text{head}_{n_h}]
        \, W_{mix} + b_{mix},$$

        where $M$ is the causal mask (below, or $0$). The projections are
        the same three `nn.Linear(input_size, hidden)` as before, only
        split afterwards, so many heads cost about as much as one wide
        head, but each head can specialise (one follows the previous token,
        another matches a subject with its verb). The `mix` layer combines
        what the heads found.

        ### Splitting and merging heads

        `self.q(x)` has shape `[bs, seq, hidden]`. Split the last axis with
        `.view(bs, seq, num_heads, head_size)`, then `.transpose(1, 2)` to
        get `[bs, num_heads, seq, head_size]`: the heads now sit next to
        the batch axis and `@` batches over both. Merging reverses this:
        `.transpose(1, 2)` back to `[bs, seq, num_heads, head_size]`, then
        `.reshape(bs, seq, hidden)` (after a transpose the memory is no
        longer contiguous, so `.view` would refuse).

        Why not skip the transpose and `reshape(bs, num_heads, seq,
        head_size)` directly? The shape is right, but `reshape` never moves
        data: it re-reads the same memory in row-major order, so the head
        axis is cut out of the *sequence*. In the demo every entry's tens
        digit is its position.
        """),
        code("""
        bs, seq, num_heads, head_size = 1, 3, 2, 2
        hidden = num_heads * head_size
        x = 10 * torch.arange(seq)[:, None] + torch.arange(hidden)
        x = x.unsqueeze(0)  # [bs, seq, hidden], x[0, t, d] = 10 * t + d
        right = x.view(bs, seq, num_heads, head_size).transpose(1, 2)
        wrong = x.reshape(bs, num_heads, seq, head_size)
        print("x[0], one row per position:", x[0], sep="\\n")
        print("\\nhead 0 with view + transpose: row t is position t",
              right[0, 0], sep="\\n")
        print("\\nhead 0 with reshape only: positions 0 and 1 mixed up",
              wrong[0, 0], sep="\\n")
        """),
        md(r"""
        ### Causal masking

        A language model predicts token $t+1$ from tokens $1..t$. If
        position $t$ could attend to later positions, training would
        reward copying the answer, and the model would fail at generation
        time, when the future does not exist yet. The causal mask adds
        $-\infty$ to every score of a future key before the softmax:

        $$M_{ij} = \begin{cases} 0 & j \le i \\ -\infty & j > i
        \end{cases}$$

        Since $e^{-\infty} = 0$, each row renormalises over the positions
        it may see. The diagonal stays unmasked: a position attends to
        itself, so even the first row has something to attend to (a fully
        masked row would be $0/0$ = `nan`). Mask the *scores*, not the
        probabilities: zeroing probabilities after the softmax leaves rows
        that no longer sum to one. `torch.triu(..., diagonal=1)` and
        `masked_fill` are useful; create the mask on `x.device`.

        ### Dropout on the attention weights

        In training mode `self.dropout` zeroes each attention probability
        with probability $p$ and scales the survivors by $1/(1-p)$, so the
        expected value is unchanged. This keeps the model from relying on
        one attended position (the original Transformer regularised the
        same way). Rows no longer sum to exactly one in training mode;
        that is expected. In `model.eval()` dropout is the identity, so
        call `.eval()` before evaluating or plotting. The `probs` you
        return are the ones after dropout.

        ### The layout of the returned probabilities

        `forward(x, return_attention=True)` returns `(att, probs)` with
        `probs` of shape `[bs * num_heads, seq, seq]`, the heads of one
        batch element next to each other: `probs[b * num_heads + j]` is
        head `j` of batch element `b`. That is exactly
        `.reshape(bs * num_heads, seq, seq)` of a
        `[bs, num_heads, seq, seq]` tensor.
        """),
    ]


def part2_tasks() -> list[nbformat.NotebookNode]:
    """Tasks 2.1-2.3 with Q3 and Q4."""
    return [
        *task("2.1", """
        ### Task 2.1 (@points(2.1))

        In `MultiHeadSelfAttention.forward`, project `x` to queries, keys
        and values, split each into `num_heads` heads of `head_size` and
        compute the scaled scores of every head,
        `[bs, num_heads, seq, seq]`. `self.head_size` and `self.scale` are
        ready for you. The check runs the whole forward on a non-causal
        case, so it passes once Task 2.3 is done too.
        """),
        *inline_question("Q3", r"""
        **Q3.** `SelfAttention` divides the scores by
        $\sqrt{\text{hidden}}$, `MultiHeadSelfAttention` by
        $\sqrt{\text{head\_size}}$. Is that the same rule? What would go
        wrong if every head divided by $\sqrt{\text{hidden}}$?
        """, r"""
        It is the same rule: divide by the square root of the length of
        the dot product. A head's score sums over its own `head_size`
        coordinates, so its variance is `head_size`, not `hidden`; with one
        head the two coincide. Dividing each head by
        $\sqrt{\text{hidden}}$ would shrink its scores by an extra factor
        $\sqrt{\text{num\_heads}}$, so every head's softmax would be flatter
        than intended (closer to uniform) and more so the more heads there
        are; the result would still be a valid attention, just a
        systematically blurred one.
        """),
        *task("2.2", """
        ### Task 2.2 (@points(2.2))

        When `self.causal` is true, hide strictly future positions from
        every query: fill their scores with `-inf` before the softmax.
        """),
        *task("2.3", """
        ### Task 2.3 (@points(2.3))

        Turn the scores into probabilities (softmax over the keys), apply
        `self.dropout`, take the weighted sum of the values, merge the
        heads back to `[bs, seq, hidden]` and apply `self.mix`. Leave
        `probs` as `[bs * num_heads, seq, seq]`.
        """),
        *inline_question("Q4", """
        **Q4.** How many non-linear operations does
        `SelfAttention.forward` have, and how many does
        `MultiHeadSelfAttention.forward` (in eval mode)? Which steps are
        linear? What does that suggest about the layer that follows
        attention in a transformer block?
        """, r"""
        One kind: the softmax. The projections, the scaling, the `mix`
        layer and the merging of heads are linear (affine) maps. Multi-head
        attention still has a single softmax stage; it computes `num_heads`
        softmaxes side by side, one per head, but they are not stacked.
        Masking adds a fixed pattern of $-\infty$ and dropout is the
        identity in eval mode, so neither adds a non-linearity. (Strictly,
        $QK^\top$ multiplies two functions of $x$ and $PV$ does too, so the
        output is not linear in $x$, but there is no element-wise
        non-linearity such as ReLU.) Attention mainly mixes information
        across positions; that is why each transformer block follows it
        with a position-wise feed-forward network with a non-linear
        activation.
        """),
    ]


def heatmaps() -> list[nbformat.NotebookNode]:
    """Attention heatmaps of the student's module, with Q5."""
    return [
        md("""
        ## Looking at attention

        Below, your `MultiHeadSelfAttention` (random weights, eval mode)
        reads three short sentences through a fixed random embedding, and
        we plot head 0 of `probs`, with and without the causal mask. Row
        $i$ is query position $i$; column $j$ is how much it reads from
        position $j$. The layer is untrained, so look at the structure the
        mask imposes, not at which words attend to which.
        """),
        code("""
        sentences = ["the cat sat on the mat",
                     "a dog chased the cat",
                     "attention is all we need"]
        vocab = sorted({word for s in sentences for word in s.split()})
        torch.manual_seed(0)
        embedding = torch.nn.Embedding(len(vocab), 8)


        def attention_maps(causal):
            \"\"\"Head 0 of your layer's probabilities, per sentence.\"\"\"
            torch.manual_seed(1)
            layer = modeling_attention.MultiHeadSelfAttention(
                8, 8, num_heads=2, causal=causal).eval()
            maps = []
            with torch.no_grad():
                for sentence in sentences:
                    words = sentence.split()
                    ids = torch.tensor([vocab.index(w) for w in words])
                    x = embedding(ids).unsqueeze(0)  # [1, seq, 8]
                    _, probs = layer(x, return_attention=True)
                    maps.append(probs[0])  # [seq, seq]: batch 0, head 0
            return maps


        def plot_attention(causal):
            \"\"\"One heatmap per sentence.\"\"\"
            maps = attention_maps(causal)  # before any figure exists
            fig, axes = plt.subplots(1, 3, figsize=(14, 4.2),
                                     layout="constrained")
            for ax, sentence, probs in zip(axes, sentences, maps):
                words = sentence.split()
                image = ax.imshow(probs, vmin=0, vmax=1, cmap="viridis")
                ax.set_xticks(range(len(words)), words, rotation=45)
                ax.set_yticks(range(len(words)), words)
                ax.set_xlabel("key (attended to)")
            axes[0].set_ylabel("query")
            fig.colorbar(image, ax=list(axes), shrink=0.8)
            fig.suptitle("causal" if causal else "no mask")
            plt.show()
        """),
        code("""
        if_implemented("2.3", lambda: plot_attention(causal=False))
        """),
        code("""
        if_implemented("2.2", lambda: plot_attention(causal=True))
        """),
        *inline_question("Q5", """
        **Q5.** Compare the two sets of heatmaps. What does the causal mask
        do to the pattern? Explain the first row of each causal map, and
        why no row ever ends up empty.
        """, """
        Without the mask every row spreads its weight over all words,
        future ones included. With the mask everything above the diagonal
        is exactly zero: a word only reads from itself and earlier words,
        and each row still sums to one over the allowed positions, so
        early rows are more concentrated (row $i$ shares its weight among
        $i + 1$ words). The first row puts all its weight on the first word
        (probability 1), because that is the only position it may see.
        No row is empty because the diagonal is never masked: every
        position may attend to itself, which also avoids a softmax over
        only $-\\infty$ (0/0 = `nan`).
        """),
    ]


def part3_intro() -> list[nbformat.NotebookNode]:
    """The book's example input and the CausalAttention task."""
    return [
        md(r"""
        ## Part 3: from stacked causal heads to fused heads

        Part 3 follows chapter 3 of Raschka's book, with its names
        (`d_in`, `d_out`, `context_length`, `num_tokens`, `W_query`, ...)
        so that you can read the two side by side. The book's running
        example is the sentence "Your journey starts with one step", six
        tokens embedded in 3 dimensions (real models use hundreds or
        thousands), stacked into a batch of two identical sequences.
        """),
        code("""
        inputs = torch.tensor(
            [[0.43, 0.15, 0.89],  # Your     (x^1)
             [0.55, 0.87, 0.66],  # journey  (x^2)
             [0.57, 0.85, 0.64],  # starts   (x^3)
             [0.22, 0.58, 0.33],  # with     (x^4)
             [0.77, 0.25, 0.10],  # one      (x^5)
             [0.05, 0.80, 0.55]]  # step     (x^6)
        )
        words = ["Your", "journey", "starts", "with", "one", "step"]
        batch = torch.stack((inputs, inputs))
        print(batch.shape)  # [b, num_tokens, d_in] = [2, 6, 3]
        """),
        md(r"""
        ### One causal head

        `CausalAttention` is Part 1's attention with three changes:

        * **No biases by default** (`qkv_bias=False`), as in the book;
          GPT-2 has them, so the flag exists.
        * **A causal mask stored as a buffer.** `__init__` builds
          `torch.triu(torch.ones(context_length, context_length),
          diagonal=1)` once and registers it with `register_buffer`: a
          buffer is not a parameter (the optimizer never touches it), but
          it moves with the module on `.to(device)` and is saved in its
          `state_dict`. The mask is built for the longest sequence the
          module accepts; a batch of `num_tokens` tokens uses its top-left
          corner, `self.mask.bool()[:num_tokens, :num_tokens]`. Fill the
          masked scores with `-torch.inf` before the softmax, so that
          every row renormalises over the tokens it may see.
        * **Dropout on the attention weights**, after the softmax:
          `self.dropout(attn_weights)`. In training mode some weights of
          each row become 0 and the others are scaled by $1/(1-p)$.

        The scores are divided by $\sqrt{d_k}$, the size of a key
        (`keys.shape[-1]`, which is `d_out` here): the same rule as in
        Part 1.
        """),
        *task("3.1", """
        ### Task 3.1 (@points(3.1))

        Implement `CausalAttention.forward(x)` for `x` of shape
        `[b, num_tokens, d_in]`, returning the context vectors
        `[b, num_tokens, d_out]`: queries, keys and values, the scores
        `queries @ keys.transpose(1, 2)`, the masked fill with the mask cut
        to `num_tokens`, the softmax of the scaled scores, dropout on these
        weights, and their weighted sum of the values. With
        `torch.manual_seed(123)` and `CausalAttention(3, 2, 6, 0.0)` the
        book prints, for each sequence of the batch,

        ```
        [[-0.4519,  0.2216],
         [-0.5874,  0.0058],
         [-0.6300, -0.0632],
         [-0.5675, -0.0843],
         [-0.5526, -0.0981],
         [-0.5299, -0.1081]]
        ```
        """),
        code("""
        def book_causal_attention(dropout=0.0):
            \"\"\"The book's CausalAttention(3, 2, 6) after seed 123.\"\"\"
            torch.manual_seed(123)
            return modeling_attention.CausalAttention(3, 2, 6, dropout)


        def show_book_output():
            with torch.no_grad():
                context_vecs = book_causal_attention().eval()(batch)
            print(context_vecs.shape)  # [2, 6, 2]
            print(context_vecs[0])


        if_implemented("3.1", show_book_output)
        """),
        md(r"""
        The heatmaps below show the weights your head computes for the
        book's sentence: a hook on `self.dropout` records what it receives
        and returns. Left, in eval mode; right, in training mode with
        dropout 0.5: about half of the weights are gone and the survivors
        are doubled, so the rows no longer sum to one.
        """),
        code("""
        def causal_weights(layer, x, train=False):
            \"\"\"The weights your layer passes through self.dropout.\"\"\"
            seen = []
            hook = layer.dropout.register_forward_hook(
                lambda module, args, out: seen.append(out.detach()))
            layer.train(train)
            try:
                with torch.no_grad():
                    layer(x)
            finally:
                hook.remove()
            return seen[0][0]  # [num_tokens, num_tokens] of sequence 0


        def plot_causal_weights():
            layer = book_causal_attention(dropout=0.5)
            shown = causal_weights(layer, batch)
            torch.manual_seed(0)
            dropped = causal_weights(layer, batch, train=True)
            fig, axes = plt.subplots(1, 2, figsize=(11, 4.2),
                                     layout="constrained")
            for ax, weights, title in zip(
                    axes, (shown, dropped),
                    ("eval mode", "train mode, dropout 0.5")):
                image = ax.imshow(weights, vmin=0, vmax=2, cmap="viridis")
                for i in range(len(words)):
                    for j in range(len(words)):
                        ax.text(j, i, f"{weights[i, j]:.2f}", ha="center",
                                va="center", color="white", fontsize=8)
                ax.set_xticks(range(len(words)), words, rotation=45)
                ax.set_yticks(range(len(words)), words)
                ax.set_xlabel("key (attended to)")
                ax.set_title(title)
            axes[0].set_ylabel("query")
            fig.colorbar(image, ax=list(axes), shrink=0.8)
            plt.show()
        """),
        code("""
        if_implemented("3.1", plot_causal_weights)
        """),
    ]


def part3_heads() -> list[nbformat.NotebookNode]:
    """Stacked heads, fused heads, GPT-2 size."""
    return [
        md(r"""
        ### Many heads, stacked

        The simplest multi-head attention runs `num_heads` independent
        `CausalAttention` modules on the same input and concatenates their
        outputs: `num_heads` heads of `d_out` each give `num_heads * d_out`
        features. Correct, but each head does its own three small matrix
        products, one after another.
        """),
        *task("3.2", """
        ### Task 3.2 (@points(3.2))

        Implement `MultiHeadAttentionWrapper.forward(x)`: run every head of
        `self.heads` on `x` and concatenate their outputs along the last
        dimension, `[b, num_tokens, num_heads * d_out]`. The book's
        example (seed 123, two heads of `d_out=2`) gives four columns per
        token; the first two are Task 3.1's output.
        """),
        code("""
        def show_wrapper_output():
            torch.manual_seed(123)
            wrapper = modeling_attention.MultiHeadAttentionWrapper(
                3, 2, 6, 0.0, num_heads=2).eval()
            with torch.no_grad():
                context_vecs = wrapper(batch)
            print(context_vecs.shape)  # [2, 6, 4]
            print(context_vecs[0])


        if_implemented("3.2", show_wrapper_output)
        """),
        md(r"""
        ### Fused heads

        `MultiHeadAttention` computes all heads at once, as Part 2 did: one
        `W_query` of `d_in` to `d_out` holds the query projections of all
        heads, one block of `head_dim = d_out // num_heads` rows per head.
        Split the projections with
        `.view(b, num_tokens, num_heads, head_dim).transpose(1, 2)`, attend
        in every head at once (masked as in Task 3.1, scaled by
        $\sqrt{\text{head\_dim}}$, dropout on the weights), transpose back,
        merge to `[b, num_tokens, d_out]` and apply `self.out_proj`, a
        linear layer that mixes the heads. Note the sizes: here `d_out` is
        the *total* output size, while the wrapper's `d_out` is per head.

        The two forms compute the same function. Stack the wrapper's
        per-head weights into the fused projections, make `out_proj` the
        identity, and the outputs agree (the cell after Task 3.3 shows it
        with your modules). `__init__` also refuses a `d_out` that
        `num_heads` does not divide, and `forward` refuses inputs longer
        than `context_length`, both with a `ValueError`.
        """),
        *task("3.3", """
        ### Task 3.3 (@points(3.3))

        Implement `MultiHeadAttention.forward(x)`, returning
        `[b, num_tokens, d_out]`. With `torch.manual_seed(123)` and
        `MultiHeadAttention(3, 2, 6, 0.0, num_heads=2)` the book prints

        ```
        [[0.3190, 0.4858],
         [0.2943, 0.3897],
         [0.2856, 0.3593],
         [0.2693, 0.3873],
         [0.2639, 0.3928],
         [0.2575, 0.4028]]
        ```
        """),
        code("""
        def show_equivalence():
            \"\"\"Your wrapper and fused module, with the same weights.\"\"\"
            torch.manual_seed(123)
            wrapper = modeling_attention.MultiHeadAttentionWrapper(
                3, 2, 6, 0.0, num_heads=2).eval()
            fused = modeling_attention.MultiHeadAttention(
                3, 4, 6, 0.0, num_heads=2).eval()
            with torch.no_grad():
                for name in ("W_query", "W_key", "W_value"):
                    stacked = torch.cat([getattr(head, name).weight
                                         for head in wrapper.heads])
                    getattr(fused, name).weight.copy_(stacked)  # [4, 3]
                fused.out_proj.weight.copy_(torch.eye(4))
                fused.out_proj.bias.zero_()
                difference = (fused(batch) - wrapper(batch)).abs().max()
            print(f"largest difference: {difference.item():.2e}")


        if_implemented("3.3", show_equivalence)
        """),
        md(r"""
        ### GPT-2 size

        The smallest GPT-2 (124M parameters) has 12 heads of 64 dimensions
        in each of its 12 layers: `d_in = d_out = 768`, a context of 1024
        tokens, dropout 0.1, and biases on the query, key and value
        projections. Its attention has
        $4 \cdot (768 \cdot 768 + 768) = 2\,362\,368$ parameters: three
        projections and `out_proj`, each a $768 \times 768$ matrix and a
        bias.
        """),
        *task("3.4", """
        ### Task 3.4 (@points(3.4))

        Make `gpt2_small_attention()` return that layer, a
        `MultiHeadAttention`.
        """),
        code("""
        def show_gpt2_size():
            layer = modeling_attention.gpt2_small_attention()
            count = sum(p.numel() for p in layer.parameters())
            print(f"{count:,} parameters, {layer.num_heads} heads of "
                  f"{layer.head_dim}")


        if_implemented("3.4", show_gpt2_size)
        """),
    ]


def benchmark() -> list[nbformat.NotebookNode]:
    """The measured timings of the four forms, with an honest reading."""
    cell = md("""
        ## Is the fused form faster?

        The usual argument for fused heads is speed: a few large matrix
        products instead of many small ones. We measured it (the staff
        script `python -m kit.bench_attention`, not run here: it takes
        about 15 seconds) with one forward pass at GPT-2 size, batch 8 of
        1024 tokens, 768 dimensions and 12 heads, on 2 CPU cores:

        ![milliseconds per forward pass](attachment:bench_attention.png)

        | implementation | seconds per forward pass |
        |---|---:|
        | wrapper (12 stacked `CausalAttention` heads) | 1.14 |
        | fused `MultiHeadAttention` (view/transpose) | 1.13 |
        | fused + `scaled_dot_product_attention` | 0.36 |
        | `torch.nn.MultiheadAttention` | 0.93 |

        On this CPU the plain fused module is **not** faster than the
        stacked heads: across our runs the two stayed within about 10% of
        each other (1.1 to 1.3 seconds each), sometimes one ahead,
        sometimes the other. Both compute the same
        $12 \\times 1024 \\times 1024$ scores per sequence, an
        `[8, 12, 1024, 1024]` tensor of about 400 MB in total that is
        written by the matrix product, read and rewritten by the mask, the
        scaling and the softmax, and read again by the product with the
        values. That memory traffic dominates the time; fusing only merges
        the projections, which are large, efficient matrix products either
        way, and saves a few dozen calls, microseconds against a second.
        What makes attention fast is never materialising the scores:
        `torch.nn.functional.scaled_dot_product_attention` computes the
        softmax block by block (the FlashAttention idea) and is about three
        times faster than the stacked heads here (2.8x to 3.4x across our
        runs). On a GPU the fused form also wins on its own: a GPU runs a
        few large kernels far better than many small ones, and the wrapper
        launches about ten kernels per head.
        """)
    if BENCH_CHART.exists():
        cell.attachments = {"bench_attention.png": {
            "image/png": base64.b64encode(BENCH_CHART.read_bytes()).decode()}}
    return [cell]


def submission() -> list[nbformat.NotebookNode]:
    """How to run the local checks and submit."""
    return [md("""
        ## Checking and submitting

        * `make check` grades your `transformer_lm/modeling_attention.py`
          on the public cases the way the final grader does, including the
          PEP 8 and shape-comment rules and the bonus statement count, and
          explains common mistakes it recognises. Run it from the folder
          that contains the `Makefile`.
        * `make submission` packages your code and this notebook, with
          your answers to Q1-Q5, into the file to upload. Save the
          notebook first.

        Your answers are read from the cells that start with
        **Answer Qn:**; keep that first line and write below it.
        """)]


# -- assembly --------------------------------------------------------------

def _assign_ids(cells: list[nbformat.NotebookNode]) -> None:
    """Give cells without an explicit id a stable positional one."""
    for index, cell in enumerate(cells):
        if cell.id is None:
            cell.id = f"cell-{index:03d}"
    ids = [cell.id for cell in cells]
    if len(set(ids)) != len(ids):
        raise ValueError("duplicate cell ids in the notebook")


def build() -> nbformat.NotebookNode:
    """The master notebook, validated."""
    cells = [raw(CONFIG), *intro(), *grading_rules(), *part1(),
             *scaling_questions(), *multi_head_notes(), *part2_tasks(),
             *heatmaps(), *part3_intro(), *part3_heads(), *benchmark(),
             *submission()]
    _assign_ids(cells)
    nb = nbformat.v4.new_notebook(cells=cells, metadata={
        "kernelspec": KERNELSPEC,
        "language_info": {"name": "python"},
    })
    nbformat.validate(nb)
    return nb


def render() -> str:
    """The notebook file's exact text."""
    return nbformat.writes(build()) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Write the notebook, or with --check compare it to the file."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--check", action="store_true",
                        help="exit 1 if the file is not what build() gives")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = args.out.read_text() if args.out.exists() else ""
        if current != text:
            print(f"{args.out} is stale: run `python -m kit.notebook`")
            return 1
        print(f"{args.out} is up to date")
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
