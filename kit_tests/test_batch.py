"""The batch engine (autograder/batch.py) on a stand-in runner: every
entry gets exactly one grade, in order, whatever happens to another; the
mid-batch canary stops the batch only when the environment broke."""
from __future__ import annotations

from pathlib import Path

import pytest

from autograder import batch
from autograder.config import load_config
from autograder.report import layout
from autograder.sandbox.protocol import CRASH, ProbeResult

CONFIG = load_config(sets=("public",))


def crashing(source, filename, probes):
    """A runner whose worker dies on every probe: a zero, no error."""
    return [ProbeResult(p.id, CRASH, "died") for p in probes]


def test_one_broken_submission_never_stops_the_batch(tmp_path, monkeypatch):
    real = batch.resolve

    def resolve(path, workdir, name=None, *, hw=None):
        if name == "boom":
            raise RuntimeError("simulated")
        return real(path, workdir, name, hw=hw)
    monkeypatch.setattr(batch, "resolve", resolve)
    entries = [batch.Entry("a", Path("a.py"), "x = 1\n"),
               batch.Entry("missing", tmp_path / "missing.py"),
               batch.Entry("boom", tmp_path / "boom.py"),
               batch.Entry("b", Path("b.py"), "y = 2\n")]
    done: list[str] = []
    out = tmp_path / "out"
    graded = batch.grade_all(entries, CONFIG, crashing, jobs=2,
                             public_only=True, out=out,
                             progress=done.append)
    assert [g.name for g in graded.grades] == ["a", "missing", "boom", "b"]
    a, missing, boom, b = graded.grades
    assert a.score == b.score == 0 and not (a.error or a.internal_error)
    # a path gone by the time it is graded: the grader's, never a zero
    assert "missing.py" in missing.internal_error and not missing.error
    assert "RuntimeError: simulated" in boom.internal_error
    assert sorted(done) == ["a", "b", "boom", "missing"]
    for name in done:
        assert (layout.submission_dir(out, name) / "results.json").is_file()
    assert (layout.submission_dir(out, "a") / "source.py").read_text() == \
        "x = 1\n"
    # No notebook: on the TAs' answer pages all the same, with no answer
    # (else its questions would stay pending with nobody shown to score).
    assert graded.answers["a"] == graded.answers["b"] == {}


def test_without_an_output_folder_nothing_is_written(tmp_path,
                                                     monkeypatch):
    monkeypatch.chdir(tmp_path)
    seen: list[float | None] = []

    def runner(source, filename, probes):
        seen.extend({p.timeout for p in probes})
        return crashing(source, filename, probes)
    graded = batch.grade_all([batch.Entry("a", Path("a.py"), "x = 1\n",
                                          timeout=1.5)], CONFIG, runner)
    assert graded.grades[0].answers == "" and graded.answers == {}
    assert set(seen) == {1.5}   # the entry's probe time limit
    assert list(tmp_path.iterdir()) == []


def test_a_zero_is_kept_only_once_the_canary_passes_again(monkeypatch):
    calls: list[object] = []

    def passing(sandbox, quiet=False, remember=False, memory=True):
        calls.append(sandbox)
        return ["uid-drop"]
    monkeypatch.setattr(batch, "preflight", passing)
    entries = [batch.Entry("a", Path("a.py"), "x = 1\n")]
    graded = batch.grade_all(entries, CONFIG, crashing, canary="sandbox",
                             layers=["uid-drop"])
    assert calls == ["sandbox"] and graded.grades[0].jail == ["uid-drop"]

    def failing(sandbox, quiet=False, remember=False, memory=True):
        raise batch.ConfigError("canary failed")
    monkeypatch.setattr(batch, "preflight", failing)
    with pytest.raises(batch.ConfigError,
                       match="found after grading a: it and the rest"):
        batch.grade_all(entries, CONFIG, crashing, canary="sandbox")
