"""Shape-comment check: many correct student styles pass, mistakes don't.

Shapes are observed by a tiny in-test tracer (the worker's own tracer is
exercised by the integration test at the end, when it is available).
"""
from __future__ import annotations

import ast
import functools
import textwrap

import pytest
import torch

from autograder import homework
from autograder.checks import shape_comments
from autograder.checks.shape_comments import ShapeIssue, statement_text
from autograder.checks.shape_notation import notation_of
from autograder.checks.source import ShapeComments
from autograder.rubric import load_rubric
from autograder.submission.regions import find_regions, student_statements
from kit_tests.reference_source import FULL_REFERENCE, ROOT, first_two_classes
from kit_tests.rubrics import live_task_methods

REFERENCE = first_two_classes(FULL_REFERENCE)
DIMS = {"batch_size": 2, "seq_len": 5, "input_size": 7, "hidden": 12,
        "num_heads": 3, "head_size": 4}
METHODS = live_task_methods()
# The attention homework's notation, as the config hands it to the check.
NOTATION = notation_of(homework.current())
_NOTATION, VOCABULARY = NOTATION.table, NOTATION.vocabulary
normalise_dims, notation_markdown = NOTATION.normalise_dims, NOTATION.markdown
parse_comment, size_of = NOTATION.parse_comment, NOTATION.size_of


def check_shape_comments(*args, **kwargs) -> list[ShapeIssue]:
    """The check with the attention homework's notation."""
    return shape_comments.check_shape_comments(*args, notation=NOTATION,
                                               **kwargs)


# --------------------------------------------------------------------------
# A tiny tracer: instrument the student statements, run both classes.

class _Recorder:
    def __init__(self) -> None:
        self.shapes: dict[int, list[list[list[int]]]] = {}

    def bound(self, line: int, *values: object) -> None:
        shapes = [list(v.shape) for v in values
                  if isinstance(v, torch.Tensor)]
        seen = self.shapes.setdefault(line, []) if shapes else []
        if shapes and shapes not in seen:
            seen.append(shapes)

    def returned(self, line: int, value: object) -> object:
        items = value if isinstance(value, (tuple, list)) else (value,)
        self.bound(line, *items)
        return value


def _loads(target: ast.expr) -> list[ast.expr]:
    if isinstance(target, (ast.Name, ast.Attribute)):
        copy = ast.parse(ast.unparse(target), mode="eval").body
        return [copy]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [v for elt in target.elts for v in _loads(elt)]
    return []


class _Instrument(ast.NodeTransformer):
    def __init__(self, wanted: set[int]):
        self.wanted = wanted

    def _call(self, method: str, line: int, args: list[ast.expr]):
        func = ast.Attribute(ast.Name("rec_shapes_", ast.Load()), method,
                             ast.Load())
        return ast.Call(func, [ast.Constant(line), *args], [])

    def _bind(self, node):
        if id(node) not in self.wanted:
            return self.generic_visit(node)
        targets = node.targets if isinstance(node, ast.Assign) \
            else [node.target]
        values = [v for t in targets for v in _loads(t)]
        record = ast.Expr(self._call("bound", node.lineno, values))
        return [node, ast.copy_location(record, node)]

    visit_Assign = visit_AugAssign = visit_AnnAssign = _bind

    def visit_Return(self, node):
        if id(node) in self.wanted and node.value is not None:
            node.value = self._call("returned", node.lineno, [node.value])
        return node


@functools.lru_cache(maxsize=None)
def trace(source: str, causal: tuple[bool, ...] = (False, True)
          ) -> dict[int, list[list[list[int]]]]:
    """Shapes bound by the student statements of ``source`` when both
    classes run on the DIMS sizes (merged over the calls)."""
    tree = ast.parse(source)
    wanted = {id(n) for _, n in
              student_statements(tree, find_regions(source, tree))}
    tree = ast.fix_missing_locations(_Instrument(wanted).visit(tree))
    recorder = _Recorder()
    namespace = {"rec_shapes_": recorder, "__name__": "student"}
    exec(compile(tree, "<student>", "exec"), namespace)
    torch.manual_seed(0)
    x = torch.randn(DIMS["batch_size"], DIMS["seq_len"], DIMS["input_size"])
    namespace["SelfAttention"](DIMS["input_size"], DIMS["hidden"])(x)
    for flag in causal:
        module = namespace["MultiHeadSelfAttention"](
            DIMS["input_size"], DIMS["hidden"], DIMS["num_heads"],
            causal=flag)
        module.eval()
        module(x, return_attention=True)
    return recorder.shapes


def with_regions(source: str, bodies: dict[str, str]) -> str:
    """``source`` with the student regions of the given tasks replaced by
    ``bodies`` (dedented, re-indented like the region's marker)."""
    lines = source.splitlines()
    regions = [r for r in find_regions(source) if r.task in bodies]
    assert {r.task for r in regions} == set(bodies), "unknown task"
    for region in sorted(regions, key=lambda r: -r.start):
        marker = lines[region.start - 2]
        indent = marker[:len(marker) - len(marker.lstrip())]
        body = textwrap.indent(textwrap.dedent(bodies[region.task]).strip(
            "\n"), indent).splitlines()
        lines[region.start - 1:region.end] = body
    return "\n".join(lines) + "\n"


def issues_of(source: str, **kwargs) -> list[ShapeIssue]:
    """Trace ``source`` and check its comments with the DIMS sizes."""
    return check_shape_comments(source, trace(source, **kwargs), DIMS,
                                METHODS)


