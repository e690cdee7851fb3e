"""Facts read from the code (autograder/checks/diagnosis/code_facts.py):
a pure call used as a statement, a layer called for nothing, a computed
name nothing reads afterwards, an integer division of literals that is not
whole; said beside the task's first failing item only, and never for code
that uses what it computes."""
from __future__ import annotations

import textwrap
from types import SimpleNamespace

import pytest

from autograder.checks.diagnosis import code_facts
from autograder.config import load_config
from autograder.grade import grade_source, sandbox_runner
from autograder.sandbox.worker import execute_probes
from kit_tests.test_worker import FILENAME, REFERENCE


def _found(body: str, init: str = "self.drop = nn.Dropout(0.1)") -> list:
    source = textwrap.dedent(f"""\
        import torch
        from torch import nn
        import torch.nn.functional as F

        class A(nn.Module):
            def __init__(self):
                super().__init__()
                {init}

            def forward(self, x, mask):
        """) + textwrap.indent(textwrap.dedent(body), " " * 8)
    found = code_facts.facts(source, "A", ("forward",))
    return [(d.line, d.text) for d in found]


def test_a_pure_call_used_as_a_statement_is_named_with_its_line():
    [(line, text)] = _found("""\
        s = x @ x.mT
        s.masked_fill(mask, float("-inf"))
        return s.softmax(-1)
        """)
    assert line == 12 and text.startswith(code_facts.MARK)
    assert "`s.masked_fill(mask, float('-inf'))`" in text
    assert "leaves `s` as it was" in text and "`masked_fill_`" in text
    [(_, text)] = _found("F.softmax(x, -1)\nreturn x\n")
    assert "computes `softmax(...)` and drops it" in text


def test_a_layer_called_for_nothing_and_the_controls():
    [(_, text)] = _found("self.drop(x)\nreturn x\n")
    assert "calls `self.drop` and drops what it returns" in text
    # Built in place, or not a layer, or not a tensor's method: silent.
    assert _found("self.drop(x)\nreturn x\n",
                  "self.drop = nn.Dropout(0.1, inplace=True)") == []
    assert _found("self.reset(x)\nreturn x\n") == []
    assert _found("seen = set()\nseen.add(1)\nout = []\nout.append(x)\n"
                  "return torch.cat(out) if seen else x\n") == []


def test_a_computed_name_nothing_reads_afterwards():
    [(line, text)] = _found("""\
        s = x @ x.mT
        s = s.masked_fill(mask, 0.0)
        return (x @ x.mT).softmax(-1)
        """)
    assert line == 12 and "assigns `s`, which no later line of `forward` " \
        "reads" in text
    used = "s = x @ x.mT\ns = s.masked_fill(mask, 0.0)\nreturn s\n"
    assert _found(used) == []


@pytest.mark.parametrize("body", [
    # read by a loop's next turn
    "s = x\nfor _ in range(2):\n    x = s.mul(2)\n    s = x.mul(2)\n"
    "return x\n",
    # read by a nested function called later
    "def f():\n    return s\ns = x.mul(2)\nreturn f()\n",
    # read through locals()
    "s = x.mul(2)\nreturn locals()['s']\n",
    # a name that says it is unused
    "_s = x.mul(2)\nreturn x\n",
])
def test_reads_the_text_order_cannot_see_are_never_called_dead(body):
    assert _found(body) == []


def test_an_integer_division_of_literals_that_is_not_whole():
    [(line, text)] = _found("return x / x.shape[-1] ** (1 // 2)\n")
    assert line == 11 and text.startswith(code_facts.DIVISION)
    assert "`1 // 2` is 0, not 0.5" in text
    assert _found("return x.view(-1, 8 // 2) / (x.shape[-1] // 2)\n") == []


def test_a_root_written_without_parentheses():
    [(_, text)] = _found("return x / x.shape[-1] ** 1 / 2\n")
    assert text.startswith(code_facts.PRECEDENCE)
    assert "`x.shape[-1] ** 1 / 2` is `(x.shape[-1] ** 1) / 2`" in text
    assert "`** 0.5`" in text
    [(_, text)] = _found("return x * x.shape[-1] ** -1 / 2\n")
    assert "`** -0.5`" in text
    assert _found("return x / x.shape[-1] ** 0.5 / 2\n") == []
    assert _found("return x / (x.shape[-1] ** (1 / 2))\n") == []


def test_bitwise_not_before_the_conversion_to_bool():
    [(_, text)] = _found("return x.masked_fill((~mask).bool(), 0.0)\n")
    assert text.startswith(code_facts.INVERT)
    assert "~1 is -2" in text and "`~mask.bool()`" in text
    assert _found("return x.masked_fill(~mask.bool(), 0.0)\n") == []


