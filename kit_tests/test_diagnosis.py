"""The value-flow diagnosis: the worker's value recorder and its bounds on
the wire, the walk along the reference's frozen steps (no false alarm on
correct code), every bug of kit/corpus/diagnosis_bugs.toml named (step and
relation) through the real sandbox, and the diagnosis run only for
failing value cases with no catalogued mistake named."""
from __future__ import annotations

import json

import pytest
import torch

from autograder import probes as P
from autograder.checks.diagnosis import attach
from autograder.checks.diagnosis.flow import walk
from autograder.checks.diagnosis.steps import case_steps
from autograder.config import load_config
from autograder.grade import grade_source
from autograder.sandbox import value_recorder, wire
from autograder.sandbox.limits import LIMITS
from autograder.sandbox.protocol import OK, ProbeResult
from autograder.sandbox.worker import execute_probes
from autograder.values import load_cases
from kit.corpus import diagnosis_bugs
from kit import variants
from kit_tests.test_worker import FILENAME, REFERENCE

CASES = {c.name: c for c in load_cases()}
STEPPED = [c for c in CASES.values() if attach.diagnosable(c)]
BUGS = diagnosis_bugs.load()


def diagnosis_runs(source: str, cases: list) -> list[ProbeResult]:
    """Each case's call on the value-recording copy, in this process (one
    import for all)."""
    probes = []
    for case in cases:
        probes.append(attach.diagnosis_probe(
            P.case_probe(case, kwargs=case.call), case, {}))
    return list(execute_probes(source, FILENAME, probes))


# --------------------------------------------------------------------------
# The recorder and the wire

def test_recorder_keeps_float_tensors_in_order_within_its_caps():
    recorder = value_recorder.ValueRecorder()
    recorder.bound(3, torch.ones(2))           # not armed: nothing
    recorder.armed = True
    recorder.bound(4, torch.ones(2), torch.arange(3), 5)   # ints skipped
    recorder.returned(5, (torch.zeros(1, dtype=torch.float64),))
    recorder.bound(6, torch.ones(LIMITS.value_numel + 1))
    lines = [line for line, _ in recorder.values]
    assert lines == [4, 5, 6]
    assert recorder.values[1][1].dtype == torch.float32
    assert recorder.values[2][1].numel() == 0   # too big: marked, not kept
    for _ in range(2 * LIMITS.values):
        recorder.bound(7, torch.ones(3))
    assert len(recorder.take()) == LIMITS.values
    assert recorder.values == []


def test_an_in_place_change_is_recorded_for_values_only():
    """``t.masked_fill_(...)`` binds nothing: the value trace records
    ``t`` after it (the mask line is where the values leave), the shape
    trace does not (its comments' lines stay as they are); a call's
    result changed in place has no name to read it by and is skipped."""
    import ast
    from autograder.sandbox.shape_recorder import instrument
    source = ("def f(t, m):\n    t.masked_fill_(m, 0.0)\n"
              "    t.abs().clamp_(0, 1)\n    t.add(1)\n"
              "    t[0, 1:] = 0.0\n    self.t[m] += 1\n"
              "    t.abs()[0] = 1\n    return t\n")
    values = ast.unparse(instrument(source, "rec", {}, inplace=True))
    shapes = ast.unparse(instrument(source, "rec", {}))
    assert values.count("'rec.changed'(2, t)") == 1
    assert "'rec.changed'(3" not in values and "(4" not in values
    # A subscript written into: the tensor it writes into, whole.
    assert "'rec.changed'(5, t)" in values
    assert "'rec.changed'(6, self.t)" in values
    assert "'rec.changed'(7" not in values     # a call's result: no name
    assert "'rec.changed'" not in shapes and "'rec.bound'" not in shapes


def test_a_loop_changing_one_tensor_is_recorded_as_it_leaves_it():
    """Each pass of a loop writing into one tensor on one line replaces
    that line's earlier record of it (the walk sees what the loop leaves,
    where it last changed it); other records, and another tensor changed
    on the same line, stay."""
    recorder = value_recorder.ValueRecorder()
    recorder.armed = True
    scores, other = torch.zeros(2, 2), torch.zeros(3)
    for i in range(2):
        recorder.bound(4, torch.full((1,), float(i)))
        scores[i] = 1.0
        recorder.changed(5, scores)
    recorder.changed(5, other)
    recorder.changed(6, scores)
    found = recorder.take()
    assert [line for line, _ in found] == [4, 4, 5, 5, 6]
    assert torch.equal(found[2][1], torch.ones(2, 2))
    assert found[3][1].shape == (3,)