def line_of(source: str, text: str) -> int:
    """1-based number of the only line containing ``text``."""
    found = [i for i, line in enumerate(source.splitlines(), 1)
             if text in line]
    assert len(found) == 1, (text, found)
    return found[0]


# --------------------------------------------------------------------------
# The reference and correct student styles earn full marks

def test_reference_has_no_issues():
    observed = trace(REFERENCE)
    assert observed, "the tracer saw nothing"
    assert check_shape_comments(REFERENCE, observed, DIMS, METHODS) == []


def test_full_reference_passes_with_later_parts_untraced():
    # Classes beyond the two traced here only get the presence check.
    assert check_shape_comments(FULL_REFERENCE, trace(REFERENCE), DIMS,
                                METHODS) == []


def test_reference_by_hand_observed_shapes():
    # The reference's shapes written out, independent of any tracer.
    line = {text: line_of(REFERENCE, text) for text in (
        "q, k, v = self.q(x)", "probs = torch.softmax(", "return probs @ v",
        "q = self.q(x).view", "k = self.k(x).view", "v = self.v(x).view",
        "scores = q @ k", "future = torch.ones", "scores = scores.masked",
        "probs = self.dropout", "att = probs @ v", "att = att.transpose",
        "att = self.mix(att)", "probs = probs.reshape")}
    bsh, heads = [2, 5, 12], [2, 3, 5, 4]
    observed = {
        line["q, k, v = self.q(x)"]: [[bsh, bsh, bsh]],
        line["probs = torch.softmax("]: [[[2, 5, 5]]],
        line["return probs @ v"]: [[bsh]],
        line["q = self.q(x).view"]: [[heads]],
        line["k = self.k(x).view"]: [[heads]],
        line["v = self.v(x).view"]: [[heads]],
        line["scores = q @ k"]: [[[2, 3, 5, 5]]],
        line["future = torch.ones"]: [[[5, 5]]],
        line["scores = scores.masked"]: [[[2, 3, 5, 5]]],
        line["probs = self.dropout"]: [[[2, 3, 5, 5]]],
        line["att = probs @ v"]: [[heads]],
        line["att = att.transpose"]: [[bsh]],
        line["att = self.mix(att)"]: [[bsh]],
        line["probs = probs.reshape"]: [[[6, 5, 5]]],
    }
    assert check_shape_comments(REFERENCE, observed, DIMS, METHODS) == []
    assert observed == trace(REFERENCE)


SA_STYLES = {
    "einsum and synonyms": """
        q = self.q(x)  # [bs, seq, hidden]
        k = self.k(x)  # (batch, seq_len, hidden_size)
        v = self.v(x)  # shape: [b, num_tokens, d_model]
        scores = torch.einsum("bsh,bth->bst", q, k)  # [b, T, T]
        scores = scores / k.shape[-1] ** 0.5  # [B, T, T]
        probs = scores.softmax(dim=-1)  # shape [batch_size, seq, seq]
        out = torch.einsum("bst,bth->bsh", probs, v)
        # [bs, seq, seq] @ [bs, seq, hidden] -> [batch, seq_len, d_out]
        return out  # [BS, SEQ, HIDDEN]
    """,
    "comments above": """
        # [bs, seq, hidden] each
        q, k, v = self.q(x), self.k(x), self.v(x)
        # scaled scores: [bs, seq, seq]
        scores = q @ k.transpose(-2, -1) / q.size(-1) ** 0.5
        # (B, T, T)
        probs = torch.softmax(scores, dim=-1)
        # (B, T, C)
        return probs @ v
    """,
    "one claim per tensor": """
        q, k, v = self.q(x), self.k(x), self.v(x)  # [bs, seq, C], [bs, \
seq, C], [bs, seq, C]
        w = torch.softmax(q @ k.mT / q.shape[-1] ** 0.5, -1)  # [b, t, t]
        return w @ v  # -> [bs, seq, hidden]
    """,
    "chain and numbers": """
        q = self.q(x)  # [bs, seq, d_in] -> [bs, seq, hidden]
        k = self.k(x)  # [bs, seq, input_size] -> [bs, seq, hidden]
        v = self.v(x)  # [bs, seq, 7] -> [bs, seq, 12]
        att = torch.softmax(q @ k.transpose(1, 2) * q.shape[-1] ** -0.5,
                            dim=-1)  # [bs, seq, hidden] @ [bs, hidden,
        # seq] -> [bs, seq, seq]
        return att @ v  # torch.Size([bs, seq, hidden])
    """,
}


@pytest.mark.parametrize("body", SA_STYLES.values(), ids=SA_STYLES.keys())
def test_self_attention_styles_pass(body):
    assert issues_of(with_regions(REFERENCE, {"1.2": body})) == []


MH_LOOP = {
    "2.1": """
        q = self.q(x)  # [bs, seq, hidden]
        k = self.k(x)  # [bs, seq, hidden]
        v = self.v(x)  # [bs, seq, hidden]
        hs = self.head_size
        per_head = []
        for i in range(self.num_heads):
            qi = q[:, :, i * hs:(i + 1) * hs]  # [bs, seq, head_size]
            ki = k[:, :, i * hs:(i + 1) * hs]  # [bs, seq, head_size]
            per_head.append(qi @ ki.transpose(1, 2) / self.scale)
        scores = torch.stack(per_head, dim=1)  # [bs, heads, seq, seq]
    """,
    "2.3": """
        probs = self.dropout(torch.softmax(scores, dim=-1))
        # [bs, num_heads, seq, seq]
        heads = []
        for i in range(self.num_heads):
            vi = v[..., i * self.head_size:(i + 1) * self.head_size]
            # [bs, seq, d_head]
            heads.append(probs[:, i] @ vi)
        att = torch.cat(heads, dim=-1)  # [bs, seq, heads * head_size]
        att = self.mix(att)  # [bs, seq, hidden]
        probs = probs.flatten(0, 1)  # [bs*num_heads, seq, seq]
    """,
}

