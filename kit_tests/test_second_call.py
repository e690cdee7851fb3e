"""Bugs that show on the second call, a terminal asked for, dropout left
on in eval mode: the worker's second call and what it reports,
the wire's bounds on it, the parent's verdicts, and the catalogue entries
of kit/variants/calls.toml (graded by test_grading_corpus.py)."""
from __future__ import annotations

import builtins
import sys

import pytest
import torch

from autograder.sandbox import wire
from autograder.sandbox.limits import LIMITS
from autograder.checks import values
from autograder.sandbox.protocol import ERROR, OK, Probe, ProbeResult
from autograder.sandbox.run_environment import no_terminal
from autograder.sandbox.worker import execute_probes
from kit import variants
from kit_tests.test_worker import (FILENAME, REFERENCE, replace_line, run,
                                   sa_probe, x)

CA_INIT = {"d_in": 7, "d_out": 4, "context_length": 11, "dropout": 0.0}
MASK_LINE = "        mask_bool = self.mask.bool()[:num_tokens, :num_tokens]\n"


def ca_probe(**kw) -> Probe:
    return Probe(kw.pop("id", "ca"), "CausalAttention",
                 kw.pop("init", CA_INIT), args=[x()], **kw)


def ca_source(new_mask_lines: str) -> str:
    """The reference with CausalAttention's mask line replaced."""
    text = REFERENCE
    start = text.index("class CausalAttention")
    at = text.index(MASK_LINE, start)
    return text[:at] + new_mask_lines + text[at + len(MASK_LINE):]


# --------------------------------------------------------------------------
# The worker's second call

def test_the_reference_gives_its_output_again_and_changes_nothing():
    result, = run(REFERENCE, ca_probe(again=True))
    assert result.ok and result.again is not None and result.again.ok
    assert result.changed == []
    # The batch in reverse order: the second call's rows, reversed back,
    # are the first call's.
    torch.testing.assert_close(result.again.outputs[0].flip(0),
                               result.outputs[0], atol=1e-6, rtol=0)


def test_no_second_call_unless_asked():
    result, = run(REFERENCE, ca_probe())
    assert result.ok and result.again is None and result.changed == []


def test_an_in_place_change_of_the_mask_is_named():
    source = ca_source(
        "        self.mask *= -1\n"
        "        mask_bool = self.mask.bool()[:num_tokens, :num_tokens]\n")
    result, = run(source, ca_probe(again=True))
    assert result.changed == ["mask"]


def test_a_new_attribute_and_an_accumulating_one_are_named():
    source = replace_line(
        REFERENCE, "        mask_bool = self.mask.bool()[:num_tokens, "
                   ":num_tokens]\n",
        "        self.calls = getattr(self, 'calls', 0) + 1\n"
        "        self.d_out += 0\n"
        "        mask_bool = self.mask.bool()[:num_tokens, :num_tokens]\n")
    result, = run(source, ca_probe(again=True))
    assert result.changed == ["calls (new)"]   # d_out did not change


def test_the_second_call_is_in_eval_mode_after_a_train_call():
    # Dropout changes the train-mode output; the second call is in eval
    # mode, so it gives the eval output.
    init = {**CA_INIT, "dropout": 0.5}
    eval_result, = run(REFERENCE, ca_probe(init=init, seed=1))
    train, = run(REFERENCE, Probe("t", "CausalAttention", init, args=[x()],
                                  train=True, seed=1, again=True))
    assert not torch.allclose(train.outputs[0], eval_result.outputs[0])
    torch.testing.assert_close(train.again.outputs[0].flip(0),
                               eval_result.outputs[0], atol=1e-6, rtol=0)


def test_a_second_call_that_raises_is_reported_as_its_own():
    source = ca_source(
        "        if getattr(self, 'seen', False):\n"
        "            raise RuntimeError('called twice')\n"
        "        self.seen = True\n" + MASK_LINE)
    result, = run(source, ca_probe(again=True))
    assert result.ok and result.again.status == ERROR
    assert "called twice" in result.again.message


def test_hostile_attributes_name_nothing_but_run():
    class Weird:
        def __eq__(self, other):
            raise RuntimeError("no")
    from autograder.sandbox.state_change import changed_state
    assert changed_state({"a": Weird()}, {"a": Weird()}) == []
    assert changed_state({"a": 1}, {"a": 2, "b": 3}) == ["a", "b (new)"]