@pytest.mark.parametrize("inf", ['float("-inf")', "-torch.inf",
                                 "math.inf", "float(' +Infinity')"])
def test_a_product_with_a_literal_infinity(inf):
    [(_, text)] = _found(f"return x + mask * {inf}\n")
    assert text.startswith(code_facts.INFINITY) and "NaN" in text
    assert _found(f"return x.masked_fill(mask, {inf}) * 2\n") == []
    assert _found("return x * float('nan') * float('1e3')\n") == []


SOURCE = textwrap.dedent("""\
    class A:
        def forward(self, x):
            y = x.T
            return y

    def helper(x):
        return x
    """)


def test_a_warning_printed_for_a_line_of_the_task_is_quoted_once():
    printed = (
        "/s/mod.py:3: UserWarning: The use of `x.T` on tensors (Triggered "
        "internally at /x/TensorShape.cpp:4314.)\n  y = x.T\n"
        "/s/mod.py:3: UserWarning: The use of `x.T` on ten\n"   # cut
        "/s/other.py:3: UserWarning: elsewhere\n"
        "/s/mod.py:7: UserWarning: the helper, not a method of A\n"
        "print: /s/mod.py:3: UserWarning: not at a line's start\n")
    [fact] = code_facts.warned(printed, "/grader/mod.py", SOURCE, "A",
                               ("forward",))
    assert fact.line == 3 and fact.text.startswith(code_facts.WARNED)
    assert "at line 3 `y = x.T` (UserWarning): The use of \\`x.T\\`" \
        in fact.text and "Triggered" not in fact.text
    # a module-level task, as the rubric names it: the function, ("",)
    assert code_facts.warned(printed, "/grader/mod.py", SOURCE, "helper",
                             ("",))[0].line == 7


def test_tasks_are_found_as_the_rubric_names_them_wherever_indented():
    source = textwrap.dedent("""\
        if True:
            class A:
                def forward(self, x):
                    x.softmax(-1)
                    return x

        def build():
            y = 1 // 2
            return y
        """)
    assert [f.line for f in code_facts.facts(source, "A", ("forward",))] \
        == [4]
    assert [f.line for f in code_facts.facts(source, "build", ("",))] \
        == [8]


def _grade(items: list[bool]):
    outcomes = [SimpleNamespace(passed=p, lines=[]) for p in items]
    task = SimpleNamespace(cls="A", methods=("forward",))
    return outcomes, SimpleNamespace(tasks=[SimpleNamespace(
        task=task, items=[SimpleNamespace(outcome=o) for o in outcomes])],
        stdout="", filename="mod.py")


def test_said_beside_the_first_failing_item_only():
    source = "class A:\n    def forward(self, x):\n        x.softmax(-1)\n" \
             "        return x\n"
    outcomes, grade = _grade([True, False, False])
    code_facts.explain(grade, source)
    assert [len(o.lines) for o in outcomes] == [0, 1, 0]
    outcomes, grade = _grade([True, True])
    code_facts.explain(grade, source)
    assert [len(o.lines) for o in outcomes] == [0, 0]


@pytest.mark.e2e
def test_torchs_own_warning_reaches_the_failing_item():
    line = "attn_scores = queries @ keys.transpose(1, 2)"
    assert line in REFERENCE
    source = REFERENCE.replace(
        line, "attn_scores = torch.bmm(queries, keys.T)", 1)
    # The real sandbox: the worker prints the warning as a student's
    # process would (pytest's own capture would swallow it in-process).
    grade = grade_source(source, FILENAME, load_config(), sandbox_runner(),
                         public_only=True)
    lines = [line for t in grade.tasks for i in t.items
             for line in i.outcome.lines if line.startswith(
                 code_facts.WARNED)]
    assert len(lines) == 1 and "keys.T" in lines[0] and \
        "dimension other than 2" in lines[0]


@pytest.mark.e2e
def test_a_dropped_mask_is_named_in_the_graded_feedback():
    source = REFERENCE.replace(
        "attn_scores = attn_scores.masked_fill(mask_bool, -torch.inf)",
        "attn_scores.masked_fill(mask_bool, -torch.inf)", 1)
    assert source != REFERENCE

    def run(text, filename, probes):
        return list(execute_probes(text, filename, probes))
    grade = grade_source(source, FILENAME, load_config(), run,
                         public_only=True)
    lines = [(t.task.cls, line) for t in grade.tasks for i in t.items
             for line in i.outcome.lines if line.startswith(code_facts.MARK)]
    assert len(lines) == 1 and "attn_scores.masked_fill(mask_bool" in \
        lines[0][1]
    assert grade.score < grade.max_score


