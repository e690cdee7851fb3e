"""The in-process probe runner (autograder/sandbox/worker.py) on the reference
solution and on small broken variants of it."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import torch

from autograder.submission import regions
from autograder.sandbox.protocol import (CRASH, ERROR, IMPORT_ERROR, MEMORY,
                                         OK, Probe)
from autograder.sandbox.shape_recorder import instrument
from autograder.sandbox.worker import execute_probes
from kit_tests.rubrics import live_task_methods

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = (ROOT / "solutions/transformer_lm/modeling_attention.py"
             ).read_text()
FILENAME = "/submission/transformer_lm/modeling_attention.py"  # need not exist

SA_INIT = {"input_size": 7, "hidden": 9}
MH_INIT = {"input_size": 7, "hidden": 9, "num_heads": 3, "causal": True,
           "dropout": 0.0}


def x(batch: int = 2, seq: int = 5, size: int = 7) -> torch.Tensor:
    return torch.randn(batch, seq, size, generator=torch.Generator()
                       .manual_seed(batch * 100 + seq))


def run(source: str, *probes: Probe):
    return list(execute_probes(source, FILENAME, list(probes)))


def sa_probe(**kw) -> Probe:
    return Probe(kw.pop("id", "sa"), "SelfAttention", SA_INIT,
                 args=[x()], **kw)


def mh_probe(**kw) -> Probe:
    init = {**MH_INIT, **kw.pop("init", {})}
    kw.setdefault("args", [x()])
    return Probe(kw.pop("id", "mh"), "MultiHeadSelfAttention", init, **kw)


def skeleton(source: str = REFERENCE) -> str:
    """The reference with every student region replaced by a raise, like
    the generated student skeleton."""
    lines = source.splitlines()
    for region in reversed(regions.find_regions(source)):
        indent = re.match(r"\s*", lines[region.start - 1]).group(0)
        lines[region.start - 1:region.end] = [
            f'{indent}raise NotImplementedError("Task {region.task} not '
            f'implemented yet: see the comment above")']
    return "\n".join(lines) + "\n"


def replace_line(source: str, old: str, new: str) -> str:
    assert old in source, old
    return source.replace(old, new, 1)


def line_of(source: str, text: str) -> int:
    return next(i for i, line in enumerate(source.splitlines(), 1)
                if text in line)


def test_reference_outputs_match_direct_call():
    torch.manual_seed(0)
    state = {"q.weight": torch.randn(9, 7), "q.bias": torch.randn(9),
             "k.weight": torch.randn(9, 7), "k.bias": torch.randn(9),
             "v.weight": torch.randn(9, 7), "v.bias": torch.randn(9)}
    [result] = run(REFERENCE, sa_probe(state=state))
    assert result.status == OK, result.message
    assert result.output_kind == "tensor"
    namespace: dict = {}
    exec(compile(REFERENCE, "ref", "exec"), namespace)
    ref = namespace["SelfAttention"](**SA_INIT)
    ref.load_state_dict(state)
    [out] = result.outputs
    assert out.dtype == torch.float32 and out.is_contiguous()
    torch.testing.assert_close(out, ref(x()).detach())


def test_multi_head_tuple_output_and_seeded_dropout():
    probe = mh_probe(init={"dropout": 0.5}, train=True, seed=3,
                     kwargs={"return_attention": True})
    first, second = run(REFERENCE, probe, probe)
    assert first.status == OK and first.output_kind == "tuple"
    assert [list(t.shape) for t in first.outputs] == [[2, 5, 9], [6, 5, 5]]
    for a, b in zip(first.outputs, second.outputs):
        assert torch.equal(a, b)   # same seed, same dropout mask
    assert (first.outputs[1] == 0).any()


def test_probe_args_are_not_modified():
    source = replace_line(REFERENCE, "        bs, seq, _ = x.shape",
                          "        x.mul_(0)\n        bs, seq, _ = x.shape")
    probe = mh_probe()
    before = probe.args[0].clone()
    run(source, probe)
    assert torch.equal(probe.args[0], before)


@pytest.mark.parametrize("state, message", [
    ({"q.weight": torch.zeros(7, 9)},
     "q.weight has shape [9, 7], expected [7, 9]"),
    ({"query.weight": torch.zeros(9, 7)},
     "SelfAttention has no attribute 'query'"),
    ({"q.weight.data.foo": torch.zeros(1)}, "no attribute 'foo'"),
])
def test_state_loading_errors(state, message):
    [result] = run(REFERENCE, sa_probe(state=state))
    assert result.status == ERROR and result.phase == "load"
    assert message in result.message


def test_state_target_not_a_tensor():
    [result] = run(REFERENCE, mh_probe(state={"num_heads": torch.zeros(1)}))
    assert result.status == ERROR
    assert "num_heads is a int, expected a tensor" in result.message


def test_inspect_reports_attributes_without_calling():
    [result] = run(REFERENCE, mh_probe(init={"dropout": 0.25}, inspect=True,
                                       call=False))
    assert result.status == OK and result.outputs == []
    attrs = result.attributes
    assert attrs["q"] == {"type": "Linear", "in_features": 7,
                          "out_features": 9, "bias": True}
    assert attrs["mix"]["in_features"] == 9
    assert attrs["dropout"] == {"type": "Dropout", "p": 0.25}
    assert attrs["num_heads"] == {"type": "int", "value": 3}
    assert attrs["causal"] == {"type": "bool", "value": True}


def test_skeleton_keeps_not_implemented_message_verbatim():
    results = run(skeleton(), sa_probe(), mh_probe())
    assert results[0].status == ERROR and results[0].phase == "init"
    assert results[0].message == \
        "Task 1.1 not implemented yet: see the comment above"
    assert results[0].exception == "NotImplementedError"


def test_a_libraries_not_implemented_error_is_no_task_left_undone():
    """A ModuleList called raises torch's NotImplementedError: it reads
    as any error (type, message, the student's line), and the task is not
    said to be unwritten."""
    from autograder.probes import is_not_implemented
    source = replace_line(REFERENCE, "        return att\n",
                          "        return nn.ModuleList([])(att)\n")
    [result] = run(source, mh_probe())
    assert result.exception == "NotImplementedError"
    assert result.message.startswith("NotImplementedError: Module "
                                     "[ModuleList] is missing")
    assert "in forward: return nn.ModuleList([])(att)" in result.message
    assert not is_not_implemented(result)
    [own] = run(skeleton(), sa_probe())
    assert is_not_implemented(own)


def test_exception_names_type_and_student_line():
    bad = "        att = probs @ v  # [bs, heads, seq, head_size]"
    source = replace_line(REFERENCE, bad,
                          "        att = probs @ v.transpose(2, 3)")
    [result] = run(source, mh_probe())
    lineno = line_of(source, "att = probs @ v.transpose(2, 3)")
    assert result.status == ERROR and result.phase == "call"
    assert result.message.startswith("RuntimeError: ")
    assert f"line {lineno}, in forward: att = probs @ v.transpose(2, 3)" \
        in result.message
    assert result.line == lineno


def test_memory_error_is_memory_status():
    source = replace_line(REFERENCE, "        bs, seq, _ = x.shape",
                          "        raise MemoryError()")
    [result] = run(source, mh_probe())
    assert result.status == MEMORY


@pytest.mark.parametrize("ret, text", [
    ("None", "forward returned a NoneType"),
    ("{'att': att}", "forward returned a dict"),
    ("(att, 3)", "item 1 is a int"),
])
def test_non_tensor_return_is_an_error(ret, text):
    source = replace_line(REFERENCE, "            return att, probs",
                          f"            return {ret}")
    [result] = run(source, mh_probe(kwargs={"return_attention": True}))
    assert result.status == ERROR and text in result.message
    assert result.phase == "output"


def test_syntax_error_fails_every_probe_with_its_line():
    source = replace_line(REFERENCE, "        att = self.mix(att)",
                          "        att = self.mix(att")
    results = run(source, sa_probe(), mh_probe(), mh_probe(id="again"))
    assert [r.status for r in results] == [IMPORT_ERROR] * 3
    assert all("SyntaxError" in r.message for r in results)
    assert re.search(r"line \d+", results[0].message)


def test_exception_at_import_fails_every_probe():
    source = REFERENCE + "\nraise RuntimeError('boom at import')\n"
    results = run(source, sa_probe(), mh_probe())
    assert [r.status for r in results] == [IMPORT_ERROR] * 2
    assert "RuntimeError: boom at import" in results[0].message
    assert f"line {len(source.splitlines())}" in results[0].message


def test_sys_exit_is_a_crash_not_an_exit():
    source = replace_line(REFERENCE, "        bs, seq, _ = x.shape",
                          "        import sys; sys.exit(4)")
    [result] = run(source, mh_probe())
    assert result.status == CRASH
    assert "the submission exited (code 4) during probe mh" in result.message


def test_missing_class():
    source = REFERENCE.replace("class SelfAttention(", "class SelfAtention(")
    [result] = run(source, sa_probe())
    assert result.status == ERROR
    assert "no class or function SelfAttention" in result.message


def test_factory_function_and_parameter_count():
    # Part 3's gpt2_small_attention() is a function returning a module.
    source = REFERENCE + (
        "\n\ndef tiny_factory():\n"
        "    return SelfAttention(3, 2)\n")
    probe = Probe(id="factory", cls="tiny_factory", init={}, call=False,
                  inspect=True)
    [result] = run(source, probe)
    assert result.ok, result.message
    assert result.attributes["__parameters__"]["value"] == 3 * (3 * 2 + 2)


def test_factory_returning_a_non_module_is_an_error():
    source = REFERENCE + "\n\ndef not_a_module():\n    return 42\n"
    [result] = run(source, Probe(id="f", cls="not_a_module", init={},
                                 call=False))
    assert result.status == ERROR
    assert "not_a_module() returned a int, expected an nn.Module" \
        in result.message


# ---------------------------------------------------------------- shapes

def _reference_forward_statements() -> dict[int, ast.stmt]:
    tree = ast.parse(REFERENCE)
    found = regions.student_statements(tree, regions.find_regions(REFERENCE))
    return {node.lineno: node for region, node in found
            if region.function == "forward"
            and region.cls in ("SelfAttention", "MultiHeadSelfAttention")}


def test_every_reference_statement_gets_shapes():
    results = run(REFERENCE, sa_probe(trace_shapes=True),
                  mh_probe(trace_shapes=True,
                           kwargs={"return_attention": True}))
    assert all(r.status == OK for r in results), results
    # (lines that ran and bound no tensor and function entries are
    # recorded with no shape; line 0 is the canary; given code is traced
    # too, for the helpers it may run)
    marked = regions.find_regions(REFERENCE)
    traced = {line: runs for line, runs in
              {**results[0].shapes, **results[1].shapes}.items()
              if any(runs) and any(r.start <= line <= r.end for r in marked)}
    split = line_of(REFERENCE, "split = (bs, seq")  # binds ints: no shapes
    expected = set(_reference_forward_statements()) - {split}
    assert set(traced) == expected
    assert traced[line_of(REFERENCE, "q, k, v = self.q(x)")] == \
        [[[2, 5, 9], [2, 5, 9], [2, 5, 9]]]
    assert traced[line_of(REFERENCE, "future = torch.ones")] == [[[5, 5]]]
    assert traced[line_of(REFERENCE, "return probs @ v")] == [[[2, 5, 9]]]


def test_traced_outputs_equal_plain_outputs():
    plain, traced = run(REFERENCE, mh_probe(seed=5),
                        mh_probe(seed=5, trace_shapes=True))
    assert torch.equal(plain.outputs[0], traced.outputs[0])
    assert plain.shapes == {} and traced.shapes


def test_shapes_distinct_per_line_and_per_probe():
    loop = ("        for _ in range(3):\n"
            "            extra = torch.zeros(2)\n"
            "        for n in range(1, 4):\n"
            "            grow = torch.zeros(n)\n")
    source = replace_line(REFERENCE, "        split = (bs, seq,",
                          loop + "        split = (bs, seq,")
    first, second = run(source, mh_probe(trace_shapes=True),
                        mh_probe(trace_shapes=True, args=[x(1, 4)]))
    assert first.shapes[line_of(source, "extra = ")] == [[[2]]]
    assert first.shapes[line_of(source, "grow = ")] == [[[1]], [[2]], [[3]]]
    assert second.shapes[line_of(source, "q = self.q(x)")] == [[[1, 3, 4, 3]]]


def test_traced_error_keeps_original_line_numbers():
    source = replace_line(REFERENCE, "        att = self.mix(att)  #",
                          "        att = self.mix(att.T)  #")
    [result] = run(source, mh_probe(trace_shapes=True))
    lineno = line_of(source, "att = self.mix(att.T)")
    assert result.status == ERROR and result.line == lineno
    # Statements before the failure were recorded.
    assert line_of(source, "att = probs @ v") in result.shapes


def test_instrumentation_handles_attribute_aug_and_ann_assign():
    source = replace_line(
        REFERENCE, "        att = self.mix(att)  #",
        "        self.last: torch.Tensor = att\n"
        "        att += 0\n"
        "        att = self.mix(att)  #")
    [result] = run(source, mh_probe(trace_shapes=True))
    assert result.status == OK, result.message
    assert result.shapes[line_of(source, "self.last:")] == [[[2, 5, 9]]]
    assert result.shapes[line_of(source, "att += 0")] == [[[2, 5, 9]]]


def test_every_recorded_statement_calls_the_recorder_through_no_name():
    tree = instrument(REFERENCE, "autograder-x", live_task_methods())
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)
             and isinstance(n.func, ast.Constant)
             and str(n.func.value).startswith("autograder-x.")]
    assert not [n for n in ast.walk(tree) if isinstance(n, ast.Name)
                and "autograder" in n.id]
    for call in calls:
        call.func.attr = call.func.value.split(".", 1)[1]
    tree_src = ast.parse(REFERENCE)
    marked = regions.find_regions(REFERENCE)
    found = regions.student_statements(tree_src, marked)
    # (code outside the regions and function entries are recorded too)
    calls = [n for n in calls if n.func.attr != "entered" and any(
        r.start <= n.args[0].value <= r.end for r in marked)]
    # Every assignment and return in a region (tensor or not) is wrapped.
    assert len(calls) == sum(
        isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign))
        or isinstance(node, ast.Return) and node.value is not None
        for _, node in found)


def test_the_worker_reads_no_rubric():
    # The task methods come on the probe (Probe.methods): the worker, whose
    # jail may hide the rubric, reads none, not even when it is imported.
    import subprocess
    import sys
    import textwrap
    code = textwrap.dedent(f"""
        import autograder.rubric as rubric

        def refuse(*args, **kwargs):
            raise SystemExit("the worker read a rubric")

        rubric.load_rubric = refuse
        import autograder.homework as homework
        homework.current = homework.staff = refuse   # nor any homework
        from autograder.sandbox.worker import execute_probes
        from kit_tests.test_worker import REFERENCE, mh_probe
        [result] = execute_probes(REFERENCE, {FILENAME!r}, [mh_probe(
            trace_shapes=True,
            methods={{"MultiHeadSelfAttention": ("forward",)}})])
        assert result.status == "ok" and result.shapes, result
        print("traced", len(result.shapes))
    """)
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("traced"), done.stdout
