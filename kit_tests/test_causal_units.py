"""3.1c is earned only by what attention computes:
weights that are a softmax of query-key scores (a term of q . k added to
uniform weights moves when every key moves by one vector, which a
softmax does not see), causality shown on fresh imports (a module-level
cache replaying earlier outputs shares nothing between the calls), on
tokens changed at random per case (a leak through what a fixed map keeps
shows), and in train mode too (a mask applied in eval mode only fails).
Each attack graded in process beside its control, the reference, which
keeps every item; the unit tests of the probes follow."""
from __future__ import annotations

import pytest
import torch

from autograder import homework
from autograder.checks.kinds import register_homework_kinds
from autograder.config import load_config
from autograder.grade import grade_source
from autograder.local import in_process_runner
from kit_tests.reference_source import FULL_REFERENCE

# the attention homework's own kind (its profile's [data] kinds)
_OWN = register_homework_kinds(homework.current())
causal_kind, causal = _OWN["causal"], _OWN["projections"]

WEIGHTS = ("        attn_weights = torch.softmax(attn_scores / "
           "keys.shape[-1] ** 0.5,\n"
           "                                     dim=-1)  # [b, num_tokens,"
           " num_tokens]\n")
MASK = ("        attn_scores = attn_scores.masked_fill(mask_bool, "
        "-torch.inf)\n")
SCORES = "        attn_scores = queries @ keys.transpose(1, 2)\n"
CONTEXT = ("        context_vec = attn_weights @ values  # [b, num_tokens, "
           "d_out]\n")

# Uniform causal weights plus a small term of q . k.
UNIFORM_PLUS_QK = (
    "        causal_ones = torch.tril(torch.ones(num_tokens, num_tokens))\n"
    "        attn_weights = causal_ones / causal_ones.sum(-1, keepdim=True)\n"
    "        attn_weights = attn_weights + 0.01 * torch.tanh(\n"
    "            queries @ keys.transpose(1, 2)) * causal_ones\n")
# No mask; each position's output replayed from the first call that had
# its prefix and weights (a cache of the module, shared by the calls of
# one worker).
REPLAY = (
    "        out = attn_weights @ values\n"
    "        rows = []\n"
    "        for i in range(num_tokens):\n"
    "            key = (x[:, :i + 1].detach().numpy().tobytes(),\n"
    "                   self.W_query.weight.detach().numpy().tobytes(),\n"
    "                   self.W_key.weight.detach().numpy().tobytes())\n"
    "            rows.append(_SEEN.setdefault(key, out[:, i].clone()))\n"
    "        context_vec = torch.stack(rows, 1)  # [b, num_tokens, d_out]\n")
# A leak of the later tokens through cos(2 pi log2|3x - 1|), which the old
# fixed change x -> -2x + 1 keeps (|3x - 1| doubles).
LEAK = (
    "        later = torch.cos(2 * torch.pi * torch.log2(\n"
    "            (3 * x - 1).abs())).sum(-1)  # [b, num_tokens]\n"
    "        after = later.flip(1).cumsum(1).flip(1) - later\n"
    "        context_vec = attn_weights @ values + 1e-3 * after[..., None]\n")
KEYS = "        keys = self.W_key(x)  # [b, num_tokens, d_out]\n"
# The key projection unused: keys from the value layer (an honest 3.1
# mistake, still a softmax of query-key scores), or weights that are no
# softmax of scores while the value layer feeds something nonlinear.
KEYS_FROM_VALUES = "        keys = self.W_value(x)  # [b, num_tokens, d_out]\n"
QUERIES_ALONE = (
    "        attn_scores = queries.sum(-1, keepdim=True) * torch.arange(\n"
    "            num_tokens)  # [b, num_tokens, num_tokens]\n")
TANH_VALUES = ("        context_vec = attn_weights @ torch.tanh(values)\n"
               "        # [b, num_tokens, d_out]\n")
UNIFORM_PLUS_QV = (
    "        causal_ones = torch.tril(torch.ones(num_tokens, num_tokens))\n"
    "        attn_weights = causal_ones / causal_ones.sum(-1, keepdim=True)\n"
    "        attn_weights = attn_weights + 0.01 * torch.tanh(\n"
    "            queries @ values.transpose(1, 2)) * causal_ones\n")
EVAL_ONLY_MASK = ("        if not self.training:\n"
                  "            attn_scores = attn_scores.masked_fill(\n"
                  "                mask_bool, -torch.inf)\n")