def test_a_list_of_one_call_repeated_is_one_object():
    [(line, text)] = _found("return x\n", "self.q, self.k, self.v = "
                            "[nn.Linear(4, 4)] * 3")
    assert line == 8 and text.startswith(code_facts.SHARED)
    assert "`[nn.Linear(4, 4)] * 3` repeats one object" in text
    assert "`[nn.Linear(4, 4) for _ in range(3)]`" in text
    # One call per element, or a list of several: nothing shared.
    assert _found("return x\n", "self.q, self.k, self.v = "
                  "[nn.Linear(4, 4) for _ in range(3)]") == []
    assert _found("return x\n", "self.pair = [nn.Linear(4, 4), "
                  "nn.Linear(4, 4)] * 1") == []


HELPER = '''\
def drop(w, p, training=False):
    return F.dropout(w, p=p, training=training)


'''


def test_a_training_flag_left_at_its_default():
    def found(call: str, helper: str = HELPER) -> list:
        source = textwrap.dedent("""\
            import torch
            from torch import nn
            import torch.nn.functional as F


            """) + helper + textwrap.dedent(f"""\
            class A(nn.Module):
                def forward(self, x):
                    return {call}
            """)
        return [d.text for d in code_facts.facts(source, "A", ("forward",))]
    [text] = found("drop(x, 0.5)")
    assert text.startswith(code_facts.TRAINING)
    assert "leaves `training` at its default, False" in text
    assert "`F.dropout(w, p=p, training=training)` (line 7), so that " \
           "dropout is off" in text
    [text] = found("F.dropout(x, 0.5)")
    assert "at its default, True: dropout in eval mode too" in text
    # Passed, by name or position, or a default of True: silent.
    assert found("drop(x, 0.5, training=self.training)") == []
    assert found("drop(x, 0.5, self.training)") == []
    assert found("F.dropout(x, 0.5, training=self.training)") == []
    assert found("drop(x, 0.5)", HELPER.replace("training=False",
                                                "training=True")) == []
    # A helper that never hands its flag on: nothing about it is known.
    assert found("drop(x, 0.5)", HELPER.replace(
        "training=training", "training=True")) == []


def test_dropout_that_runs_only_in_eval_mode():
    [(line, text)] = _found("if not self.training:\n"
                            "    x = self.drop(x)\nreturn x\n")
    assert line == 12 and text.startswith(code_facts.TRAINING)
    assert "`self.drop(x)` runs only in eval mode (the test `not " \
        "self.training` on line 11)" in text
    [(line, _)] = _found("if self.training:\n    pass\nelse:\n"
                         "    x = self.drop(x)\nreturn x\n")
    assert line == 14
    assert len(_found("if self.training is False:\n"
                      "    x = self.drop(x)\nreturn x\n")) == 1
    # In train mode, or unconditional, or not a dropout layer: silent.
    assert _found("if self.training:\n    x = self.drop(x)\nreturn x\n") \
        == []
    assert _found("return self.drop(x)\n") == []
    assert _found("if not self.training:\n    x = self.drop(x)\n"
                  "return x\n", "self.drop = nn.Identity()") == []


def test_a_loop_over_modules_walks_the_container_itself():
    [(line, text)] = _found("return torch.cat([m(x) for m in "
                            "self.drop.modules()], -1)\n")
    assert line == 11 and text.startswith(code_facts.WALKED)
    assert "`self.drop.modules()` yields `self.drop` itself first" in text
    assert "`for m in self.drop`" in text
    assert len(_found("for _, m in self.drop.named_modules():\n"
                      "    x = m(x)\nreturn x\n")) == 1
    # The container itself, or its direct children: silent.
    assert _found("return torch.cat([m(x) for m in self.drop], -1)\n") == []
    assert _found("return torch.cat([m(x) for m in "
                  "self.drop.children()], -1)\n") == []


def test_an_einsum_index_only_one_operand_has():
    [(_, text)] = _found("""\
        w = x.softmax(-1)
        return torch.einsum("bhqk,bhqd->bhqd", w, x)
        """)
    assert text.startswith(code_facts.ALONE)
    assert "sums its first operand over `k` on its own" in text
    # Paired, or kept in the output, or a single operand's sum: silent.
    assert _found('return torch.einsum("bhqk,bhkd->bhqd", x, x)\n') == []
    assert _found('return torch.einsum("bqk,bkd->bqkd", x, x)\n') == []
    assert _found('return torch.einsum("bqk->bq", x)\n') == []
    # einops' spelling: operands first, axes named between spaces.
    found = _found('return einsum(x, x, "b i d, b j e -> b i j")\n')
    assert [t.split(" on its own")[0][-16:] for _, t in found] == [
        "operand over `d`", "operand over `e`"]
    assert _found('return einsum(x, x, "b i d, b j d -> b i j")\n') == []