def test_recorded_values_cross_the_wire_and_the_wire_bounds_them():
    result = ProbeResult("p", OK, outputs=[torch.ones(2)],
                         output_kind="tensor",
                         values=[(7, torch.ones(3)), (9, torch.zeros(2))])
    header, tensors = wire.result_payload(result)
    back = wire.result_from_header(header, tensors, "p")
    assert [line for line, _ in back.values] == [7, 9]
    assert len(back.outputs) == 1 and torch.equal(back.outputs[0],
                                                  torch.ones(2))
    for lines in ("7", [7, -1], [True, 9], list(range(4))):
        with pytest.raises(wire.BadMessage):
            wire.result_from_header({**header, "value_lines": lines},
                                    tensors, "p")
    big = [torch.ones(2),
           torch.ones(LIMITS.value_numel + 1)]
    with pytest.raises(wire.BadMessage):
        wire.result_from_header({**header, "value_lines": [1],
                                 "n_outputs": 2}, big, "p")


def test_the_diagnosis_call_is_seeded_by_its_case():
    """An eval-mode call is unseeded; its diagnosis copy draws from the
    case's seed, so code that draws in eval mode (dropout left on) gets
    the same diagnosis line on every run."""
    case = next(c for c in STEPPED if c.mode == "train")
    probe = P.case_probe(case)
    assert probe.seed is None
    assert attach.diagnosis_probe(probe, case, {}).seed == case.seed
    train = P.case_probe(case, train=True)
    assert attach.diagnosis_probe(train, case, {}).seed == train.seed


# --------------------------------------------------------------------------
# The walk

def test_the_reference_stays_on_the_path_on_every_case():
    for case, result in zip(STEPPED, diagnosis_runs(REFERENCE, STEPPED)):
        assert result.ok and result.values, case.name
        head, _ = attach.head_size(case)
        assert walk(result.values, case_steps(case.tensors), head) is None, \
            case.name


STYLES = variants.load("styles")


@pytest.mark.parametrize("name", list(STYLES))
def test_correct_styles_stay_on_the_path(name):
    """Correct code in other styles (scaled q, einsum, helpers, [b*h, s, s]
    scores) never leaves the path: no false diagnosis when another item
    fails."""
    public = [c for c in STEPPED if c.set == "public"]
    for case, result in zip(public, diagnosis_runs(STYLES[name].source(),
                                                   public)):
        if not result.ok:
            continue
        head, _ = attach.head_size(case)
        found = walk(result.values, case_steps(case.tensors), head)
        assert found is None, (case.name, found.line, found.step)


# --------------------------------------------------------------------------
# The bugs outside the catalogue, through the real sandbox

@pytest.fixture(scope="module")
def runner(box):
    from autograder.grade import sandbox_runner
    return sandbox_runner(box)


def test_the_bug_table_is_large_and_outside_the_catalogue():
    assert len(BUGS) >= 10
    edits = {tuple(map(tuple, v.edits)) for v in
             variants.load("mistakes").values()}
    assert not {b.edits for b in BUGS.values()} & edits


def test_the_bug_table_covers_every_style_and_the_false_claims():
    """Subtle bugs in each style students write, each false
    claim the diagnosis once made guarded by `never`, and bugs whose
    diagnosis must say only where."""
    bases = {b.base for b in BUGS.values()}
    assert {"", "einsum", "loop_heads", "bmm_flat_heads", "ca_einsum_tril",
            "mha_flat_heads", "mha_sdpa", "helper_method"} <= bases
    assert sum(bool(b.never) for b in BUGS.values()) >= 8
    assert any(not b.relation for b in BUGS.values())