MH_FOLDED = {
    "2.1": """
        def split(t):
            # [bs, seq, hidden] -> [bs * nh, seq, hs]
            return t.view(bs, seq, self.num_heads, -1).transpose(
                1, 2).reshape(bs * self.num_heads, seq, -1)
        q = split(self.q(x))  # [bs*nh, seq, hs]
        k = split(self.k(x))  # [bs*nh, seq, hs]
        v = split(self.v(x))  # [bs*nh, seq, hs]
        scores = torch.bmm(q, k.transpose(1, 2)) / self.scale
        # [bs * num_heads,
        #  seq_len, seq_len]
    """,
    "2.2": """
        scores = scores.masked_fill(
            torch.ones(seq, seq).triu(1).bool(), float("-inf"))
        # [batch_size * num_heads, seq_len, seq_len]
    """,
    "2.3": """
        probs = self.dropout(torch.softmax(scores, -1))  # [bs*nh, t, t]
        att = torch.bmm(probs, v)  # [bs*nh, seq, head_dim]
        att = att.view(bs, self.num_heads, seq, -1).transpose(1, 2)
        # [bs, seq, nh, hs]
        att = self.mix(att.reshape(bs, seq, -1))  # [bs, seq, nh*hs]
    """,
}

MH_EINSUM = {
    "2.1": """
        q, k, v = (
            t.view(bs, seq, self.num_heads, self.head_size)
            for t in (self.q(x), self.k(x), self.v(x))
        )  # q, k, v: [b, T, nh, hd]
        scores = torch.einsum("bshd,bthd->bhst", q, k) / self.scale
        # [b, nh, T, T] (scaled)
    """,
    "2.2": """
        keep = torch.tril(torch.ones(seq, seq, dtype=torch.bool))  # [T, T]
        scores = scores.masked_fill(~keep, float("-inf"))  # [B, NH, T, T]
    """,
    "2.3": """
        probs = self.dropout(scores.softmax(-1))  # [b, nh, T, T]
        att = torch.einsum("bhst,bthd->bshd", probs, v)  # [b, T, nh, hd]
        att = self.mix(att.flatten(2))  # [b, T, nh*hd]
        probs = probs.reshape(-1, seq, seq)  # [b*nh, T, T]
    """,
}

MH_GROWING = {
    "2.3": """
        probs = self.dropout(scores.softmax(-1))  # [bs, nh, seq, seq]
        per_head = probs @ v  # [bs, nh, seq, hs]
        att = per_head[:, 0]  # [bs, seq, hs]
        for i in range(1, self.num_heads):
            att = torch.cat([att, per_head[:, i]], -1)
            # [bs, seq, i * hs]
        att = self.mix(att)  # [bs, seq, hidden]
        probs = probs.reshape(bs * self.num_heads, seq, seq)
        # [bs*nh, seq, seq]
    """,
}

MH_STYLES = {"loop over heads": MH_LOOP, "[bs*heads, seq, head]": MH_FOLDED,
             "einsum": MH_EINSUM, "growing torch.cat": MH_GROWING}


@pytest.mark.parametrize("bodies", MH_STYLES.values(), ids=MH_STYLES.keys())
def test_multi_head_styles_pass(bodies):
    assert issues_of(with_regions(REFERENCE, bodies)) == []


COMMENTS = {
    "[batch_size, seq_len, seq_len]": "[batch_size, seq_len, seq_len]",
    "shape [bs, seq, seq]": "[bs, seq, seq]",
    "(bs, seq, seq)": "[bs, seq, seq]",
    "scores: (B, T, T)": "[B, T, T]",
    "(bs, seq, seq,)": "[bs, seq, seq]",
    "[bs, seq, hidden] @ [bs, hidden, seq] -> [bs, seq, seq]":
        "[bs, seq, seq]",
    "[bs, seq, seq] (softmax over the last dim)": "[bs, seq, seq]",
    "[bs,seq,seq]": "[bs, seq, seq]",
    "torch.Size([2, 5, 5])": "[2, 5, 5]",
    "`[batch_size, T, T]`": "[batch_size, T, T]",
    "[bs, seq, 5] -> scaled": "[bs, seq, 5]",
}


@pytest.mark.parametrize("comment", COMMENTS)
def test_comment_forms(comment):
    parsed = parse_comment(comment)
    assert [c.text for c in parsed.claims] == [COMMENTS[comment]]
    source = REFERENCE.replace("        )  # [bs, seq, seq]",
                               f"        )  # {comment}")
    assert issues_of(source) == []


@pytest.mark.parametrize("comment", [
    "attention probabilities", "softmax() over the keys", "see (1) and (2)",
    "(q, k and v)", "", "(q, k, v)", "(1, 2)", "[bs, seq, hidden",
])
def test_prose_is_not_a_claim(comment):
    assert not parse_comment(comment).says_something


