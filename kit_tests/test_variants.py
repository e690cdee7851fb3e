"""The variant catalogue (kit/variants.py, kit/variants/*.toml) without the
sandbox: every entry applies to the live reference, its expectation comes
from the rubric and the mistake catalogue, and a stale or malformed entry
is an error that names it."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from autograder import homework
from autograder.rubric import load_rubric
from kit import variants as V
from kit_tests.rubrics import other_points, rubric_text_with

ROOT = Path(__file__).resolve().parents[1]
RUBRIC_FILE = ROOT / "autograder" / "rubric.toml"
ALL = V.load_all()


@pytest.mark.parametrize("key", list(ALL))
def test_every_entry_applies_and_states_what_it_loses(key):
    variant = ALL[key]
    source = variant.source()
    reference = homework.staff().reference.read_text()
    assert source != reference or not variant.edits
    expected = V.expect(variant, load_rubric())
    if "SyntaxError" not in expected.says:
        compile(source, key, "exec")


def test_a_renamed_variable_names_the_stale_entry(tmp_path: Path):
    # The instructor renames `bs` in the reference: every entry whose edit
    # quotes it fails with its own name and what to update.
    renamed = homework.staff().reference.read_text().replace(
        "bs, seq", "batch, seq")
    stale = []
    for variant in ALL.values():
        try:
            variant.source(renamed)
        except V.VariantError as exc:
            stale.append(variant)
            message = str(exc)
            assert message.startswith(variant.label + ": "), message
            assert "appears 0 times" in message
            assert "update this edit" in message
    assert {v.key for v in stale} >= {"examples/merge_no_transpose",
                                      "diagnoses/pep8_violation"}


def test_expected_scores_come_from_the_rubric(tmp_path: Path):
    # 2.3b gets one point more: no entry changes, its expectation does.
    points = other_points("2.3b")
    path = tmp_path / "rubric.toml"
    path.write_text(rubric_text_with("2.3b", points))
    before, after = load_rubric(), load_rubric(path)
    dropout = ALL["diagnoses/dropout_on_output"]     # loses 2.3b only
    task = "multi_head_self_attention"
    for rubric in (before, after):
        items = next(t for t in rubric.tasks if t.id == task).items
        kept = sum(i.points for i in items if i.id != "2.3b")
        assert V.expect(dropout, rubric).scores[task] == kept
    reference = ALL["styles/reference"]
    assert V.expect(reference, after).scores[task] == \
        V.expect(reference, before).scores[task] + 1


def test_a_bonus_is_lost_with_what_it_requires():
    rubric = load_rubric()
    expected = V.expect(ALL["diagnoses/missing_shape_comment"], rubric)
    assert expected.lost == {"1.shapes", "1.bonus"}
    # Its items, minus the deduction, no bonus.
    task = next(t for t in rubric.tasks if t.id == "self_attention")
    shapes = next(d for d in task.deductions if d.id == "1.shapes")
    assert expected.scores["self_attention"] == \
        sum(i.points for i in task.items) - shapes.points
    everything = V.expect(ALL["examples/syntax_error"], rubric)
    assert all(s == 0 for s in everything.scores.values())


def test_the_mistakes_group_loses_the_items_of_its_mistake(tmp_path: Path):
    # Group `mistakes`: the entry's name is the mistake; it loses its own
    # `items` and its feedback must name it.
    (tmp_path / "mistakes.toml").write_text('''
[no_scale]
about = "no 1/sqrt(d) anywhere"
items = ["1.2", "2.1"]
message = "your output equals attention without the scaling."
edits = [["q @ k.transpose(1, 2) / q.shape[-1] ** 0.5, dim=-1",
          "q @ k.transpose(1, 2), dim=-1"]]

[wrapper_interleaved]
about = "heads stacked on a new last dimension, then flattened"
items = ["3.2"]
message = "your output equals the heads' outputs interleaved."
edits = [["torch.cat([head(x) for head in self.heads], dim=-1)",
          "torch.stack([head(x) for head in self.heads], -1).flatten(2)"]]
''')
    found = V.load("mistakes", tmp_path)
    assert V.mistake_items(tmp_path) == {"no_scale": ["1.2", "2.1"],
                                         "wrapper_interleaved": ["3.2"]}
    rubric = load_rubric()
    no_scale = V.expect(found["no_scale"], rubric)
    assert no_scale.mistake == "no_scale"
    assert no_scale.lost == {"1.2", "2.1", "1.bonus"}
    wrapper = V.expect(found["wrapper_interleaved"], rubric)
    assert wrapper.lost == {"3.2"}
    assert wrapper.scores["multi_head_wrapper"] == 0
    found["wrapper_interleaved"].source()


def test_a_line_a_new_task_repeats_names_both_places():
    # A new task that copies a line an entry edits (adding RotaryAttention
    # with SelfAttention's projections broke 20 entries): the error says
    # which definitions hold the line, not only that it changed.
    line = "q, k, v = self.q(x), self.k(x), self.v(x)  # [bs, seq, hidden]"
    added = homework.staff().reference.read_text() + f"""

class NewTask:
    def forward(self, x):
        {line}
        return q
