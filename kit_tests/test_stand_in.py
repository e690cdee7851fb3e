"""Stand-in units and evidence of attention, unit by
unit: the worker's stand-in heads (``Probe.stand_in``), the wrapper's
verdicts built on them, 3.4's seeded calls, and the test that weights
depend on the input. The catalogue entries of kit/variants/cascade.toml
grade the same end to end (test_grading_corpus)."""
from __future__ import annotations

import torch

from autograder.sandbox.probe_runner import run_probe
from autograder.sandbox.student_module import load_module
from autograder import homework
from autograder.checks.kinds import register_homework_kinds
from autograder.checks.base import Context
from autograder.submission.regions import owner_of_line
from autograder.sandbox.protocol import Probe, stand_in_output
from autograder.rubric import load_rubric
from autograder.values import load_cases
from kit import variants

# the attention homework's own kinds (kinds/: its profile's [data] kinds)
_OWN = register_homework_kinds(homework.current())
heads, size = _OWN["heads"], _OWN["size"]
causal = _OWN["projections"]

CASES = {c.name: c for c in load_cases()}
RUBRIC = load_rubric()


def _check(item: str):
    return next(c for c in RUBRIC.checks() if c.id == item)


def _module(source: str, name: str):
    return load_module(source, f"{name}.py",
                       name=f"cascade_{name}")


def _stand_in_probe(case_name: str = "mhw_small") -> Probe:
    case = CASES[case_name]
    return heads.ConcatenatedHeads._stand_in_probe(_check("3.2"), case)


def _known(probe: Probe, heads: int) -> torch.Tensor:
    return torch.cat([stand_in_output(probe.drawn_seed, k,
                                      probe.stand_in.shape)
                      for k in range(heads)], dim=-1)


def test_stand_in_heads_give_the_known_tensors_side_by_side():
    module = _module(homework.staff().reference.read_text(), "reference")
    real = module.CausalAttention
    probe = _stand_in_probe()
    result = run_probe(module, probe, "reference.py")
    assert result.ok, result.message
    heads = CASES["mhw_small"].init["num_heads"]
    assert torch.equal(result.outputs[0], _known(probe, heads))
    # The submission's own class is back for every later probe.
    assert module.CausalAttention is real


def test_stand_in_heads_that_hang_never_run():
    # The heads loop forever, but with stand-ins the wrapper answers.
    source = variants.find("cascade/heads_loop_forever").source()
    module = _module(source, "loop")
    result = run_probe(module, _stand_in_probe(), "loop.py")
    assert result.ok, result.message


def test_stand_in_heads_check_how_they_are_built_and_called():
    reference = homework.staff().reference.read_text()
    built = variants.apply_edits(reference, [(
        "            CausalAttention(d_in, d_out, context_length, dropout, "
        "qkv_bias)\n",
        "            CausalAttention(d_in, d_out * num_heads, context_length,"
        " dropout, qkv_bias)\n")], "test")
    result = run_probe(_module(built, "built"), _stand_in_probe(),
                       "built.py")
    assert not result.ok and "built with d_out=12; expected d_out=3" in \
        result.message, result.message
    called = variants.apply_edits(reference, [(
        "return torch.cat([head(x) for head in self.heads], dim=-1)",
        "return torch.cat([head(2 * x) for head in self.heads], dim=-1)")],
        "test")
    result = run_probe(_module(called, "called"), _stand_in_probe(),
                       "called.py")
    assert not result.ok and "not the input x" in result.message


def test_shared_heads_are_named_and_other_failures_are_not():
    source = variants.find("cascade/wrapper_shared_heads").source()
    probe = _stand_in_probe()
    result = run_probe(_module(source, "shared"), probe, "shared.py")
    verdict = heads.ConcatenatedHeads._stand_in(
        CASES["mhw_small"], result, probe, _check("3.2").params)
    assert not verdict.ok and "your heads are one module" in verdict.message
    # Reversed heads are not concatenated right, and not "one module".
    result.outputs = [torch.cat(list(reversed(
        _known(probe, 4).chunk(4, dim=-1))), dim=-1)]
    verdict = heads.ConcatenatedHeads._stand_in(
        CASES["mhw_small"], result, probe, _check("3.2").params)
    assert not verdict.ok and "one module" not in verdict.message


def test_weights_from_the_input_are_told_from_fixed_weights():
    torch.manual_seed(0)
    x = torch.randn(2, 5, 4)
    d = torch.randn(2, 5, 4)
    w_q, w_k, w_v = (torch.randn(4, 3) for _ in range(3))
    causal_mask = torch.ones(5, 5).triu(1).bool()

    def attention(t):
        scores = (t @ w_q) @ (t @ w_k).transpose(1, 2)
        weights = scores.masked_fill(causal_mask, -torch.inf).softmax(-1)
        return weights @ (t @ w_v)

    uniform = (~causal_mask).float() / (~causal_mask).sum(1, keepdim=True)

    def fixed(t):
        return uniform @ (t @ w_v) + 0.5

    line = [x, x + d, x + 2 * d]
    threshold = _check("3.1c").params.nonlinear_threshold
    assert causal.nonlinear([attention(t) for t in line], threshold)
    assert not causal.nonlinear([fixed(t) for t in line], threshold)
    assert not causal.nonlinear([t for t in line], threshold)   # returns x


def test_gpt2_calls_share_one_seed():
    # Dropout left on in eval draws the same masks in both 3.4 calls.
    check = _check("3.4")
    case = next(c for c in CASES.values() if c.cls == "gpt2_small_attention")
    _, _, _, made, own = size.ModuleSize()._probes(check, case)
    assert made.seed is not None and made.seed == own.seed
    assert made.drawn_seed == own.drawn_seed


def test_a_stand_in_probe_makes_no_second_call():
    """The second call (batch reversed) and the stand-ins (which accept
    only the probe's own x): together a correct wrapper would fail its
    second call, so a stand-in probe is called once."""
    from dataclasses import replace

    case = next(c for c in load_cases() if c.name == "mhw_small")
    check = next(c for c in load_rubric().checks() if c.id == "3.2")
    probe = replace(heads.ConcatenatedHeads._stand_in_probe(check, case),
                    again=True)
    module = load_module(homework.staff().reference.read_text(),
                         "reference.py", name="review_stand_in")
    result = run_probe(module, probe, "reference.py")
    assert result.ok, result.message
    assert result.again is None and result.changed == []


def _judge_wrapper(key: str):
    """Item 3.2's verdict on case mhw_small for catalogue entry ``key``,
    every probe answered in this process."""
    source = variants.find(key).source()
    name = key.replace("/", "_")
    module = _module(source, name)
    check, case = _check("3.2"), CASES["mhw_small"]
    kind = heads.ConcatenatedHeads()
    probes = kind.case_probes(check, case)
    results = [run_probe(module, probe, f"{name}.py") for probe in probes]
    # The wrapper's call raised on its own line (the rule's premise).
    assert owner_of_line(source, results[1].line) == case.cls
    ctx = Context(mistake_messages={}, source=source)
    return kind.judge(check, case, results, probes, ctx)


def test_heads_that_return_none_cost_the_wrapper_nothing():
    # torch.cat raises on the wrapper's own line, on its heads' None: with
    # stand-in heads the wrapper is right, so 3.2 passes.
    verdict = _judge_wrapper("cascade/heads_return_none")
    assert verdict.ok, verdict.message
    # The control: the same heads and a wrapper wrong with stand-ins too.
    verdict = _judge_wrapper("cascade/heads_return_none_wrapper_wrong")
    assert not verdict.ok and "NoneType" in verdict.message