@pytest.mark.parametrize("comment", [
    "[bs, seq, hidden] each", "[bs, seq, hidden] (each)",
    "q, k, v: [bs, seq, hidden]",
    "[bs, seq, hidden], [bs, seq, hidden], [bs, seq, hidden]",
    "q: (bs, seq, hidden), k: (bs, seq, hidden), v: (bs, seq, hidden)",
])
def test_tuple_claims_pass(comment):
    source = REFERENCE.replace("self.v(x)  # [bs, seq, hidden]",
                               f"self.v(x)  # {comment}")
    assert issues_of(source) == []


@pytest.mark.parametrize("size, name", [
    (row["key"], name) for row in _NOTATION["size"] for name in row["names"]])
def test_every_name_of_the_table_means_its_size(size, name):
    dims = normalise_dims(dict(DIMS, context_length=9))
    for written in (name, name.upper(), name.lower()):
        claim, = parse_comment(f"[{written}, 2]").claims
        assert claim.evaluated(dims) == f"[{dims[size]}, 2]"


def test_a_name_means_one_size():
    names = [n.lower() for names in VOCABULARY.values() for n in names]
    assert len(names) == len(set(names))
    assert all(names[0] == key for key, names in VOCABULARY.items())


def test_every_size_the_rubric_traces_can_be_written():
    # The grader's sizes are the rubric's constructor arguments: a student
    # must be able to write each by its own name.
    for task in load_rubric().tasks:
        for check in task.deductions:
            if check.kind == "shape_comments":
                for key in ShapeComments.dims(check):
                    assert size_of(key), (task.id, key)


@pytest.mark.parametrize("form", _NOTATION["form"],
                         ids=[f["example"] for f in _NOTATION["form"]])
def test_every_form_of_the_notebook_is_read(form):
    parsed = parse_comment(form["example"])
    assert parsed.unreadable is None
    assert [c.text for c in parsed.claims] == form["reads"]
    assert f"`# {form['example']}`" in notation_markdown()


def test_the_notebook_table_promises_what_the_parser_reads():
    # Read the rendered table back: each row's names, and no others, are
    # the names the parser gives that row's size.
    meaning = {row["meaning"]: row["key"] for row in _NOTATION["size"]}
    promised = {}
    for line in notation_markdown().splitlines():
        cells = [c.strip() for c in line.split("|")[1:-1]]
        if len(cells) == 2 and cells[0] in meaning:
            promised[meaning[cells[0]]] = [n.strip(" `")
                                           for n in cells[1].split(",")]
    assert promised == {k: list(v) for k, v in VOCABULARY.items()}
    for key, names in promised.items():
        assert {size_of(n) for n in names} == {key}


def test_never_ran_region_needs_only_some_comment():
    # Task 2.2 is not traced (causal=False only): any comment will do...
    source = with_regions(REFERENCE, {"2.2": """
        future = torch.ones(seq, seq, device=x.device).triu(1).bool()
        scores = scores.masked_fill(future, float("-inf"))  # masked
    """})
    assert issues_of(source, causal=(False,)) == []
    # ... but a name that held a tensor elsewhere needs one.
    bare = with_regions(REFERENCE, {"2.2": """
        future = torch.ones(seq, seq, device=x.device).triu(1).bool()
        scores = scores.masked_fill(future, float("-inf"))
    """})
    line = line_of(bare, "scores = scores.masked_fill")
    issues = issues_of(bare, causal=(False,))
    assert [(i.line, i.kind, i.task) for i in issues] == \
        [(line, "missing", "2.2")]
    assert "did not run" in issues[0].message


def test_non_tensor_statements_need_nothing():
    source = with_regions(REFERENCE, {"1.2": """
        scale = x.shape[-1]
        parts = []
        q, k, v = self.q(x), self.k(x), self.v(x)  # [bs, seq, hidden]
        parts.append(q)
        scale = q.shape[-1] ** 0.5
        probs = torch.softmax(q @ k.mT / scale, -1)  # [bs, seq, seq]
        return probs @ v  # [bs, seq, hidden]
    """})
    assert issues_of(source) == []


def test_nanogpt_style_passes():
    source = with_regions(REFERENCE, {
        "2.1": """
            B, T, C = x.size()
            q = self.q(x).view(B, T, self.num_heads, self.head_size)
            q = q.transpose(1, 2)  # (B, nh, T, hs)
            k = self.k(x).view(B, T, self.num_heads, -1).transpose(1, 2)
            # (B, T, C) -> (B, T, nh, hs) -> (B, nh, T, hs)
            v = self.v(x).view(B, T, self.num_heads, -1).transpose(1, 2)
            # (B, nh, T, hs)
            scores = (q @ k.transpose(-2, -1)) * (1 / self.scale)
            # (B, nh, T, hs) x (B, nh, hs, T) -> (B, nh, T, T)
        """})
    # "B, T, C = x.size()" binds ints; q on its first line is
    # [B, T, nh, hs] and its comment is the chain of the second q.
    line = line_of(source, "q = self.q(x).view")
    assert [(i.line, i.kind) for i in issues_of(source)] == \
        [(line, "missing")]


def test_scalar_tensors_need_no_comment():
    source = with_regions(REFERENCE, {"1.2": """
        scale = torch.tensor(float(self.q.out_features)).sqrt()
        q, k, v = self.q(x), self.k(x), self.v(x)  # [bs, seq, hidden]
        probs = torch.softmax(q @ k.mT / scale, -1)  # [bs, seq, seq]
        return probs @ v  # [bs, seq, hidden]
    """})
    assert issues_of(source) == []