"""
    with pytest.raises(V.VariantError) as raised:
        ALL["hostile/memory_hog"].source(added)
    message = str(raised.value)
    assert "appears 2 times" in message
    assert re.search(r"in SelfAttention \(line \d+\), NewTask "
                     r"\(line \d+\): if new code repeats", message), message


def _with_a_copied_class(name: str, copy: str) -> str:
    """The reference with class ``name`` copied whole as class ``copy``
    (what a new task written from an old one does)."""
    import ast
    reference = homework.staff().reference.read_text()
    body = ast.parse(reference).body
    at = next(i for i, n in enumerate(body)
              if isinstance(n, ast.ClassDef) and n.name == name)
    # Its lines up to the next definition: trailing comments (the
    # YOUR CODE ENDS HERE marker) included.
    last = body[at + 1].lineno - 1 if at + 1 < len(body) else None
    text = "\n".join(reference.splitlines()[body[at].lineno - 1:last])
    return reference + "\n\n" + text.strip().replace(
        f"class {name}(", f"class {copy}(", 1) + "\n"


def test_every_clash_of_a_copied_class_is_reported_at_once(capsys):
    from kit.generate import mistakes
    copied = _with_a_copied_class("MultiHeadAttention", "NewAttention")
    problems = V.catalogue_problems(reference=copied)
    # Each entry whose first edit now quotes a line twice is named, in
    # one run, with its file, entry, the quoted text, both places and
    # the fix.
    clashing = [v for v in ALL.values() if v.fields.get("base") is None
                and v.edits and copied.count(v.edits[0][0]) > 1]
    assert len(clashing) > 1, "the copied class repeats no quoted line"
    for variant in clashing:
        mine = [p for p in problems if p.startswith(variant.label + ":")]
        assert mine, f"{variant.label} is not reported: {problems}"
        assert repr(variant.edits[0][0].strip()) in mine[0]
        assert re.search(r"in MultiHeadAttention \(line \d+\), "
                         r"NewAttention \(line \d+\)", mine[0]), mine[0]
        assert "quote more of the context" in mine[0]
    assert len({p.split(" [")[0] for p in problems}) > 1, \
        "clashes of more than one catalogue file are all reported"
    assert mistakes.report_catalogue(problems)
    printed = capsys.readouterr().err
    assert printed.count("error: kit/variants/") == len(problems)
    assert f"{len(problems)} catalogue edit(s)" in printed


def test_a_catalogue_that_applies_reports_nothing():
    assert V.catalogue_problems() == []


@pytest.mark.parametrize("entry, error", [
    ('[x]\nedits = []\nlose = ["1.2"]\n',
     r"\[x\]: unknown key\(s\) \['lose'\]"),
    ('[x]\nedits = [["a"]]\n', r"\[x\]: `edits` must be"),
    ('[x]\nabout = "no edits"\n', r"\[x\]: an entry needs `edits`"),
    ('[x]\nedits = []\nloses = ["9.9"]\n', r"\[x\]: `loses` names '9.9'"),
    ('[x]\nedits = []\nmistake = "nope"\n', r"\[x\]: 'nope' is not a mistake"),
    ('[x]\nedits = []\nscores = { nope = 1 }\n', r"\[x\]: `scores` names"),
])
def test_a_malformed_entry_is_named(tmp_path: Path, entry: str, error: str):
    (tmp_path / "g.toml").write_text(entry)
    with pytest.raises(V.VariantError, match=error):
        for variant in V.load("g", tmp_path).values():
            V.expect(variant, load_rubric())


MISTAKE = '[x]\nedits = []\nitems = ["1.2"]\nmessage = "m"\n'


@pytest.mark.parametrize("entry, error", [
    ('[x]\nedits = []\nitems = ["1.2"]\n', r"\[x\]: a mistake needs "
     r"`message`"),
    ('[x]\nedits = []\nmessage = "m"\n', r"\[x\]: a mistake needs `items`"),
    (MISTAKE.replace('["1.2"]', '"1.2"'), r"\[x\]: a mistake needs `items`"),
    (MISTAKE + 'raises = "yes"\n', r"\[x\]: `raises` must be true or false"),
    (MISTAKE + 'same_as = "y"\n', r"\[x\]: `same_as` must be a list"),
])
def test_a_malformed_mistake_is_named(tmp_path: Path, entry: str,
                                      error: str):
    (tmp_path / "mistakes.toml").write_text(entry)
    with pytest.raises(V.VariantError, match=error):
        V.load("mistakes", tmp_path)


def test_a_mistakes_keys_belong_to_the_mistakes_group_only(tmp_path: Path):
    # What the student is told lives with the mistake, nowhere else.
    (tmp_path / "mistakes.toml").write_text(MISTAKE + "raises = true\n")
    assert V.load("mistakes", tmp_path)["x"].fields["raises"] is True
    (tmp_path / "g.toml").write_text(MISTAKE)
    with pytest.raises(V.VariantError, match=r"g.toml \[x\]: \['items', "
                       r"'message'\] belong to entries of "
                       r"kit/variants/mistakes.toml only"):
        V.load("g", tmp_path)


def test_the_skeleton_base_is_generated_from_the_live_reference():
    skeleton = ALL["diagnoses/skeleton"].source()
    assert skeleton == (ROOT / "transformer_lm" /
                        "modeling_attention.py").read_text()


def test_find_names_what_it_wants():
    assert V.find("styles/reference").name == "reference"
    with pytest.raises(V.VariantError, match="'group/name'"):
        V.find("reference")
