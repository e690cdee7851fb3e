"""``python -m autograder gradescope`` in process (the grading stubbed):
what staff are told when the root they set up holds no submission."""
from __future__ import annotations

from autograder.gradescope import entry


def test_a_root_without_submission_names_the_folder_and_the_fix(
        tmp_path, monkeypatch, capsys):
    graded = []
    monkeypatch.setattr(entry, "grade_gradescope",
                        lambda folder, results, **_: graded.append(folder)
                        or {"score": 0.0})
    assert entry.run(tmp_path, lambda: None) == 0
    err = capsys.readouterr().err
    assert f"no {tmp_path / 'submission'}: put the submission there" in err
    assert "AUTOGRADER_ROOT or --root" in err
    # still graded: results.json is written whatever happens
    assert graded == [tmp_path / "submission"]
    (tmp_path / "submission").mkdir()
    assert entry.run(tmp_path, lambda: None) == 0
    assert capsys.readouterr().err == ""
