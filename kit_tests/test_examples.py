"""The demo's example submissions are edits of the live reference."""
from __future__ import annotations

from pathlib import Path

import pytest

from kit.examples import REFERENCE, ExampleError, build_examples, \
    example_sources


def test_every_example_is_the_reference_with_its_mistake(tmp_path: Path):
    reference = REFERENCE.read_text()
    paths = build_examples(tmp_path)
    assert {p.stem for p in paths} >= {"no_scale", "mask_diagonal",
                                       "syntax_error"}
    for path in paths:
        source = path.read_text()
        assert source.startswith("# Example submission: ")
        assert source != reference and "class CausalAttention" in source
    with pytest.raises(SyntaxError):
        compile((tmp_path / "syntax_error.py").read_text(), "x", "exec")
    compile((tmp_path / "no_scale.py").read_text(), "x", "exec")


def test_an_edit_that_no_longer_matches_is_an_error(tmp_path: Path):
    spec = tmp_path / "examples.toml"
    spec.write_text('[stale]\ndescription = "x"\n'
                    'edits = [["text not in the reference", "y"]]\n')
    with pytest.raises(ExampleError, match=r"\[stale\].*appears 0 times"):
        example_sources(spec)