def test_claims_may_describe_non_tensor_targets_too():
    source = with_regions(REFERENCE, {"1.2": """
        q, n = self.q(x), x.shape[1]  # [bs, seq, hidden], seq_len (int)
        k, v = self.k(x), self.v(x)  # [bs, seq, hidden]
        probs = torch.softmax(q @ k.mT / q.shape[-1] ** 0.5, -1)
        # [bs, seq, seq]
        return probs @ v  # [bs, seq, hidden]
    """})
    assert issues_of(source) == []


def test_growing_tensor_with_loop_variable_name():
    growing = with_regions(REFERENCE, MH_GROWING)
    for comment in ("[bs, seq, k * hs] for k heads", "[bs, seq, hs]"):
        source = growing.replace("# [bs, seq, i * hs]", f"# {comment}")
        assert source != growing
        assert issues_of(source) == []
    # The dimensions that do not vary are still checked.
    wrong = growing.replace("# [bs, seq, i * hs]", "# [seq, bs, hs]")
    assert [i.kind for i in issues_of(wrong)] == ["wrong"]


def test_never_ran_lines_are_never_wrong():
    source = REFERENCE.replace("        # [seq, seq]\n",
                               "        # [bs, hidden, hidden, 1]\n")
    assert issues_of(source, causal=(False,)) == []
    assert [i.kind for i in issues_of(source)] == ["wrong"]


def _reference_statements() -> list[tuple[int, str]]:
    """(line, shape comment) of every commented reference statement."""
    observed = trace(REFERENCE)
    lines = REFERENCE.splitlines()
    tree = ast.parse(REFERENCE)
    found = []
    for _, node in student_statements(tree, find_regions(REFERENCE, tree)):
        if node.lineno not in observed:
            continue
        for n in (node.end_lineno, node.end_lineno + 1):
            text = lines[n - 1]
            if "# [" in text:
                found.append((n, text[text.index("# ["):]))
                break
    return found


@pytest.mark.parametrize("line, comment", _reference_statements())
def test_each_reference_comment_is_checked(line, comment):
    lines = REFERENCE.splitlines()
    old = lines[line - 1]
    # A wrong claim: the dimensions reversed, plus one.
    wrong = "# [" + ", ".join(["1"] + comment[3:-1].split(", ")[::-1]) + "]"
    lines[line - 1] = old.replace(comment, wrong)
    issues = issues_of("\n".join(lines) + "\n")
    assert [i.kind for i in issues] == ["wrong"]
    assert issues[0].line <= line
    # No comment at all.
    lines[line - 1] = old.replace(comment, "").rstrip()
    if not lines[line - 1].strip():
        del lines[line - 1]
    issues = issues_of("\n".join(lines) + "\n")
    assert [i.kind for i in issues] == ["missing"]


# --------------------------------------------------------------------------
# Mistakes lose points, with a message naming the line and the reason

def test_missing_comment():
    source = REFERENCE.replace("        )  # [bs, seq, seq]", "        )")
    line = line_of(source, "probs = torch.softmax(")
    assert issues_of(source) == [ShapeIssue(
        line, "1.2", "SelfAttention", "missing",
        f"line {line}: `probs = ...` binds a tensor but has no shape comment"
        " (write e.g. `# [batch_size, seq_len, seq_len]`)")]


def test_missing_comment_example_uses_products():
    source = REFERENCE.replace("        # [bs * num_heads, seq, seq]\n", "")
    line = line_of(source, "probs = probs.reshape")
    issues = issues_of(source)
    assert [(i.line, i.kind, i.cls) for i in issues] == \
        [(line, "missing", "MultiHeadSelfAttention")]
    assert "`# [batch_size * num_heads, seq_len, seq_len]`" in \
        issues[0].message


def test_wrong_claim_message():
    source = REFERENCE.replace("return probs @ v  # [bs, seq, hidden]",
                               "return probs @ v  # [bs, seq, seq]")
    line = line_of(source, "return probs @ v")
    assert issues_of(source) == [ShapeIssue(
        line, "1.2", "SelfAttention", "wrong",
        f"line {line}: comment claims [bs, seq, seq] = [2, 5, 5] but the "
        "tensor is [2, 5, 12]")]


@pytest.mark.parametrize("old, new", [
    ("att = self.mix(att)  # [bs, seq, hidden]",
     "att = self.mix(att)  # [bs, seq, input_size]"),
    ("att = probs @ v  # [bs, heads, seq, head_size]",
     "att = probs @ v  # [bs, seq, heads, head_size]"),
    ("att = probs @ v  # [bs, heads, seq, head_size]",
     "att = probs @ v  # [bs, heads, seq]"),
    ("        # [bs * num_heads, seq, seq]",
     "        # [bs, num_heads, seq, seq]"),
    ("self.v(x)  # [bs, seq, hidden]", "self.v(x)  # [bs, seq, seq]"),
    ("# [bs, seq, hidden]\n        probs = torch",
     "# [bs, seq, hidden], [bs, seq, seq]\n        probs = torch"),
])
def test_wrong_claims(old, new):
    assert old in REFERENCE
    source = REFERENCE.replace(old, new)
    issues = issues_of(source)
    assert [i.kind for i in issues] == ["wrong"]
    assert issues[0].message.startswith(f"line {issues[0].line}: comment "
                                        "claims")