@pytest.mark.parametrize("name", list(BUGS))
def test_each_bug_is_named_with_its_step_and_relation(name, runner):
    """Each bug's cause named (step and relation), or only where its
    values leave when the table asks that; never a word it forbids."""
    bug = BUGS[name]
    finding = diagnosis_bugs.diagnose(bug, CASES, runner)
    assert finding is not None, f"{name}: nothing said"
    text = attach.sentence(finding)
    assert diagnosis_bugs.outcome(bug, finding) == (
        "named" if bug.relation else "where"), (finding.key, text)
    assert finding.divergence.step == bug.step, finding.key
    assert text.startswith(attach.MARK)
    assert f"line {finding.divergence.line} " in text
    assert "expected" in text and "got" in text


def test_a_line_binding_several_tensors_says_what_each_is(runner):
    """``q, v, k = self.q(x), self.k(x), self.v(x)``: each name's tensor
    is told by its value, and the scores are q @ v^T."""
    finding = diagnosis_bugs.diagnose(
        BUGS["sa_keys_values_swapped_on_one_line"], CASES, runner)
    text = attach.sentence(finding)
    assert "`v` is the keys k" in text and "`k` is the values v" in text
    assert "q @ v^T" in text
    control = diagnosis_bugs.diagnose(BUGS["sa_no_bias"], CASES, runner)
    assert "is the queries q" not in attach.sentence(control)


def test_no_claim_about_rows_in_a_view_that_swaps_them():
    """Scores held [key, query] and masked with triu: in the view that
    swaps them back the mask looks reversed, but the student's mask is
    not; no mask, softmax or temperature claim is made from such a view,
    while the same tensor as the student holds it is named (k @ q^T)."""
    from autograder.checks.diagnosis import relations
    case = CASES["ca_small"]
    steps = case_steps(case.tensors)
    head, name = attach.head_size(case)
    held = (steps["k"] @ steps["q"].transpose(-2, -1)).masked_fill(
        steps["masked"] <= -1e4, float("-inf"))
    swapped = relations.explain("masked", held.transpose(-2, -1),
                                steps["masked"], steps, case, head, name,
                                {}, swapped=True)
    assert swapped is None
    found = relations.explain("masked", held, steps["masked"], steps, case,
                              head, name, {})
    assert found is not None and found.key == "operands: k @ q^T"
    # A real reversed mask, held as the student holds it, is still named.
    past = torch.ones(5, 5, dtype=torch.bool).tril(-1)
    reversed_mask = steps["scores"].masked_fill(past, float("-inf"))
    found = relations.explain("masked", reversed_mask, steps["masked"],
                              steps, case, head, name, {})
    assert found is not None and "mask region" in found.key and \
        "tril instead of triu" not in found.text


def test_a_transposed_step_follows_the_reference_only_in_its_layout():
    """Scores [key, query] are k @ q^T, not the scores in a layout of
    theirs: no walk accepts them as followed (the evaluation's d02 was
    told its values "follow it up to the scaled scores"); keys held
    transposed, a layout correct code uses, still follow."""
    from autograder.checks.diagnosis.flow import matches
    case = CASES["mhsa_small"]
    steps = case_steps(case.tensors)
    head, _ = attach.head_size(case)
    scaled = steps["scaled"]
    assert matches(scaled, "scaled", scaled, head)
    assert not matches(scaled.transpose(-2, -1), "scaled", scaled, head)
    assert matches(steps["k"].transpose(-2, -1), "k", steps["k"], head)
    # The walk: transposed scores are where the values leave, no earlier.
    records = [(1, steps["q"]), (2, steps["k"]), (3, steps["v"]),
               (4, scaled.transpose(-2, -1))]
    found = walk(records, steps, head)
    assert found is not None and found.line == 4 and \
        found.last in ("q", "k", "v")


def test_a_step_equal_to_the_one_before_is_not_proven_by_a_match():
    """With head_dim 1 the scaled scores are the scores: an unscaled line
    proves no scaling, so the line that scales them by another size is
    compared with the scaled scores (eval32 s13 was told 'the scaled and
    masked scores, expected -inf'); where the scale is not 1 (the
    control), a match to the scaled scores is proven."""
    case = CASES["mha_book"]
    steps = case_steps(case.tensors)
    head, _ = attach.head_size(case)
    assert torch.equal(steps["scaled"], steps["scores"])      # the premise
    start = [(1, steps["q"]), (2, steps["k"]), (3, steps["v"])]
    found = walk(start + [(4, steps["scores"]),
                          (5, steps["scores"] / 6 ** 0.5)], steps, head)
    assert (found.line, found.last, found.step) == (5, "scores", "scaled")
    case = CASES["mhsa_small"]
    steps = case_steps(case.tensors)
    head, _ = attach.head_size(case)
    start = [(1, steps["q"]), (2, steps["k"]), (3, steps["v"])]
    found = walk(start + [(4, steps["scaled"]),
                          (5, steps["weights"] / 2)], steps, head)
    assert (found.line, found.last, found.step) == (5, "scaled", "weights")