def test_a_fused_calls_dropout_without_the_mode():
    [(_, text)] = _found("return F.scaled_dot_product_attention(x, x, x, "
                         "dropout_p=0.1)\n")
    assert text.startswith(code_facts.TRAINING)
    assert "`dropout_p=0.1 if self.training else 0.0`" in text
    assert "or leave it out where the module has no dropout" in text
    [(_, text)] = _found("return F.scaled_dot_product_attention(x, x, x, "
                         "dropout_p=self.drop.p)\n")
    assert "dropout_p=self.drop.p)` drops out whatever" in text
    # A rate chosen by the mode on another line, or a call under a test
    # of the mode: silent.
    assert _found("p = self.drop.p if self.training else 0.0\n"
                  "return F.scaled_dot_product_attention(x, x, x, "
                  "dropout_p=p)\n") == []
    assert _found("if self.training:\n"
                  "    return F.scaled_dot_product_attention(x, x, x, "
                  "dropout_p=0.1)\n"
                  "return x\n") == []
    assert _found("return F.scaled_dot_product_attention(x, x, x, "
                  "dropout_p=0.1 if self.training else 0.0)\n") == []
    assert _found("return F.scaled_dot_product_attention(x, x, x, "
                  "dropout_p=0.0)\n") == []


def test_a_root_rounded_down():
    [(_, text)] = _found("return x / math.isqrt(x.size(-1))\n")
    assert text.startswith(code_facts.ROUNDED)
    assert "`math.isqrt(x.size(-1))` is the square root rounded down" in text
    [(_, text)] = _found("return x / int(x.size(-1) ** 0.5)\n")
    assert "`int(x.size(-1) ** 0.5)` is the square root rounded" in text
    # The root kept, or int() of something else: silent.
    assert _found("return x / math.sqrt(x.size(-1))\n") == []
    assert _found("return x[:int(x.size(-1) / 2)]\n") == []


def test_a_container_made_in_the_class_body_and_grown():
    def found(body: str, extra: str = "") -> list:
        source = textwrap.dedent("""\
            import torch
            from torch import nn


            class A(nn.Module):
                outs = []
            """) + textwrap.indent(textwrap.dedent(extra), "    ") + \
            textwrap.indent(textwrap.dedent(f"""\

                def forward(self, x):
                    {body}
                    return torch.cat(self.outs, -1)
                """), "    ")
        return [d.text for d in code_facts.facts(source, "A", ("forward",))]
    [text] = found("self.outs.append(x)")
    assert text.startswith(code_facts.CLASS_STATE)
    assert "line 6 `outs = []` is in the class body" in text
    assert text.endswith("Make a new one in the call that fills it.")
    # Made again per instance or per call, or only read: silent.
    assert found("self.outs.append(x)", """\

        def __init__(self):
            super().__init__()
            self.outs = []
        """) == []
    assert found("self.outs = [x]") == []
    assert found("y = len(self.outs)") == []


def test_an_added_input_multiplied_by_zero():
    [(_, text)] = _found("return torch.baddbmm(mask, x, x, beta=0)\n")
    assert text.startswith(code_facts.IGNORED)
    assert "so `mask` is multiplied by 0 and ignored" in text
    assert _found("return torch.baddbmm(mask, x, x, beta=1)\n") == []
    assert _found("return torch.baddbmm(mask, x, x, alpha=0.5)\n") == []
    # A placeholder made to be ignored (the scaled-bmm idiom): silent.
    assert _found("return torch.baddbmm(x.new_empty(2, 3, 3), x, x, "
                  "beta=0, alpha=0.5)\n") == []
    assert _found("e = torch.zeros(2, 3, 3)\n"
                  "return torch.baddbmm(e, x, x, beta=0)\n") == []


def test_a_helper_is_read_once_however_often_it_is_called(monkeypatch):
    calls = []
    real = code_facts._passes_flag
    monkeypatch.setattr(code_facts, "_passes_flag",
                        lambda f: calls.append(f.name) or real(f))
    source = textwrap.dedent("""\
        import torch.nn.functional as F
        from torch import nn


        """) + HELPER + textwrap.dedent("""\
        class A(nn.Module):
            def forward(self, x):
        """) + "        x = drop(x, 0.5)\n" * 200 + "        return x\n"
    found = code_facts.facts(source, "A", ("forward",))
    assert len(found) == 200 and calls == ["drop"]