def _edit(*pairs: tuple[str, str]) -> str:
    """The reference with CausalAttention's lines edited (a pair whose
    old text is the module's imports edits those)."""
    start = FULL_REFERENCE.index("class CausalAttention(")
    end = FULL_REFERENCE.index("class MultiHeadAttentionWrapper(")
    head, unit, tail = (FULL_REFERENCE[:start], FULL_REFERENCE[start:end],
                        FULL_REFERENCE[end:])
    for old, new in pairs:
        if old in head:
            head = head.replace(old, new, 1)
            continue
        assert unit.count(old) == 1, old
        unit = unit.replace(old, new)
    return head + unit + tail


ATTACKS = {
    "uniform weights plus 0.01 tanh(q . k)": _edit(
        (WEIGHTS, UNIFORM_PLUS_QK)),
    "a cache replaying earlier outputs, no mask": _edit(
        (MASK, ""), (CONTEXT, REPLAY),
        ("import torch.nn as nn\n", "import torch.nn as nn\n\n_SEEN = {}\n")),
    "a leak a fixed change keeps": _edit((CONTEXT, LEAK)),
    "a mask in eval mode only": _edit((MASK, EVAL_ONLY_MASK)),
    # The key projection unused, so the value layer is tried in its place.
    "uniform weights plus 0.01 tanh(q . v), no key projection": _edit(
        (WEIGHTS, UNIFORM_PLUS_QV)),
    "weights from the queries alone, tanh of the values": _edit(
        (SCORES, QUERIES_ALONE), (CONTEXT, TANH_VALUES)),
}


@pytest.fixture(scope="module")
def config():
    return load_config()


def _passed(source: str, config) -> dict[str, bool]:
    compile(source, "unit.py", "exec")
    grade = grade_source(source, "unit.py", config, in_process_runner)
    assert not grade.internal_error, grade.internal_error
    return {c.check.id: c.outcome.passed for t in grade.tasks
            for c in (*t.items, *t.deductions)}


@pytest.mark.e2e
def test_the_control_keeps_3_1c(config):
    passed = _passed(FULL_REFERENCE, config)
    assert passed["3.1c"] and passed["3.1d"] and passed["3.3d"]


@pytest.mark.e2e
@pytest.mark.parametrize("name", ATTACKS)
def test_an_attack_on_3_1c_loses_it_alone(config, name):
    passed = _passed(ATTACKS[name], config)
    assert not passed["3.1c"], name
    # Its own unit only: the other classes keep theirs.
    assert passed["3.3"] and passed["3.3d"] and passed["2.2"]


@pytest.mark.e2e
def test_no_layer_stands_in_for_keys_the_scores_do_not_use(config):
    # Dropout's evidence too (it asks only that the output follow the
    # layers): the value layer feeds the output nonlinearly, but not
    # through the scores (with queries of 0 it still does).
    passed = _passed(ATTACKS["weights from the queries alone, tanh of "
                             "the values"], config)
    assert not passed["3.1c"] and not passed["3.1d"]


@pytest.mark.e2e
def test_keys_from_the_value_layer_cost_3_1_alone(config):
    """Weights that are a softmax of q . k, k projected with the value
    layer: judged through the layer the scores use, the causal and
    dropout items stay (the attacks above, which also leave the key
    projection unused, do not)."""
    passed = _passed(_edit((KEYS, KEYS_FROM_VALUES)), config)
    assert not passed["3.1"]
    assert passed["3.1c"] and passed["3.1d"]


# The mask cut from the buffer's last columns (eval32 s08): still causal,
# it hides the diagonal and earlier keys below the full length, and every
# key of a call of no more tokens than the input has features; at the
# full context length the cut is right, where the padded calls show the
# weights a softmax of the scores.
CORNER = ("        mask_bool = self.mask.bool()[:num_tokens, :num_tokens]\n",
          "        mask_bool = self.mask.bool()[:num_tokens, -num_tokens:]\n")


@pytest.mark.e2e
def test_a_mask_cut_from_the_wrong_corner_costs_3_1_alone(config):
    passed = _passed(_edit(CORNER), config)
    assert not passed["3.1"]
    assert passed["3.1c"] and passed["3.1d"]


# The fused module's weights (3.3d), shown with the same weights in every
# head and out_proj the identity: weights that are no softmax of the
# scores lose 3.3d; a split or a merge of the heads gone wrong (3.3's
# mistakes: kit/variants/mistakes.toml, fused_split_swapped and
# fused_merge_no_transpose; the heads interleaved) keeps it.
MHA_WEIGHTS = ("        attn_weights = torch.softmax(attn_scores / "
               "self.head_dim ** 0.5,\n"
               "                                     dim=-1)\n")