# --------------------------------------------------------------------------
# The wire

def _round_trip(result: ProbeResult) -> ProbeResult:
    header, tensors = wire.result_payload(result)
    header, tensors = wire.decode_payload(
        wire.encode_payload(header, tensors))
    return wire.result_from_header(header, tensors, result.id)


def test_the_second_call_crosses_the_wire():
    first, second = torch.ones(2, 3), torch.zeros(2, 3)
    result = ProbeResult("p", OK, outputs=[first], output_kind="tensor",
                         changed=["mask", "cache (new)"],
                         again=ProbeResult("p", OK, outputs=[second],
                                           output_kind="tensor"))
    back = _round_trip(result)
    assert torch.equal(back.outputs[0], first) and len(back.outputs) == 1
    assert torch.equal(back.again.outputs[0], second)
    assert back.changed == ["mask", "cache (new)"]


def test_forged_second_calls_are_bounded():
    header, tensors = wire.result_payload(
        ProbeResult("p", OK, outputs=[torch.ones(1)], output_kind="tensor"))
    for again in ([1], {"status": "ok", "n_outputs": 5},
                  {"status": "ok", "n_outputs": True},
                  {"status": "nonsense", "n_outputs": 0}):
        with pytest.raises(wire.BadMessage):
            wire.result_from_header({**header, "again": again}, tensors, "p")
    with pytest.raises(wire.BadMessage):
        wire.result_from_header({**header, "changed": [1]}, tensors, "p")
    # Nested second calls are ignored; names are cut in number and length.
    nested = {"status": "ok", "n_outputs": 0, "again": {"status": "ok"}}
    back = wire.result_from_header(
        {**header, "again": nested, "changed": ["x" * 10_000] * 1000},
        tensors, "p")
    assert back.again.again is None
    assert len(back.changed) == LIMITS.wire_changed_names
    assert all(len(name) == LIMITS.name_chars for name in back.changed)


# --------------------------------------------------------------------------
# No terminal

@pytest.mark.parametrize("call, named", [
    ("input('continue?')", "your code called input()"),
    ("breakpoint()", "your code called breakpoint()"),
    ("__import__('sys').stdin.read()", "your code called sys.stdin"),
    ("__import__('pdb').set_trace()", "your code called a debugger"),
])
def test_a_terminal_asked_for_is_named(call, named):
    source = replace_line(
        REFERENCE, "        q, k, v = self.q(x), self.k(x), self.v(x)",
        f"        {call}\n        q, k, v = self.q(x), self.k(x), self.v(x)")
    result, = run(source, sa_probe())
    assert result.status == ERROR and result.exception == "NoTerminalError"
    assert named in result.message
    assert "the grader has no terminal: remove it" in result.message


def test_the_terminal_comes_back_afterwards():
    saved = builtins.input, builtins.breakpoint, sys.stdin
    with no_terminal():
        assert builtins.input is not saved[0] and sys.stdin is not saved[2]
    assert (builtins.input, builtins.breakpoint, sys.stdin) == saved
    list(execute_probes(REFERENCE, FILENAME, [sa_probe()]))
    assert (builtins.input, builtins.breakpoint, sys.stdin) == saved


# --------------------------------------------------------------------------
# The parent's verdicts (values.py)

class _Check:
    atol, rtol = 1e-6, 0.0


def _probe_and_result(first, second, *, train=False, changed=(),
                      repeat=None):
    """A probe's first call ``first``, its reversed second call
    ``second`` (as returned: batch reversed) and its same-order repeat
    (default: ``first`` again; an eval probe only)."""
    probe = Probe("p", "SelfAttention", {}, args=[first], train=train,
                  again=True)
    repeat = first if repeat is None else repeat
    result = ProbeResult("p", OK, outputs=[first], output_kind="tensor",
                         changed=list(changed),
                         again=ProbeResult("p", OK, outputs=[second],
                                           output_kind="tensor"),
                         repeat=[] if train else [repeat])
    return probe, result


def test_a_second_call_that_gives_the_output_again_passes():
    out = torch.randn(3, 4, 5)
    probe, result = _probe_and_result(out, out.flip(0))
    assert values.second_call(None, result, probe, out, _Check()) is None