def test_wrong_tuple_message():
    source = REFERENCE.replace("self.v(x)  # [bs, seq, hidden]",
                               "self.v(x)  # [bs, seq, seq]")
    line = line_of(source, "q, k, v = self.q(x)")
    assert issues_of(source)[0].message == (
        f"line {line}: comment claims [bs, seq, seq] = [2, 5, 5] but the "
        "tensors are [2, 5, 12], [2, 5, 12], [2, 5, 12]")


def _with_a_4d_call(source: str, line: int,
                    shape: tuple[int, ...] = (2, 3, 5, 12)) -> dict:
    """The trace of ``source`` with ``line`` also run on a tensor of
    ``shape``: a 4-d one, as a helper shared by a 3-d and a 4-d task is
    (or a 2-d one, a throwaway call on ``x[0]``)."""
    observed = dict(trace(source))      # trace() is cached: a copy
    observed[line] = observed[line] + [[list(shape)]]
    return observed


def test_an_ellipsis_is_the_leading_dimensions_of_a_line_of_two_ranks():
    source = REFERENCE.replace("return probs @ v  # [bs, seq, hidden]",
                               "return probs @ v  # [..., seq, hidden]")
    line = line_of(source, "return probs @ v")
    assert check_shape_comments(source, _with_a_4d_call(source, line),
                                DIMS, METHODS) == []
    # another task's traces bound the line at 4-d: as good
    observed = trace(source)
    assert check_shape_comments(source, observed, DIMS, METHODS,
                                ranks={line: {(3,), (4,)}}) == []
    # one rank everywhere: `...` is the first dimension, the rest named
    assert check_shape_comments(source, observed, DIMS, METHODS,
                                ranks={line: {(3,)}}) == []
    # the control: the last dimensions still have to fit
    wrong = source.replace("# [..., seq, hidden]", "# [..., seq, seq]")
    [issue] = check_shape_comments(wrong, _with_a_4d_call(wrong, line),
                                   DIMS, METHODS)
    assert issue.kind == "wrong" and issue.message.startswith(
        f"line {line}: comment claims [..., seq, seq] = [..., 5, 5]")


def test_an_ellipsis_names_what_one_tasks_calls_share():
    """A dummy call on ``x[0]`` in the task's own forward binds the line
    at 2-d and 3-d: ``...`` may stand only for the leading dimension they
    do not share, so ``[..., hidden]`` still costs the comment and
    ``[..., seq, hidden]`` (the control) does not."""
    source = REFERENCE.replace("return probs @ v  # [bs, seq, hidden]",
                               "return probs @ v  # [..., hidden]")
    line = line_of(source, "return probs @ v")
    [issue] = check_shape_comments(
        source, _with_a_4d_call(source, line, (5, 12)), DIMS, METHODS)
    assert issue.kind == "wrong" and "the last 2 are the same in every " \
        "call: name them" in issue.message, issue.message
    named = source.replace("# [..., hidden]", "# [..., seq, hidden]")
    assert check_shape_comments(named, _with_a_4d_call(named, line, (5, 12)),
                                DIMS, METHODS) == []


def test_a_comment_must_describe_each_rank_of_the_tasks_own_calls():
    """A throwaway call on ``x[0]`` binds the line at 2-d: a comment that
    fits only that call (no batch dimension) describes no real one."""
    source = REFERENCE.replace("return probs @ v  # [bs, seq, hidden]",
                               "return probs @ v  # [seq, hidden]")
    line = line_of(source, "return probs @ v")
    [issue] = check_shape_comments(
        source, _with_a_4d_call(source, line, (5, 12)), DIMS, METHODS)
    assert issue.kind == "wrong" and issue.line == line
    # Without the throwaway call, the same comment is wrong as well; with
    # a comment for both ranks, nothing is.
    assert [i.line for i in issues_of(source)] == [line]
    both = source.replace("# [seq, hidden]", "# [..., seq, hidden]")
    assert check_shape_comments(both, _with_a_4d_call(both, line, (5, 12)),
                                DIMS, METHODS) == []


def test_a_throwaway_call_on_a_transposed_input_makes_no_claim_fit():
    """A call on ``x.transpose(0, 1)`` binds the line at the same rank
    with two places swapped: a comment fitting only that call is wrong;
    a loop's one growing place stays free (test_growing_tensor_...)."""
    source = REFERENCE.replace("return probs @ v  # [bs, seq, hidden]",
                               "return probs @ v  # [seq, bs, hidden]")
    line = line_of(source, "return probs @ v")
    [issue] = check_shape_comments(
        source, _with_a_4d_call(source, line, (5, 2, 12)), DIMS, METHODS)
    assert issue.kind == "wrong" and issue.line == line
    # Nor does a loop variable the notation cannot read.
    loose = source.replace("# [seq, bs, hidden]", "# [i, j, hidden]")
    [issue] = check_shape_comments(
        loose, _with_a_4d_call(loose, line, (5, 2, 12)), DIMS, METHODS)
    assert issue.line == line and issue.kind in ("wrong", "unreadable")