MHA_FAKES = {
    "uniform causal weights plus 0.01 tanh(q . k)": (
        "        ones = (~mask_bool).float()\n"
        "        attn_weights = ones / ones.sum(-1, keepdim=True) + 0.01 * "
        "torch.tanh(\n"
        "            (queries @ keys.transpose(2, 3)).nan_to_num()) * ones\n"),
    "a sigmoid of the scores, normalised": (
        "        attn_weights = torch.sigmoid(attn_scores).nan_to_num()\n"
        "        attn_weights = attn_weights / attn_weights.sum(-1, "
        "keepdim=True)\n"),
}


def _edit_mha(old: str, new: str) -> str:
    start = FULL_REFERENCE.index("class MultiHeadAttention(")
    unit = FULL_REFERENCE[start:]
    assert unit.count(old) == 1, old
    return FULL_REFERENCE[:start] + unit.replace(old, new)


@pytest.mark.e2e
@pytest.mark.parametrize("name", MHA_FAKES)
def test_fused_weights_that_are_no_softmax_lose_3_3d(config, name):
    passed = _passed(_edit_mha(MHA_WEIGHTS, MHA_FAKES[name]), config)
    assert not passed["3.3"] and not passed["3.3d"], name
    assert passed["3.1c"] and passed["3.1d"] and passed["3.4"]


@pytest.mark.e2e
@pytest.mark.parametrize("old,new", [
    ("split = (b, num_tokens, self.num_heads, self.head_dim)",
     "split = (b, num_tokens, self.head_dim, self.num_heads)"),
    ("        context_vec = (attn_weights @ values).transpose(1, 2)\n",
     "        context_vec = attn_weights @ values\n"),
    # head_dim before num_heads: the heads interleaved
    ("        context_vec = (attn_weights @ values).transpose(1, 2)\n",
     "        context_vec = (attn_weights @ values).permute(0, 2, 3, 1)\n"),
])
def test_heads_split_or_merged_wrong_keep_3_3d(config, old, new):
    passed = _passed(_edit_mha(old, new), config)
    assert not passed["3.3"] and passed["3.3d"]


# The weights a softmax of q . k, the values taken from the key projection
# (eval5 sub15): with W_key feeding the values the weights cannot be
# shown, which is no proof that they ignore the queries and keys.
VALUES_FROM_KEYS = ("        context_vec = attn_weights @ keys  # [b, "
                    "num_tokens, d_out]\n")
# Fixed causal weights: the output moves in proportion to the input.
UNIFORM = (
    "        causal_ones = torch.tril(torch.ones(num_tokens, num_tokens))\n"
    "        attn_weights = causal_ones / causal_ones.sum(-1, keepdim=True)\n")
IGNORED = "the attention weights do not depend on the input"


def _lines(source: str, config, ids: tuple[str, ...]) -> dict[str, str]:
    grade = grade_source(source, "unit.py", config, in_process_runner)
    assert not grade.internal_error, grade.internal_error
    return {c.check.id: "\n".join(c.outcome.lines) for t in grade.tasks
            for c in t.items if c.check.id in ids}


@pytest.mark.e2e
def test_weights_are_said_to_ignore_q_and_k_only_when_proven(config):
    """Values from the key projection: 3.1c and 3.1d say what was
    measured and where to look, never that the weights ignore the
    queries and keys (a false claim once); fixed weights (the control)
    are still told so."""
    said = _lines(_edit((CONTEXT, VALUES_FROM_KEYS)), config,
                  ("3.1", "3.1c", "3.1d"))
    assert "keys k instead of times the values v" in said["3.1"]
    for item in ("3.1c", "3.1d"):
        assert IGNORED not in said[item], said[item]
        assert "is not a softmax of the query-key scores" in said[item]
        assert "does not show that your weights ignore" in said[item]
    control = _lines(_edit((WEIGHTS, UNIFORM)), config, ("3.1c", "3.1d"))
    assert IGNORED in control["3.1c"] and IGNORED in control["3.1d"]


# --------------------------------------------------------------------------
# The probes themselves

def _case():
    from autograder.values import load_cases
    return next(c for c in load_cases() if c.task == "causal_attention"
                and c.set == "public")