def test_a_second_call_that_differs_names_the_state():
    out = torch.randn(3, 4, 5)
    probe, result = _probe_and_result(out, out.flip(0) + 1,
                                      changed=["mask", "cache (new)"])
    verdict = values.second_call(None, result, probe, out, _Check())
    assert not verdict.ok
    assert verdict.message.startswith("the second call differs")
    # The one it changed: an in-place change's words; the one it made: a
    # value kept from an earlier input, no in-place advice.
    created = verdict.message.split("The first call created")[1]
    created, changed = created.split("The first call changed")
    assert created.startswith(" `self.cache`, kept on the module")
    assert "masked_fill_" not in created
    assert changed.startswith(" `self.mask`: likely an in-place") and \
        "`self.cache`" not in changed
    probe, result = _probe_and_result(out, out.flip(0) + 1, train=True)
    verdict = values.second_call(None, result, probe, out, _Check())
    assert "after a call in train mode" in verdict.message
    assert "None of its buffers" in verdict.message


def test_two_eval_calls_that_differ_are_said_not_repeatable():
    out = torch.randn(3, 4, 5)
    ctx = values.Context({})
    wrong = values.Verdict(False, "values differ", "wrong values", "m",
                           ("m",))
    # The same-order repeat differs: random (or state) in eval mode.
    probe, result = _probe_and_result(out, out.flip(0) * 2, repeat=out * 2)
    verdict = values._not_deterministic(wrong, out, result, probe, ctx)
    assert verdict.message.startswith(
        "your eval-mode output is not repeatable")
    assert "in the same order" in verdict.message
    assert verdict.mistake is None
    # The same call twice: a plain wrong value, the catalogue's name kept.
    probe, result = _probe_and_result(out, out.flip(0))
    assert values._not_deterministic(wrong, out, result, probe, ctx) is wrong
    # A buffer that changed explains it better than randomness.
    probe, result = _probe_and_result(out, out.flip(0) * 2, changed=["mask"],
                                      repeat=out * 2)
    assert values._not_deterministic(wrong, out, result, probe, ctx) is wrong


def test_batch_elements_mixed_are_not_called_unrepeatable():
    """Output that changes when the batch is reversed but repeats itself
    in the same order mixes batch elements: said as that fact, never as
    randomness, and 2.3b's baseline stays the submission's own."""
    out = torch.randn(3, 4, 5)
    ctx = values.Context({})
    wrong = values.Verdict(False, "values differ", "wrong values")
    # Batch-mixing code: the reversed call, reversed back, is not `out`.
    probe, result = _probe_and_result(out, out.roll(1, 0))
    assert not values.eval_differs(result, probe, out, 1e-6)
    assert values.batch_dependent(result, probe, out, 1e-6)
    verdict = values._not_deterministic(wrong, out, result, probe, ctx)
    assert verdict.message.startswith(
        "your output for one batch element depends on the other batch "
        "elements")
    assert "not repeatable" not in verdict.message
    assert "dropout" not in verdict.message
    # Control: a batch-independent module is neither.
    probe, result = _probe_and_result(out, out.flip(0))
    assert not values.batch_dependent(result, probe, out, 1e-6)
    assert not values.eval_differs(result, probe, out, 1e-6)


def test_the_worker_repeats_an_eval_call_in_the_same_order():
    # The reference repeats itself; a train probe has no repeat (its
    # second call is in another mode).
    result, = run(REFERENCE, ca_probe(again=True))
    assert len(result.repeat) == 1
    torch.testing.assert_close(result.repeat[0], result.outputs[0],
                               atol=0, rtol=0)
    result, = run(REFERENCE, ca_probe(again=True, train=True))
    assert result.ok and result.repeat == []
    # Through the wire: the repeat comes back as sent, apart from the
    # second call's outputs.
    result, = run(REFERENCE, ca_probe(again=True))
    header, tensors = wire.result_payload(result)
    back = wire.result_from_header(header, tensors, result.id)
    torch.testing.assert_close(back.repeat[0], result.repeat[0])
    assert len(back.again.outputs) == len(result.again.outputs)
    assert len(back.outputs) == len(result.outputs)
    with pytest.raises(wire.BadMessage, match="n_repeat"):
        wire.result_from_header({**header, "n_repeat": 2}, tensors,
                                result.id)


# --------------------------------------------------------------------------
# The catalogue

