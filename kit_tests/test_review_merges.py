"""Seams between the branches merged together (jail, integrity, escape,
batch, cascade, calls, fresh, perf): each branch was tested alone, these
test what one branch's change does to another's."""
from __future__ import annotations

from autograder import similarity
from autograder.similarity import Pair

HIDDEN = "\u2062"      # INVISIBLE TIMES: renders as nothing
FLIP = "\u202e"        # RIGHT-TO-LEFT OVERRIDE: reorders what follows


def test_similarity_pages_write_invisible_characters_out(tmp_path):
    """escape's seam (mdsafe.html_text) on batch's similarity pages: a
    TA sees a hidden character in the code or a submission's name."""
    a, b = f"alice{FLIP}gpj.exe", "bob<script>"
    code = f"x = a {HIDDEN}* b\ny = x\n"
    pair = Pair(a, b, 0.9, 4.0, 99.0, detail=([(0, 5)], [(0, 5)]))
    links = similarity.write_side_by_side(tmp_path, [pair],
                                          {a: code, b: code})
    page = (tmp_path / links[(a, b)]).read_text()
    assert HIDDEN not in page and FLIP not in page
    assert "&lt;U+2062&gt;" in page and "&lt;U+202E&gt;" in page
    assert "<script>" not in page and "<mark>x = a</mark>" in page
    rows = similarity._rows([pair], links, {})
    assert FLIP not in rows and "&lt;U+202E&gt;" in rows
