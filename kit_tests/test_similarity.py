"""Similarity: near-copies (renamed names, reworded
comments, reordered statements) rank above independent correct solutions;
the skeleton's given code is no evidence; answers are compared by words;
the CLI ranks a graded folder and its side-by-side pages escape student
text."""
from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from autograder import homework
from autograder.staff import similarity as S
from autograder.staff.similarity import Pair
from kit.corpus import near_copies as C
from kit import variants

ROOT = Path(__file__).resolve().parents[1]
# Correct styles of the catalogue (kit/variants/styles.toml) that rewrite
# whole methods of the reference: far enough from it and from each other
# to stand for independent solutions.
INDEPENDENT = ("reference", "einsum", "loop_heads", "nanogpt_style")
COPIES = {"copy_einsum": ("einsum", lambda s: C.recomment(C.rename(s))),
          "copy_loop": ("loop_heads", C.reorder),
          "copy_nano": ("nanogpt_style",
                        lambda s: C.reorder(C.recomment(C.rename(s)))),
          "copy_ref": ("reference", lambda s: C.reorder(C.rename(s)))}


def _definitions(source: str) -> dict[str, str]:
    """Top-level class and function name -> its source text."""
    tree = ast.parse(source)
    return {node.name: ast.get_source_segment(source, node)
            for node in tree.body
            if isinstance(node, (ast.ClassDef, ast.FunctionDef))}


def _common_as_given(sources: dict[str, str]) -> dict[str, str]:
    """``sources`` with every definition that all of them write alike (a
    task no style rewrites, as the reference has it) replaced by the
    skeleton's: code every solution shares is no evidence of copying, and
    each new task of the reference would otherwise make the independent
    styles look closer."""
    given = _definitions(homework.current().module.read_text())
    found = {n: _definitions(s) for n, s in sources.items()}
    first = next(iter(found.values()))
    common = [name for name, text in first.items() if name in given
              and all(d.get(name) == text for d in found.values())]
    result = {}
    for name, source in sources.items():
        for definition in common:
            source = source.replace(found[name][definition],
                                    given[definition])
        result[name] = source
    return result


def _sources() -> dict[str, str]:
    sources = _common_as_given(
        {n: variants.find(f"styles/{n}").source() for n in INDEPENDENT})
    for name, (original, disguise) in COPIES.items():
        sources[name] = disguise(sources[original])
    return sources


def _codes(sources: dict[str, str]) -> dict[str, str]:
    skeleton = homework.current().module.read_text()
    return {n: S.student_code(s, skeleton) for n, s in sources.items()}


def test_disguises_change_the_text_but_keep_the_code_valid():
    sources = _sources()
    for name, (original, _) in COPIES.items():
        assert sources[name] != sources[original]
        compile(sources[name], name, "exec")


def test_near_copies_rank_above_independent_solutions():
    pairs = S.code_pairs(_codes(_sources()),
                         homework.current().module.read_text())
    copies = {frozenset((c, o)) for c, (o, _) in COPIES.items()}
    top = [frozenset((p.a, p.b)) for p in pairs[:len(copies)]]
    precision = sum(t in copies for t in top) / len(copies)
    print(f"precision at {len(copies)}: {precision:.2f}; "
          + ", ".join(f"{p.a}~{p.b} {p.score:.2f} (z {p.z:.1f})"
                      for p in pairs[:6]))
    assert precision == 1.0
    independent = [p for p in pairs if frozenset((p.a, p.b)) not in copies
                   and {p.a, p.b} <= set(INDEPENDENT)]
    # well apart from the rest of the class
    assert independent and all(p.z < S.LEAD_Z for p in independent)
    assert min(p.z for p in pairs[:len(copies)]) > \
        2 * max(p.z for p in pairs[len(copies):])


def test_the_skeletons_given_code_is_no_evidence():
    skeleton = homework.current().module.read_text()
    assert S.student_code(skeleton, skeleton) == ""
    pairs = S.code_pairs({"a": S.student_code(skeleton, skeleton),
                          "b": S.student_code(skeleton, skeleton),
                          **_codes({"reference": _sources()["reference"]})},
                         skeleton)
    assert pairs == []     # nobody wrote code of their own but one