def test_the_catalogue_keeps_the_state_and_terminal_entries():
    entries = variants.load("calls")
    lost = {key: set(v.fields.get("loses", [])) for key, v in entries.items()}
    # One entry per bug the issue names, each costing its own item.
    assert lost["ca_mask_filled_in_place"] == {"3.1"}
    assert lost["mha_mask_scaled_in_place"] == {"3.3", "3.3e"}
    assert lost["sa_scale_accumulates"] == {"1.2"}
    assert lost["mhsa_kv_cache_keyed_on_nothing"] == {"2.3a"}
    for key in ("sa_input_in_forward", "mhsa_breakpoint_in_forward",
                "sa_reads_stdin"):
        assert "Bad file descriptor" in entries[key].fields["never"]
    for key in ("mhsa_functional_dropout_always_on",
                "mhsa_dropout_built_in_forward"):
        assert entries[key].fields["loses"] == ["2.3a"]   # not 2.3b
        assert "Is dropout applied before the softmax?" in \
            entries[key].fields["never"]


def test_a_shared_probe_makes_the_second_call_any_check_asks_for():
    from autograder.config import load_config
    from autograder.grade import _unique, grading_context, plan_checks
    plain, twice = Probe("p", "X", {}), Probe("p", "X", {}, again=True)
    assert _unique([plain, twice]) == [twice]
    assert _unique([twice, plain]) == [twice]
    # In the shipped rubric 2.1 plans 2.3a's eval probe first; it is still
    # run with the second call 2.3a judges.
    config = load_config()
    planned = plan_checks(config, grading_context(config))
    wanted = {p.id for check, found in planned
              if check.kind == "module_output" for p in found}
    run = {p.id: p for p in _unique(p for _, f in planned for p in f)}
    assert wanted and all(run[i].again for i in wanted)


# --------------------------------------------------------------------------
# The third call, on a longer input: judged on its values at every position

def test_a_mask_grown_open_fails_on_the_longer_call_values():
    # Right length, wrong values: the positions of the first call see the
    # appended tokens through the mask's open (False) growth.
    source = variants.load("calls")["ca_mask_grown_open"].source()
    result, = run(source, ca_probe(again=True, again_longer=3))
    assert result.ok and result.again.ok, result.message
    assert result.again.phase == "longer"
    assert "values other than a new module's" in result.again.message
    assert "differs at" in result.again.message


def test_a_mask_sized_by_the_first_call_and_open_beyond_it_fails():
    source = ca_source(
        "        if not hasattr(self, 'first'):\n"
        "            self.first = num_tokens\n"
        "        mask_bool = torch.zeros(num_tokens, num_tokens,"
        " dtype=torch.bool)\n"
        "        mask_bool[:self.first, :self.first] = self.mask.bool()"
        "[:self.first, :self.first]\n")
    result, = run(source, ca_probe(again=True, again_longer=3))
    assert result.again.phase == "longer", result.again.message
    # positions 0 to 4 are the first call's: the 5th and 6th see later ones
    assert "differs at" in result.again.message


def test_correct_cached_masks_pass_the_longer_call():
    # The reference (a registered triu of the context length, sliced) and
    # a mask cached and rebuilt when too short: the same values as a new
    # module's, at every position.
    styles = variants.load("styles")
    for source in (REFERENCE,
                   styles["ca_mask_cached_and_rebuilt"].source()):
        result, = run(source, ca_probe(again=True, again_longer=3))
        assert result.ok and result.again.ok
        assert result.again.phase == "" and not result.again.message, \
            result.again.message


def test_the_longer_call_compares_every_output_and_its_new_module():
    # A module whose only state is a call counter that changes nothing it
    # returns passes; one that adds it to the output on a longer call fails.
    counted = ca_source(
        "        self.calls = getattr(self, 'calls', 0) + 1\n" + MASK_LINE)
    result, = run(counted, ca_probe(again=True, again_longer=2))
    assert result.again.phase == "", result.again.message
    drifting = replace_line(
        counted, "        return context_vec  # [b, num_tokens, d_out]\n",
        "        return context_vec + (self.calls > 2)"
        "  # [b, num_tokens, d_out]\n")
    result, = run(drifting, ca_probe(again=True, again_longer=2))
    assert result.again.phase == "longer"
    assert "differs at 7 of 7 positions" in result.again.message