def test_a_wrong_comment_stays_wrong_beside_a_line_that_never_ran():
    """A traced call that stopped after a line: the next line bound
    nothing, so no comment fits it, and the wrong comment is reported as
    wrong (not as the neighbour's, leaving the line "missing" one)."""
    source = REFERENCE.replace(
        ")  # [bs, seq, seq]\n        return probs @ v",
        ")\n        # [bs, seq, hidden]\n        return probs @ v")
    line = line_of(source, "probs = torch.softmax(")
    observed = dict(trace(source))
    observed.pop(line_of(source, "return probs @ v"))
    found = [i for i in check_shape_comments(source, observed, DIMS, METHODS)
             if i.line == line]
    assert [i.kind for i in found] == ["wrong"]


def test_an_ellipsis_on_a_line_of_one_rank_is_the_first_dimension():
    # A line that always binds [2, 5, 12]: `...` may stand for the batch
    # (a helper written for any batch) but "[..., hidden]" would dodge
    # naming the sequence.
    source = REFERENCE.replace("return probs @ v  # [bs, seq, hidden]",
                               "return probs @ v  # [..., hidden]")
    line = line_of(source, "return probs @ v")
    [issue] = issues_of(source)
    assert issue.kind == "wrong" and issue.message == (
        f"line {line}: comment claims [..., hidden] = [..., 12] but the "
        "tensor is [2, 5, 12]: `...` may stand for the first dimension "
        "only; name the last 2")
    named = source.replace("# [..., hidden]", "# [..., seq, hidden]")
    assert issues_of(named) == []


@pytest.mark.parametrize("comment, token", [
    ("[bs, sq, hidden]", "sq"), ("[b h d]", "h"),
    ("[bs, seq, hidden_units]", "hidden_units"), ("[bs, ..., hidden]", "..."),
    ("[...]", "..."),
    ("[bs; seq; hidden]", ";"), ("[bs x seq x hidden]", "x"),
    ("[bs, seq, hidden // 1]", "/"), ("(bs, seq, hiden)", "hiden"),
])
def test_unreadable(comment, token):
    source = REFERENCE.replace("return probs @ v  # [bs, seq, hidden]",
                               f"return probs @ v  # {comment}")
    line = line_of(source, "return probs @ v")
    issues = issues_of(source)
    assert [(i.line, i.kind) for i in issues] == [(line, "unreadable")]
    assert f"`{token}" in issues[0].message
    assert "batch_size (bs" in issues[0].message


def test_unrelated_comment_is_missing_not_wrong():
    source = REFERENCE.replace("return probs @ v  # [bs, seq, hidden]",
                               "return probs @ v  # weighted sum")
    assert [i.kind for i in issues_of(source)] == ["missing"]


def test_dims_per_class_and_task_filter():
    source = REFERENCE
    observed = trace(source)
    other = dict(DIMS, hidden=9)
    issues = check_shape_comments(source, observed, DIMS, METHODS,
                                  dims_by_class={"SelfAttention": other})
    assert {i.cls for i in issues} == {"SelfAttention"}
    assert all(i.kind == "wrong" for i in issues)
    assert check_shape_comments(source, observed, DIMS, METHODS,
                                tasks={"2.1"},
                                dims_by_class={"SelfAttention": other}) == []


def test_unparsable_source_and_string_keys():
    assert check_shape_comments("def f(:\n", {}, DIMS, METHODS) == []
    observed = {str(k): v for k, v in trace(REFERENCE).items()}
    assert check_shape_comments(REFERENCE, observed, DIMS, METHODS) == []


def test_statement_text():
    tree = ast.parse(REFERENCE)
    found = dict((n.lineno, n) for _, n in
                 student_statements(tree, find_regions(REFERENCE, tree)))
    assert statement_text(REFERENCE, found[line_of(
        REFERENCE, "probs = torch.softmax(")]) == "probs = ..."
    assert statement_text(REFERENCE, found[line_of(
        REFERENCE, "return probs @ v")]) == "return probs @ v"
    assert statement_text(REFERENCE, found[line_of(
        REFERENCE, "q, k, v = self.q(x)")]) == "q, k, v = ..."


def test_regions_after_unclosed_start_marker():
    source = textwrap.dedent("""\
        def f(x):
            # Task 1
            # YOUR CODE STARTS HERE
            a = x
            # Task 2
            # YOUR CODE STARTS HERE
            b = x
            # YOUR CODE ENDS HERE
            return b
        """)
    regions = find_regions(source)
    assert [(r.task, r.start, r.end) for r in regions] == \
        [("1", 4, 5), ("2", 7, 7)]


# --------------------------------------------------------------------------
# Integration with the worker's tracer, when it is available

def test_reference_with_worker_tracer():
    worker = pytest.importorskip("autograder.sandbox.worker")
    protocol = pytest.importorskip("autograder.sandbox.protocol")
    if not hasattr(worker, "execute_probes"):
        pytest.skip("autograder.sandbox.worker.execute_probes not available")
    torch.manual_seed(0)
    x = torch.randn(DIMS["batch_size"], DIMS["seq_len"], DIMS["input_size"])
    probes = [protocol.Probe("sa", "SelfAttention",
                             {"input_size": 7, "hidden": 12}, args=[x],
                             trace_shapes=True)]
    for causal in (False, True):
        probes.append(protocol.Probe(
            f"mh{causal}", "MultiHeadSelfAttention",
            {"input_size": 7, "hidden": 12, "num_heads": 3,
             "causal": causal}, args=[x],
            kwargs={"return_attention": True}, trace_shapes=True))
    observed: dict[int, list[list[list[int]]]] = {}
    for result in worker.execute_probes(REFERENCE, "modeling_attention.py",
                                        probes):
        assert result.ok, result.message
        for line, runs in result.shapes.items():
            seen = observed.setdefault(int(line), [])
            seen.extend(r for r in runs if r not in seen)
    # (what ran without a tensor, function entries and the canary, line
    # 0, are recorded with no shape; given code is traced too)
    marked = find_regions(REFERENCE)
    assert {line: runs for line, runs in observed.items()
            if any(runs) and any(r.start <= line <= r.end for r in marked)
            } == trace(REFERENCE)
    assert check_shape_comments(REFERENCE, observed, DIMS, METHODS) == []