def test_copied_answers_rank_first():
    answers = {
        "ann": {"Q1": "Scaling by the square root of the key size keeps "
                      "the dot products from growing, so the softmax does "
                      "not saturate."},
        "ben": {"Q1": "scaling by the SQUARE ROOT of the key size keeps the "
                      "dot-products from growing; so the softmax doesn't "
                      "saturate!"},
        "cat": {"Q1": "Without it large logits push the softmax to one hot "
                      "outputs with vanishing gradients."},
        "dan": {"Q1": "It normalises the variance of q.k to about one for "
                      "unit variance inputs."},
        "eve": {"Q2": "Each head attends in its own subspace."},
    }
    pairs = S.answer_pairs(answers)
    assert (pairs[0].a, pairs[0].b) == ("ann", "ben")
    assert pairs[0].score > 0.5 > pairs[1].score
    assert all("eve" not in (p.a, p.b) for p in pairs)   # no common question


@pytest.mark.e2e   # the CLI in its own process (make test-all)
def test_cli_ranks_a_graded_folder_and_escapes_student_code(tmp_path):
    sources = _sources()
    sources["copy_ref"] = sources["copy_ref"].replace(
        "super().__init__()", "super().__init__()\n        note = "
        "'</pre><script>alert(1)</script>'", 1)
    for name, source in sources.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "source.py").write_text(source)
        (tmp_path / name / "answers.json").write_text(json.dumps(
            {"Q1": f"answer of {name} " * 3}))
    done = subprocess.run([sys.executable, "-m", "autograder", "similarity",
                           str(tmp_path)], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "lead for a human, not a verdict" in done.stdout
    first = done.stdout.split(" flagged\n", 1)[1].splitlines()[0]
    assert "similarity/pair-1.html" in first
    pages = sorted((tmp_path / "similarity").glob("pair-*.html"))
    assert pages
    for page in pages:
        text = page.read_text()
        assert "<script>" not in text and "<mark>" in text
    empty = subprocess.run([sys.executable, "-m", "autograder", "similarity",
                            str(tmp_path / "copy_ref")], capture_output=True,
                           text=True, cwd=ROOT, timeout=120)
    assert empty.returncode == 2


@pytest.mark.e2e   # a class-sized run (make test-all)
def test_in_a_class_of_50_each_copy_finds_its_family(tmp_path):
    # kit.corpus.class_batch: the corpus (mostly one-line edits of the
    # reference, near-copies of it by construction), the examples, and three
    # disguised copies of each independent solution.
    from kit.corpus import class_batch
    written = class_batch.build(tmp_path / "class")
    assert len(written) >= 50
    skeleton = homework.current().module.read_text()
    codes = {p.name: S.student_code(
        (p / "transformer_lm" / "modeling_attention.py").read_text(),
        skeleton) for p in written}
    pairs = S.code_pairs(codes, skeleton)
    best: dict[str, tuple[float, str]] = {}
    for pair in pairs:
        for me, other in ((pair.a, pair.b), (pair.b, pair.a)):
            if pair.score > best.get(me, (-1.0, ""))[0]:
                best[me] = (pair.score, other)
    for original in ("einsum", "loop_heads", "nanogpt_style"):
        family = {original, *(f"{label}_of_{original}"
                              for label in class_batch.DISGUISES)}
        for member in family:
            assert best[member][1] in family, (member, best[member])
    # and the one copied answer (case and spacing changed) tops the answers
    from autograder.submission.answers import collect_answers
    answers = {p.name: collect_answers(p / "assignment" / "attention.ipynb")
               for p in written if (p / "assignment").is_dir()}
    top = S.answer_pairs(answers)[0]
    assert {top.a, top.b} == {"copy1_of_reference", "reference"}


def _rank_of(pairs: list, a: str, b: str) -> int:
    return next(i for i, p in enumerate(pairs, 1) if {p.a, p.b} == {a, b})


def test_a_copy_with_every_name_in_parentheses_ranks_first():
    sources = _common_as_given(
        {n: variants.find(f"styles/{n}").source() for n in INDEPENDENT})
    wrapped = C.parenthesise(sources["reference"])
    assert wrapped != sources["reference"] and "(self).q" in wrapped
    compile(wrapped, "wrapped", "exec")
    skeleton = homework.current().module.read_text()
    # The control: the same copy without the parentheses.
    for copy in (sources["reference"], wrapped):
        pairs = S.code_pairs(_codes({**sources, "copy": copy}), skeleton)
        assert _rank_of(pairs, "reference", "copy") == 1
        assert pairs[0].score == 1.0 and pairs[0].z >= S.LEAD_Z


def test_answers_copied_with_invisible_characters_rank_first():
    answers = {
        "ann": {"Q1": "Scaling by the square root of the key size keeps "
                      "the dot products from growing, so the softmax does "
                      "not saturate."},
        "cat": {"Q1": "Without it large logits push the softmax to one hot "
                      "outputs with vanishing gradients."},
        "dan": {"Q1": "It normalises the variance of q.k to about one for "
                      "unit variance inputs."},
    }
    text = answers["ann"]["Q1"]
    for mark in ("\u2063", "\u200b", "\u00ad"):
        hidden = " ".join(w[:1] + mark + w[1:] for w in text.split())
        # The control: the same copy without the invisible characters.
        for copy in (text, hidden):
            pairs = S.answer_pairs({**answers, "ben": {"Q1": copy}})
            assert {pairs[0].a, pairs[0].b} == {"ann", "ben"}
            assert pairs[0].score == 1.0


def test_code_is_compared_as_python_reads_it():
    assert S.normalised("(q) = ((self).q)((x))\n") == "q = self.q(x)\n"
    assert S.normalised("    if x:\n        y = (\n    1)\n") == \
        "if x:\n    y = 1\n"
    # The skeleton's given statements are no one's code.
    assert S.normalised("raise (ValueError)('x')\ny = 2\n",
                        frozenset({"raise ValueError('x')"})) == "y = 2\n"
    # What does not parse alone is compared as written.
    assert S.normalised("    for h in heads:\n") is None
    skeleton = "    # YOUR CODE STARTS HERE\n    pass\n    # YOUR CODE ENDS " \
        "HERE\n"
    source = ("def f(x):\n    # YOUR CODE STARTS HERE\n    for h in x:\n"
              "    # YOUR CODE ENDS HERE\n        pass\n")
    # (a line that does not parse alone is read as a block's header)
    assert S.student_code(source, skeleton) == "for h in x:\n"
    assert S.visible("s\u2063o\u200bft\u00admax") == "softmax"


HIDDEN = "\u2062"      # INVISIBLE TIMES: renders as nothing
FLIP = "\u202e"        # RIGHT-TO-LEFT OVERRIDE: reorders what follows


def test_similarity_pages_write_invisible_characters_out(tmp_path):
    """The side-by-side pages write student text through
    mdsafe.html_text: a TA sees a hidden character in the code or a
    submission's name."""
    a, b = f"alice{FLIP}gpj.exe", "bob<script>"
    code = f"x = a {HIDDEN}* b\ny = x\n"
    pair = Pair(a, b, 0.9, 4.0, 99.0, detail=([(0, 5)], [(0, 5)]))
    links = S.write_side_by_side(tmp_path, [pair], {a: code, b: code})
    page = (tmp_path / links[(a, b)]).read_text()
    assert HIDDEN not in page and FLIP not in page
    assert "&lt;U+2062&gt;" in page and "&lt;U+202E&gt;" in page
    assert "<script>" not in page and "<mark>x = a</mark>" in page
    rows = S._rows([pair], links, {})
    assert FLIP not in rows and "&lt;U+202E&gt;" in rows


# --------------------------------------------------------------------------
# Flagged whatever the class's distribution; the code the grader grades;
# earlier editions

def _independent() -> dict[str, str]:
    return _common_as_given(
        {n: variants.find(f"styles/{n}").source() for n in INDEPENDENT})


def test_an_honest_class_is_not_flagged_and_a_copy_is():
    sources = _independent()
    skeleton = homework.current().module.read_text()
    # The control: independent solutions, nothing flagged.
    honest = S.code_pairs(_codes(sources), skeleton)
    assert honest and not [p for p in honest if p.flagged]
    assert max(p.score for p in honest) < S.CODE_FLOOR
    pairs = S.code_pairs(_codes({**sources, "copy": sources["einsum"]}),
                         skeleton)
    copy = pairs[_rank_of(pairs, "einsum", "copy") - 1]
    assert copy.flagged and copy.floor.startswith("identical code")
    assert copy.floor.endswith("names and strings aside)")
    assert [p for p in pairs if p.flagged] == [copy]


def test_a_copy_is_flagged_where_its_z_is_low():
    # A class of the catalogue's styles, most of them one edit of the
    # reference: the median is high, and an identical copy's robust z
    # stays under LEAD_Z; the floor flags it all the same.
    sources = {n: v.source() for n, v in variants.load("styles").items()}
    skeleton = homework.current().module.read_text()
    pairs = S.code_pairs(_codes({**sources, "copy": sources["mha_sdpa"]}),
                         skeleton)
    copy = pairs[_rank_of(pairs, "mha_sdpa", "copy") - 1]
    print(f"identical copy: score {copy.score:.2f}, z {copy.z:.1f}")
    assert copy.z < S.LEAD_Z and copy.flagged and copy in S.shown(pairs)


def test_a_copy_moved_above_the_markers_is_still_a_copy():
    sources = _independent()
    moved = C.above_markers(sources["einsum"])
    assert moved != sources["einsum"]
    compile(moved, "moved", "exec")
    skeleton = homework.current().module.read_text()
    # The control: the TODO regions alone hold nothing of it.
    marked_only = {n: S.student_code(s, skeleton, methods={})
                   for n, s in {**sources, "moved": moved}.items()}
    assert marked_only["moved"] == ""
    for copy in (sources["einsum"], moved):
        pairs = S.code_pairs(_codes({**sources, "copy": copy}), skeleton)
        assert _rank_of(pairs, "einsum", "copy") == 1
        print(f"copy ~ einsum: {pairs[0].score:.2f} ({pairs[0].why})")
        assert pairs[0].score >= S.CODE_FLOOR and pairs[0].flagged


def test_one_copied_answer_among_honest_ones_is_flagged():
    from kit.corpus import class_batch
    # The control: 40 students' own wordings, none over the floor.
    honest = {f"s{i}": {"Q1": class_batch.answer(i),
                        "Q2": f"Head {i} sees its own slice of the values."}
              for i in range(40)}
    assert not [p for p in S.answer_pairs(honest) if p.floor]
    copied = dict(honest)
    copied["cheat"] = {"Q1": class_batch.answer(7).upper() + " Indeed.",
                       "Q2": "Every head attends to a subspace."}
    pairs = S.answer_pairs(copied)
    pair = next(p for p in pairs if {p.a, p.b} == {"s7", "cheat"})
    assert pair.score < S.ANSWER_FLOOR      # the mean over both questions
    assert pair.floor == "Q1 near-identical" and pair in S.shown(pairs)


def _graded(folder: Path, sources: dict[str, str]) -> Path:
    for name, source in sources.items():
        sub = folder / "submissions" / name
        sub.mkdir(parents=True)
        (sub / "source.py").write_text(source)
        (sub / "answers.json").write_text(json.dumps({"Q1": f"{name} " * 8}))
    return folder


def test_an_earlier_edition_is_compared_without_regrading(tmp_path):
    import os
    import shutil
    sources = _independent()
    now = _graded(tmp_path / "2026", {n: sources[n]
                                      for n in ("einsum", "loop_heads")})
    old = _graded(tmp_path / "2025", {"ann": sources["reference"],
                                      "ben": sources["einsum"],
                                      "cy": sources["einsum"]})
    zipped = shutil.make_archive(str(tmp_path / "ed2025"), "zip",
                                 tmp_path, "2025")
    # The control: without the archive, no pair is flagged.
    code, _, _ = S.analyse(now)
    assert not [p for p in code if p.flagged]
    for archive, label in ((old, "2025"), (Path(zipped), "ed2025")):
        notes: list[str] = []
        code, answers, _ = S.analyse(now, notes=notes, archive=[archive])
        flagged = {frozenset((p.a, p.b)) for p in code if p.flagged}
        assert flagged == {frozenset(("einsum", f"{label}/ben")),
                           frozenset(("einsum", f"{label}/cy"))}
        # two submissions of the archive are never a pair
        assert all(not (p.a.startswith(label) and p.b.startswith(label))
                   for p in code + answers)
        assert not notes
    # A FIFO, or a missing path, is refused before anything opens it.
    os.mkfifo(tmp_path / "fifo.zip")
    for bad in (tmp_path / "fifo.zip", tmp_path / "none"):
        with pytest.raises(S.ArchiveError, match="--archive"):
            S.analyse(now, archive=[bad])
    from autograder import cli
    with pytest.raises(SystemExit) as exit_:
        cli.build_parser().parse_args(["similarity", str(now), "--archive",
                                       str(tmp_path / "fifo.zip")])
    assert exit_.value.code == 2