def test_a_line_reading_the_weights_that_gives_v_again_leaves_there():
    """A tensor equal to v after the weights leaves the path at its line
    when that line reads the weights (an einsum keeping the query's index
    on v); a copy of v made there by a line that reads no weights, or
    followed by the right context, is no departure (the controls)."""
    case = CASES["mhsa_small"]
    steps = case_steps(case.tensors)
    head, _ = attach.head_size(case)
    start = [(1, steps["q"]), (2, steps["k"]), (3, steps["v"]),
             (4, steps["scaled"]), (5, steps["weights"])]
    found = walk(start + [(6, steps["v"])], steps, head,
                 reads=lambda line, earlier: (line, earlier) == (6, 5))
    assert (found.line, found.step, found.same_as, found.last) == \
        (6, "context", "v", "weights")
    assert walk(start + [(6, steps["v"])], steps, head,
                reads=lambda line, earlier: False) is None
    assert walk(start + [(6, steps["v"]), (7, steps["context"])], steps,
                head, reads=lambda line, earlier: True) is None
    # One token: the weights are 1 and the context is v, as expected.
    single = CASES["ca_single_token"]
    steps = case_steps(single.tensors)
    head, _ = attach.head_size(single)
    start = [(1, steps["q"]), (2, steps["k"]), (3, steps["v"]),
             (4, steps["scaled_masked"]), (5, steps["weights"])]
    assert walk(start + [(6, steps["output"])], steps, head,
                reads=lambda line, earlier: True) is None
    source = ("def f(w, v):\n    w = w.softmax(-1)\n"
              "    out = torch.einsum('bhqk,bhqd->bhqd', w, v)\n"
              "    v2 = v.contiguous()\n")
    assert attach.reads_bound(source, 3, 2)
    assert not attach.reads_bound(source, 4, 2)
    # The name bound again between the two: not what the earlier line gave.
    rebound = source.replace("    out = ", "    w = torch.eye(3)\n    out = ")
    assert not attach.reads_bound(rebound, 4, 2)


def test_a_softmax_numerator_is_a_helper_only_when_divided_later():
    """exp(scores - max) is the weights times one factor per row: a helper
    when a later line gives the weights (or another such tensor), the
    place the values leave when nothing does; weights scaled by one
    factor (times 1 - p) are never taken for it."""
    case = CASES["sa_small"]
    steps = case_steps(case.tensors)
    head, _ = attach.head_size(case)
    start = [(1, steps["q"]), (2, steps["k"]), (3, steps["v"]),
             (4, steps["scaled"])]
    weights = steps["weights"]
    rows = torch.arange(1.0, weights.shape[1] + 1).view(1, -1, 1)
    e = weights * rows
    assert walk(start + [(5, e), (6, weights), (7, steps["output"])],
                steps, head) is None
    found = walk(start + [(5, e), (6, e / e.sum())], steps, head)
    assert (found.line, found.step) == (6, "weights")
    # The same numbers again (dropout in eval mode) divide nothing.
    found = walk(start + [(5, e), (6, e.clone())], steps, head)
    assert (found.line, found.step) == (5, "weights")
    found = walk(start + [(5, weights * 0.5)], steps, head)
    assert (found.line, found.step) == (5, "weights")