def test_docs_show_the_notation():
    # docs/shape-comments.md's notation block is written by `make facts`
    # (kit/generate/facts.py) from shape_notation.toml.
    doc = (ROOT / "docs/shape-comments.md").read_text()
    assert notation_markdown() in doc


BOOK_STYLE = '''\
class Head:
    def forward(self, x):
        # Task 9.1
        # YOUR CODE STARTS HERE
        keys = self.W_key(x)  # [b, num_tokens, d_out]
        mask = self.mask[:x.shape[1], :x.shape[1]]  # [num_tokens, num_tokens]
        ctx = keys.view(2, 5, 3, 4)  # [b, num_tokens, num_heads, head_dim]
        full = self.mask  # [context_length, context_length]
        return ctx  # [b, num_tokens, num_heads, head_dim]
        # YOUR CODE ENDS HERE
'''


def test_grader_size_names_are_understood():
    # The grader may name sizes after the constructor's arguments.
    dims = {"batch_size": 2, "seq_len": 5, "d_in": 7, "d_out": 12,
            "context_length": 9, "num_heads": 3}
    observed = {5: [[[2, 5, 12]]], 6: [[[5, 5]]], 7: [[[2, 5, 3, 4]]],
                8: [[[9, 9]]], 9: [[[2, 5, 3, 4]]]}
    assert check_shape_comments(BOOK_STYLE, observed, dims, METHODS) == []
    wrong = {**observed, 8: [[[9, 5]]]}
    assert [(i.line, i.kind) for i in
            check_shape_comments(BOOK_STYLE, wrong, dims, METHODS)] == \
        [(8, "wrong")]
    # Where the grader has no such size, the claim cannot match.
    del dims["context_length"]
    issue, = check_shape_comments(BOOK_STYLE, observed, dims, METHODS)
    assert (issue.line, issue.kind) == (8, "wrong")
    assert "[context_length, context_length] = [?, ?]" in issue.message


# --------------------------------------------------------------------------
# Hostile comments: read within a budget, and never a free pass

# comment -> what the message must say
HOSTILE_COMMENTS = {
    # an 88 KB block once cost the grading process > 600 s
    "100 KB block": ("\n".join(["# [bs, seq, hidden] x (a b c) d -> [bs] zz"
                                " x zz x zz"] * 2200), "characters long"),
    # once a RecursionError, "could not evaluate, no deduction"
    "1500-deep brackets": ("# " + "[" * 1500 + "]" * 1500,
                           "characters long"),
    "1500-deep call": ("# f" + "(" * 1500 + ")" * 1500, "characters long"),
    "deep in a short comment": ("# [" + "(" * 20 + "bs" + ")" * 20 +
                                ", seq, seq]", "nested more than"),
    "too many terms": ("# [" + " * ".join(["bs"] * 40) + ", seq, seq]",
                       "terms in a dimension"),
    # many shapes in one comment: each is read once
    "unknown names": ("# " + "[bs, zz] " * 66, "cannot read `zz`"),
}


@pytest.mark.parametrize("comment, says", HOSTILE_COMMENTS.values(),
                         ids=HOSTILE_COMMENTS.keys())
def test_hostile_comment_is_an_unreadable_deduction(comment, says):
    # The only comment of a tensor statement: the check must read it within
    # its budget and charge it, saying why.
    indented = textwrap.indent(comment, " " * 8)
    source = REFERENCE.replace("        )  # [bs, seq, seq]\n",
                               f"        )\n{indented}\n")
    line = line_of(source, "probs = torch.softmax(")
    issues = issues_of(source)
    assert [(i.line, i.kind) for i in issues] == [(line, "unreadable")]
    assert says in issues[0].message


def test_long_prose_next_to_a_right_comment_costs_nothing():
    # The budget applies per text: a right comment on the line still counts.
    prose = textwrap.indent("\n".join(["# some long explanation here"] * 50),
                            " " * 8)
    source = REFERENCE.replace("        probs = torch.softmax(\n",
                               f"{prose}\n        probs = torch.softmax(\n")
    assert issues_of(source) == []


def test_a_throwaway_call_frees_no_place_of_a_wrong_claim():
    # forward called again on x[:1]: the batch place then varies between
    # the runs, as a loop's growing place would, but a wrong claim there
    # ([seq, ...] for the batch) divides neither run's size.
    honest = REFERENCE.replace(
        "        split = (bs, seq, self.num_heads, self.head_size)\n",
        "        if bs > 1:\n"
        "            self.forward(x[:1], return_attention)\n"
        "        split = (bs, seq, self.num_heads, self.head_size)\n")
    assert honest != REFERENCE
    assert issues_of(honest) == []
    wrong = honest.replace("att = self.mix(att)  # [bs, seq, hidden]",
                           "att = self.mix(att)  # [seq, seq, hidden]")
    assert [(i.line, i.kind) for i in issues_of(wrong)] == [
        (line_of(wrong, "att = self.mix(att)"), "wrong")]
