"""The command line's words in process (no grading, no sandbox): the
exit statuses and the rubric its help names, and what a missing file
is told."""
from __future__ import annotations

import sys
from pathlib import Path

from autograder import cli, graded_folder

ROOT = Path(__file__).resolve().parents[1]


def test_the_help_names_every_exit_status():
    text = " ".join(cli.build_parser().format_help().split())
    assert "0 when grading ran" in text
    assert f"{cli.USAGE_ERROR} for a usage or configuration error" in text
    assert (f"{graded_folder.GRADER_ERROR_EXIT} when `grade` could not "
            "grade some submissions") in text


def test_check_on_a_missing_file_gives_the_make_and_the_python_forms(
        tmp_path, capsys):
    missing = tmp_path / "nope.py"
    assert cli.main(["check", str(missing)]) == cli.USAGE_ERROR
    err = " ".join(capsys.readouterr().err.split())
    name = cli.homework.current().module_name
    assert err.startswith(f"error: {missing}: no such file")
    assert f"`make check FILE=path/to/{name}`" in err
    assert f"`{sys.executable} -m autograder check path/to/{name}`" in err


def test_the_help_names_the_rubric_in_use_where_the_user_is(
        monkeypatch, tmp_path):
    # another homework's rubric (HOMEWORK=homeworks/ffn) is not at
    # autograder/rubric.toml: the help names the one the grader reads
    other = cli.homework.load(ROOT / "homeworks" / "ffn")
    ffn = other.rubric
    monkeypatch.chdir(ROOT)
    text = " ".join(cli.build_parser(other).format_help().split())
    assert "are in homeworks/ffn/autograder/rubric.toml." in text
    monkeypatch.chdir(tmp_path)   # outside it: the whole path
    text = " ".join(cli.build_parser(other).format_help().split())
    assert f"are in {ffn}." in text


def test_a_missing_package_in_checks_canary_names_the_students_python():
    # the issue's own environment without numpy: the remedy is this
    # Python's pip, not a bare `python` that may be another one
    from autograder.sandbox import plain
    said = plain.student_error("ModuleNotFoundError",
                               "... No module named 'numpy' ...")
    assert f"{sys.executable} -m pip install numpy" in said
    assert " python -m pip" not in said