def test_a_line_no_value_ties_to_one_step_is_where_not_what():
    """A tensor that agrees with the heads merged and the output alike
    (nowhere) is compared with the earliest of them and not said to be
    either (eval5 sub28 was told 'line 141 gives the output' of its
    merge line); one that agrees with the output but for one position is
    the output (the control)."""
    case = CASES["mhsa_small"]
    steps = case_steps(case.tensors)
    head, _ = attach.head_size(case)
    start = [(1, steps["q"]), (2, steps["k"]), (3, steps["v"]),
             (4, steps["scaled"]), (5, steps["weights"])]
    far = steps["output"] + 10.0
    found = walk(start + [(6, far)], steps, head)
    assert (found.line, found.step, found.unnamed) == (6, "merged", True)
    near = steps["output"].clone()
    near[0, 0, 0] += 1.0
    found = walk(start + [(6, near)], steps, head)
    assert (found.line, found.step, found.unnamed) == (6, "output", False)


def test_the_scores_a_loop_computes_right_still_follow(runner):
    # Beside loop_heads_scores_key_query (whose `never` forbids it): the
    # same style with its scores right, a later bug, says they follow.
    finding = diagnosis_bugs.diagnose(
        BUGS["loop_heads_softmax_over_queries"], CASES, runner)
    assert "they follow it up to the scaled scores" in \
        attach.sentence(finding)
    finding = diagnosis_bugs.diagnose(
        BUGS["loop_heads_scores_key_query"], CASES, runner)
    assert "they follow it up to the scaled scores" not in \
        attach.sentence(finding)


def test_the_wrappers_own_heads_rearranged_are_named_only_when_rebuilt():
    from autograder import homework
    from autograder.checks.kinds import register_homework_kinds
    heads_arrangement = register_homework_kinds(
        homework.current())["heads"].heads_arrangement
    g = torch.Generator().manual_seed(0)
    heads = [torch.randn(2, 5, 3, generator=g) for _ in range(3)]
    joined = torch.cat(heads, -1)
    assert "reverse order" in heads_arrangement(
        torch.cat(heads[::-1], -1), heads, 1e-6)
    assert "[1, 0, 2]" in heads_arrangement(
        torch.cat([heads[1], heads[0], heads[2]], -1), heads, 1e-6)
    assert "interleaved" in heads_arrangement(
        torch.stack(heads, -1).reshape(2, 5, 9), heads, 1e-6)
    assert "stacked on dimension 1" in heads_arrangement(
        torch.stack(heads, 1).reshape(2, 5, 9), heads, 1e-6)
    assert "along dimension 0 instead" in heads_arrangement(
        torch.cat(heads, 0), heads, 1e-6)
    assert "added together" in heads_arrangement(
        heads[0] + heads[1] + heads[2], heads, 1e-6)
    assert "averaged" in heads_arrangement(
        torch.stack(heads).mean(0), heads, 1e-6)
    overlapped = torch.zeros(2, 5, 9)
    for i, head in enumerate(heads):
        overlapped[..., i:i + 3] = head
    assert "written from column i * 1" in heads_arrangement(
        overlapped, heads, 1e-6)
    # Heads made wider than any case's: no rebuild per stride in the
    # parent (its work stays bounded), so nothing is named.
    wide = [torch.randn(1, 2, 300, generator=g) for _ in range(2)]
    overlapped = torch.zeros(1, 2, 600)
    for i, head in enumerate(wide):
        overlapped[..., i:i + 300] = head
    assert heads_arrangement(overlapped, wide, 1e-6) is None
    assert heads_arrangement(heads[0] + heads[1], heads, 1e-6) is None
    assert heads_arrangement(joined + 0.1, heads, 1e-6) is None
    assert heads_arrangement(torch.cat(heads[::-1], -1) * 2, heads,
                             1e-6) is None


# --------------------------------------------------------------------------
# Only failing cases, only where no catalogued mistake is named

def _counting_runner(calls: list):
    def run(source, filename, probes):
        calls.append([p for p in probes if p.trace_values])
        return list(execute_probes(source, filename, probes))
    return run


@pytest.mark.e2e
def test_a_passing_submission_runs_no_diagnosis():
    calls: list = []
    grade = grade_source(REFERENCE, FILENAME, load_config(),
                         _counting_runner(calls), public_only=True)
    assert grade.score >= grade.max_score
    assert len(calls) == 1 and calls[0] == []