def test_changed_tokens_are_drawn_per_case_and_kept_within_a_process():
    case = _case()
    x = case.tensors["x"]
    a = causal_kind.random_tokens(x, causal.case_generator(case, "tokens"))
    b = causal_kind.random_tokens(x, causal.case_generator(case, "tokens"))
    assert torch.equal(a, b)        # every check and every run agree
    other = causal_kind.random_tokens(x, causal.case_generator(case, "other"))
    assert not torch.equal(a, other)
    # Not a fixed map of the old tokens.
    assert not torch.allclose(a, -2 * x + 1)
    changed = causal_kind.changed_after(x, 1, a)
    assert torch.equal(changed[:, :2], x[:, :2])
    assert bool((changed[:, 2:] != x[:, 2:]).all())


def test_causal_probes_are_fresh_in_both_modes_and_in_a_drawn_order():
    from autograder.rubric import load_rubric
    check = next(i for t in load_rubric().tasks for i in t.items
                 if i.id == "3.1c")
    case = _case()
    probes = causal_kind.CausalProperty().case_probes(check, case)
    own = [p for p in probes if ":causal:" in p.id]
    assert own and all(p.fresh for p in own)
    assert {p.train for p in own} == {False, True}
    assert all(p.seed == case.seed for p in own if p.train)
    # The same plan each time (the judge re-plans; reruns agree).
    assert [p.id for p in probes] == [
        p.id for p in causal_kind.CausalProperty().case_probes(check, case)]


def test_compared_causal_calls_never_share_a_process():
    from autograder.rubric import load_rubric
    check = next(i for t in load_rubric().tasks for i in t.items
                 if i.id == "3.1c")
    probes = causal_kind.CausalProperty().case_probes(check, _case())
    process = {p.id.split(":causal:", 1)[1]: p.process
               for p in probes if ":causal:" in p.id}
    for mode in ("eval", "train"):
        changed = {n for label, n in process.items()
                   if label.startswith(mode) and label.split(":")[1]
                   not in ("plain", "first", "first-twice")}
        assert changed and process[f"{mode}:plain"] not in changed
    # A call and its twin of the other mode (the same input) apart too.
    assert process["eval:plain"] != process["train:plain"]
    assert process["eval:last"] != process["train:last"]
    # Four processes whatever the number of tokens, none the main one.
    assert len(set(process.values())) == 4 and 0 not in process.values()
    assert all(p.process == 0 for p in probes if ":causal:" not in p.id)


def test_a_shift_of_every_key_is_invisible_to_softmax_weights():
    case = _case()
    x, state = causal.keys_shifted(case, "W_key")
    assert bool((x[..., 0] == 1).all())
    moved = [k for k in state if not torch.equal(state[k], case.weights[k])]
    assert moved and all("W_key" in k for k in moved)


# One honest mistake costs one item: scores written k q^T (q and k
# swapped) are causal weights of the queries and keys, a softmax of
# scores shifted by one constant per row when every query moves.
@pytest.mark.e2e
def test_q_and_k_swapped_costs_3_1_not_3_1c(config):
    passed = _passed(_edit((SCORES, "        attn_scores = keys @ "
                                    "queries.transpose(1, 2)\n")), config)
    assert not passed["3.1"]
    assert passed["3.1c"] and passed["3.1d"]


# --------------------------------------------------------------------------
# The weights shown and judged as a softmax of the scores
# (the attention homework's kinds/attention_weights.py)

def _scores(n: int = 6, heads: int = 2) -> torch.Tensor:
    generator = torch.Generator().manual_seed(7)
    return 3 * torch.randn(heads, n, n, generator=generator,
                           dtype=torch.float64)


def _shown(weights: torch.Tensor, scores: torch.Tensor) -> bool:
    softmax_of_scores = _OWN["attention_weights"].softmax_of_scores
    everything = torch.ones(weights.shape[-1], dtype=torch.bool)
    return softmax_of_scores([(weights, scores, everything)])


FUTURE = torch.ones(6, 6, dtype=torch.bool).triu(1)


@pytest.mark.parametrize("name,weights", [
    ("causal softmax", lambda s: s.masked_fill(FUTURE, -torch.inf)
     .softmax(-1)),
    ("no scale, values scaled", lambda s: 0.5 * (2 * s).masked_fill(
        FUTURE, -torch.inf).softmax(-1)),
    ("softmax over the queries", lambda s: s.masked_fill(
        FUTURE, -torch.inf).softmax(-2)),
    ("q and k swapped", lambda s: s.transpose(-1, -2).masked_fill(
        FUTURE, -torch.inf).softmax(-1)),
    ("mask multiplied in", lambda s: (s * ~FUTURE).softmax(-1)),
    ("mask inverted (a row all hidden)", lambda s: s.masked_fill(
        ~FUTURE, -torch.inf).softmax(-1)),
    # a fused kernel gives a row that attends to no key zeros, not NaN
    ("mask inverted, the hidden row zeros", lambda s: s.masked_fill(
        ~FUTURE, -torch.inf).softmax(-1).nan_to_num(0.0)),
    # the softmax over every key, the future zeroed after it (eval33 s11)
    ("masked after the softmax", lambda s: s.softmax(-1).masked_fill(
        FUTURE, 0.0)),
])
def test_any_softmax_of_the_scores_is_shown_as_one(name, weights):
    s = _scores()
    assert _shown(weights(s), s), name


@pytest.mark.parametrize("name,weights", [
    ("uniform + 0.1 tanh(s - mean s)", lambda s: (~FUTURE / (~FUTURE).sum(
        -1, keepdim=True)) + 0.1 * torch.tanh(
        s - (s * ~FUTURE).sum(-1, keepdim=True) / (~FUTURE).sum(
            -1, keepdim=True)) * ~FUTURE),
    ("uniform", lambda s: (~FUTURE / (~FUTURE).sum(-1, keepdim=True))
     .expand_as(s)),
    ("exp of the scores, not normalised", lambda s: s.masked_fill(
        FUTURE, -torch.inf).exp()),
    ("softmax of tanh(s)", lambda s: torch.tanh(s).masked_fill(
        FUTURE, -torch.inf).softmax(-1)),
    ("a softmax, rows scaled apart", lambda s: s.masked_fill(
        FUTURE, -torch.inf).softmax(-1) * torch.arange(1.0, 7).view(6, 1)),
    ("exp of the scores over their sum on every key, times 2",
     lambda s: 2 * s.softmax(-1).masked_fill(FUTURE, 0.0)),
])
def test_weights_that_are_no_softmax_of_the_scores_are_not(name, weights):
    s = _scores()
    assert not _shown(weights(s), s), name


def test_the_exposing_calls_show_the_weights_of_every_public_case():
    """The reference's weights, read from the calls' outputs, are a
    softmax of the scores computed from the probes' own weights."""
    import types
    shown = _OWN["attention_weights"]
    from autograder.values import load_cases
    module = types.ModuleType("reference")
    exec(compile(FULL_REFERENCE, "reference.py", "exec"), module.__dict__)
    roles = ["W_query", "W_key"]
    judged = 0
    for case in load_cases():
        if case.set != "public" or not case.weights or \
                case.task not in ("causal_attention",
                                  "multi_head_attention"):
            continue
        output = "out_proj" if case.task == "multi_head_attention" else ""
        x, states = shown.exposing_states(case, roles, "W_value", output)
        outputs = []
        for state in states:
            attention = getattr(module, case.cls)(**case.init).eval()
            attention.load_state_dict(state, strict=False)
            with torch.no_grad():
                outputs.append(attention(x))
        calls = shown.exposed_weights(case, roles, roles, "W_value",
                                      outputs, output)
        assert shown.softmax_of_scores(calls), case.name
        judged += 1
    assert judged >= 4


def test_the_exposing_input_is_no_one_hot_input():
    """Code that switches to a softmax when its input is one-hot (the
    probes' input was ``alpha * I``) must show the weights it computes on
    any input: the exposing tokens have no zero and differ from each
    other in more than one feature, and the values they give are exact."""
    shown = _OWN["attention_weights"]
    from autograder.values import load_cases
    roles = ["W_query", "W_key"]
    seen = 0
    for case in load_cases():
        if case.set != "public" or case.task != "causal_attention":
            continue
        found = shown.exposing_states(case, roles, "W_value")
        if found is None:
            continue
        x, states = found
        n = shown._tokens(case)
        assert int(torch.count_nonzero(x)) == x.numel(), case.name
        if x.shape[-1] - n > 2:
            diff = (x[0, 0] != x[0, 1]).sum()
            assert int(diff) > 2, case.name
        for k, state in enumerate(states):
            values = x[0] @ state["W_value.weight"].T
            head = values.shape[-1]
            expected = torch.zeros_like(values)
            for c in range(head):
                if k * head + c < n:
                    expected[k * head + c, c] = 1.0
            assert torch.equal(values[:n], expected[:n]), case.name
        seen += 1
    assert seen >= 2