@pytest.mark.e2e
def test_a_failing_item_gets_the_diagnosis_and_a_catalogued_one_does_not():
    calls: list = []
    source = BUGS["mhsa_scale_multiply"].source()
    grade = grade_source(source, FILENAME, load_config(),
                         _counting_runner(calls), public_only=True)
    items = {c.check.id: c.outcome for t in grade.tasks for c in t.items}
    assert len(calls) == 2 and calls[1]
    assert all(p.trace_values and not p.hidden for p in calls[1])
    failed = [o for o in items.values() if not o.passed]
    assert failed and all(not o.mistakes for o in failed)
    diagnosed = [o for o in failed if o.diagnosis]
    assert diagnosed
    lines = [line for o in diagnosed for line in o.lines
             if line.startswith(attach.MARK)]
    assert lines and all("multiplied by" in line for line in lines)
    named = variants.load("mistakes")["no_mix"].source()
    calls.clear()
    grade = grade_source(named, FILENAME, load_config(),
                         _counting_runner(calls), public_only=True)
    for task in grade.tasks:
        for item in task.items:
            if item.outcome.mistakes:
                assert not item.outcome.diagnosis
                assert not any(line.startswith(attach.MARK)
                               for line in item.outcome.lines)


# --------------------------------------------------------------------------
# The class report groups each item's failures by cause

def _results(folder, failed: dict[str, list[str]]) -> None:
    folder.mkdir(parents=True)
    tests = [{"name": f"Task 2 / {n} item {n}", "number": n,
              "status": "failed" if n in failed else "passed",
              "score": 0.0 if n in failed else 1.0, "max_score": 1.0,
              "tags": ["multi_head_self_attention"], "output": ""}
             for n in ("2.1", "2.2")]
    (folder / "results.json").write_text(json.dumps({
        "score": 2.0 - len(failed), "tests": tests,
        "extra_data": {"tasks": {"multi_head_self_attention": 0.0},
                       "diagnosis": {k: v for k, v in failed.items()
                                     if v}}}))


def test_the_class_report_groups_failures_by_step_and_relation(tmp_path):
    from autograder.report.layout import submission_dir
    from autograder.staff import class_report
    scale = "the scaled scores: scale: scores multiplied by sqrt(head_size)"
    bias = "the queries q: bias missing: self.q"
    for name, failed in (("ann", {"2.1": [scale]}), ("bob", {"2.1": [scale]}),
                         ("cid", {"2.1": [bias], "2.2": []}),
                         ("dee", {})):
        _results(submission_dir(tmp_path, name), failed)
    batch = class_report.read_batch(tmp_path)
    causes = dict(class_report.failure_causes(batch))
    assert causes["2.1"] == [(scale, ["ann", "bob"]), (bias, ["cid"])]
    assert causes["2.2"] == [(class_report.NO_DIAGNOSIS, ["cid"])]
    page = class_report.build_report(batch, {})
    section = page[page.index("id='causes'"):page.index("id='deductions'")]
    assert "multiplied by sqrt(head_size)" in section and "ann" in section


def test_verdicts_compare_keeps_diagnosis_lines_apart():
    from kit.corpus import verdicts
    check = {"passed": False, "points": 0.0, "lines": ["- ✘ differs"]}
    old = {"entry": {"score": 1.0, "checks": {"2.1": dict(check)}}}
    new = {"entry": {"score": 1.0, "checks": {"2.1": {
        **check, verdicts.DIAGNOSIS: [attach.MARK + " (public case)"]}}}}
    assert verdicts.differences(old, new) == []
    assert len(verdicts.differences(old, new, diagnosis=True)) == 1
    new["entry"]["checks"]["2.1"]["points"] = 1.0
    assert len(verdicts.differences(old, new)) == 1


def test_a_dropout_rate_that_is_not_the_modules_is_named_with_its_rate():
    from autograder import homework
    from autograder.checks.kinds import register_homework_kinds
    own = register_homework_kinds(homework.current())["dropout"]
    Pattern, dropout_pattern = own.Pattern, own.dropout_pattern
    clean = torch.rand(200) + 0.1
    mask = torch.rand(200, generator=torch.Generator().manual_seed(3)) > 0.1
    found = dropout_pattern(clean * mask / 0.9, clean, 0.5, 1e-4, 1e-7)
    assert found.kind is Pattern.OTHER_RATE
    assert abs(found.facts()["rate"] - 0.1) < 1e-5
    # the module's own rate, and no rescaling at all, stay what they were
    assert dropout_pattern(clean * mask / 0.5, clean, 0.5, 1e-4,
                           1e-7).kind is Pattern.OK
    assert dropout_pattern(clean * mask, clean, 0.5, 1e-4,
                           1e-7).kind is Pattern.UNSCALED
    noisy = clean * mask * (1 + torch.rand(200))
    assert dropout_pattern(noisy, clean, 0.5, 1e-4, 1e-7).kind is \
        Pattern.WRONG


# --------------------------------------------------------------------------
# State across calls: the third call, on a longer input

def test_a_mask_sized_by_the_first_call_fails_the_longer_third_call():
    case = CASES["ca_small"]
    probe = P.case_probe(case, again=True)
    assert probe.again_longer == P.longer_tokens(case) > 0
    assert case.tensors["x"].shape[1] + probe.again_longer <= \
        case.init["context_length"]
    cached = variants.load("calls")["ca_mask_sized_by_first_call"].source()
    bad, = execute_probes(cached, FILENAME, [probe])
    good, = execute_probes(REFERENCE, FILENAME, [probe])
    assert bad.ok and bad.again.ok and bad.again.phase == "longer"
    assert "longer input" in bad.again.message
    assert "mask_cache (new)" in bad.changed
    assert good.again.ok and good.again.phase == "" and not \
        good.again.message
    # At the context length there is no room: no third call.
    full = CASES["ca_book"]
    assert P.longer_tokens(full) == 0


def test_a_constant_shift_needs_two_positions_to_be_said():
    # One token (a hidden case's edge): "the same vector at every
    # position" holds of any difference there, so it says nothing.
    from autograder.checks.diagnosis.relations import bias
    expected = torch.randn(1, 1, 4)
    one = bias("context", expected + 1.0, expected, {}, {})
    assert one is None
    # The control: two positions shifted alike are a finding.
    expected = torch.randn(1, 2, 4)
    two = bias("context", expected + 1.0, expected, {}, {})
    assert two is not None and "same vector" in two.text


def test_scores_shifted_per_row_need_two_positions_in_a_row():
    """A log_softmax of the scores is the scores less one constant per
    row (on the path); one position a row (a single token) proves no
    shift: any value is one."""
    from autograder.checks.diagnosis.flow import row_shifted
    scores = torch.randn(2, 4, 4)
    assert row_shifted(torch.log_softmax(scores, -1), scores)
    assert not row_shifted(scores, scores)              # no shift at all
    assert not row_shifted(scores * 2, scores)          # not a shift
    one = torch.randn(1, 1, 1)
    assert not row_shifted(one + 0.5, one)
    masked = scores.masked_fill(torch.ones(4, 4).triu(1).bool(),
                                -float("inf"))
    assert row_shifted(torch.log_softmax(masked, -1), masked)


def test_zeros_are_not_values_rounded_to_a_lower_precision():
    # Small expected values (a hidden case's queries) and zeros: within
    # an absolute bound of bfloat16's step, but no rounding gives zeros.
    from autograder.checks.diagnosis.relations import precision
    expected = torch.tensor([[0.0329, -0.0211, 0.0154, 0.0087]])
    assert precision("q", torch.zeros_like(expected), expected) is None
    assert precision("q", torch.zeros_like(expected).to(torch.float16)
                     .float(), expected) is None
    # The control: the same values rounded to float16 are named.
    rounded = expected.to(torch.float16).float()
    found = precision("q", rounded, expected)
    assert found is not None and "rounded to float16" in found.text


def test_reads_bound_parses_a_source_once(monkeypatch):
    """A walk asks reads_bound once per record that gives an earlier
    step again: the source is parsed once for all of them, however many
    (a padded file asked 38 times per case was a parse each)."""
    import ast as ast_module
    parses = []
    real = ast_module.parse
    monkeypatch.setattr(ast_module, "parse",
                        lambda *a, **k: parses.append(1) or real(*a, **k))
    source = "def f(w, v):\n    w = w.softmax(-1)\n    o = w @ v\n" + \
        "x = 0\n" * 50 + "# parsed once\n"
    attach._bindings.cache_clear()
    for _ in range(20):
        assert attach.reads_bound(source, 3, 2)
        assert not attach.reads_bound(source, 4, 2)
    assert len(parses) == 1
