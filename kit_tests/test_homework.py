"""The homework profile (autograder/homework.py): homework.toml read and
validated, HOMEWORK selecting another, and the shipped graders carrying
their own copy."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from autograder import homework

ROOT = Path(__file__).resolve().parents[1]
PROFILE = ROOT / homework.PROFILE


def _copy_profile(tmp_path: Path, edit=None) -> Path:
    """A folder with a copy of the profile and every file it names (empty
    stand-ins), after ``edit(text) -> text``."""
    text = PROFILE.read_text()
    (tmp_path / homework.PROFILE).write_text(edit(text) if edit else text)
    for section, keys in homework.SCHEMA.items():
        for key, (kind, _) in keys.items():
            if kind not in ("path", "paths"):
                continue
            value = tomllib.loads(text)[section].get(key)
            if value is None:   # an optional key left out
                continue
            for one in [value] if kind == "path" else value:
                target = tmp_path / one
                target.parent.mkdir(parents=True, exist_ok=True)
                if "." in target.name:
                    target.touch()
                else:
                    target.mkdir(exist_ok=True)
    return tmp_path


def _refusal(tmp_path: Path, old: str, new: str, *, staff=False) -> str:
    assert re.search(old, PROFILE.read_text(), re.M), old
    root = _copy_profile(tmp_path, lambda t: re.sub(old, new, t, 1,
                                                    flags=re.M))
    with pytest.raises(homework.HomeworkError) as raised:
        homework.load(root, staff=staff)
    return str(raised.value)


# -- the repository's profile -------------------------------------------------

def test_the_repository_profile_names_files_that_exist():
    hw = homework.load(ROOT, staff=True)
    assert hw.root == ROOT and hw.profile == PROFILE
    data = tomllib.loads(PROFILE.read_text())
    assert hw.module == ROOT / data["module"]["file"]
    assert hw.module.is_file() and hw.reference.is_file()
    assert hw.module.parent.name == hw.package
    assert hw.import_name == f"{hw.package}.{hw.module.stem}"
    for path in (hw.rubric, hw.mistakes, hw.questions, hw.python_features,
                 hw.notebook_source, hw.notebook, hw.cases, hw.steps):
        assert path.is_file() and path.is_relative_to(ROOT), path
    assert hw.catalogue.is_dir() and hw.test_values.is_dir()


def test_current_is_the_repository_unless_homework_is_set(monkeypatch):
    monkeypatch.delenv(homework.ENV, raising=False)
    assert homework.current() == homework.load(ROOT)
    assert homework.staff() == homework.load(ROOT, staff=True)


def test_the_grader_reads_its_files_from_the_profile_it_is_given():
    from autograder.config import load_config
    from autograder.submission import answers
    from autograder.values import values_dir
    hw = homework.current()
    config = load_config(sets=("public",))
    assert config.profile == hw and config.rubric.path == str(hw.rubric)
    assert values_dir(hw) == hw.test_values or os.environ.get(
        "AUTOGRADER_VALUES")
    assert answers.questions(hw) == answers.load_questions(hw.questions)


def test_python_features_is_the_graders_unless_a_homework_overrides_it(
        tmp_path):
    # one shared table (what the grader's Python lacks is the grader's
    # fact): neither homework copies it
    for root in (ROOT, ROOT / "homeworks" / "ffn"):
        assert homework.load(root).python_features == \
            homework.SHARED_FEATURES
    assert not (ROOT / "homeworks" / "ffn" / "autograder" /
                "python_features.toml").exists()
    own = _copy_profile(tmp_path, lambda t: t.replace(
        "[data]\n", '[data]\npython_features = "own/features.toml"\n', 1))
    (own / "own").mkdir()
    (own / "own" / "features.toml").write_text('grader = "3.11"\n')
    assert homework.load(own).python_features == \
        own.resolve() / "own" / "features.toml"
    (own / "own" / "features.toml").unlink()
    with pytest.raises(homework.HomeworkError, match="python_features"):
        homework.load(own)


# -- validation ---------------------------------------------------------------

def test_an_unknown_key_is_named_with_the_known_ones(tmp_path):
    message = _refusal(tmp_path, r"^package = ", 'pakage = "x"\npackage = ')
    assert "unknown key [module] pakage" in message
    assert "package, file, reference" in message


def test_an_unknown_section_is_named(tmp_path):
    message = _refusal(tmp_path, r"^\[release\]", "[relase]\n[release]")
    assert "unknown section [relase]" in message


def test_a_missing_key_is_named_with_the_fix(tmp_path):
    message = _refusal(tmp_path, r"^folder = .*$", "")
    assert "[release] folder is missing: add it to homework.toml" in message


def test_a_missing_file_names_the_key_and_the_path(tmp_path):
    message = _refusal(tmp_path, r'^rubric = ".*"',
                       'rubric = "autograder/nowhere.toml"')
    assert "[data] rubric = 'autograder/nowhere.toml'" in message
    assert "does not exist: create it or fix the path" in message


@pytest.mark.parametrize("old, new, words", [
    (r'^name = ".*?"', "name = 3", "must be a non-empty string"),
    (r'^name = ".*?"', 'name = "two words"', "must be one word"),
    (r'^file = ".*?"', 'file = "/etc/passwd"', "must be a relative path"),
    (r'^file = ".*?"', 'file = "../x.py"', "must be a relative path"),
    (r'^venv = ".*?"', 'venv = "venv"', "must be an absolute path"),
    (r'^venv = ".*?"', 'venv = "/opt/$(rm)/v"', "must be an absolute path"),
    (r'^facts = .*$', 'facts = "README.md"', "must be a non-empty list"),
    (r'^facts = .*$', 'facts = []', "must be a non-empty list"),
    (r'^facts = .*$', 'facts = ["../README.md"]', "must be a relative path"),
])
def test_a_bad_value_is_refused_with_its_key(tmp_path, old, new, words):
    message = _refusal(tmp_path, old, new)
    assert words in message and "homework.toml" in message, message


def test_a_missing_facts_document_is_named_for_the_staff(tmp_path):
    message = _refusal(tmp_path, r'^facts = .*$', 'facts = ["nowhere.md"]',
                       staff=True)
    assert "[docs] facts = 'nowhere.md'" in message
    assert "does not exist" in message


def test_staff_files_are_checked_only_for_the_staff(tmp_path):
    root = _copy_profile(tmp_path)
    reference = homework.load(root).reference
    reference.unlink()   # as in every shipped copy
    assert homework.load(root).reference == reference
    with pytest.raises(homework.HomeworkError, match=r"\[module\] "
                       r"reference = .* does not exist"):
        homework.load(root, staff=True)


def test_a_folder_without_a_profile_says_how_to_choose_one(
        tmp_path, monkeypatch):
    monkeypatch.delenv("HOMEWORK", raising=False)
    with pytest.raises(homework.HomeworkError,
                       match=r"homework\.toml is missing: .*as HOMEWORK=DIR .*"
                       r"; HOMEWORK is not set"):
        homework.load(tmp_path)


# -- HOMEWORK selects the homework -------------------------------------------

def test_homework_selects_another_folder(tmp_path, monkeypatch):
    root = _copy_profile(tmp_path, lambda t: t.replace(
        'folder = "', 'folder = "other-'))
    monkeypatch.setenv(homework.ENV, str(root))
    assert homework.selected_root() == root
    chosen = homework.current()
    assert chosen.root == root.resolve()
    assert chosen.release_folder.startswith("other-")
    assert chosen.rubric.is_relative_to(root.resolve())


def test_a_wrong_homework_is_a_message_not_a_traceback(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(PYTHONPATH=str(ROOT), HOMEWORK=str(tmp_path))
    done = subprocess.run([sys.executable, "-m", "autograder", "check"],
                          cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.startswith(f"error: {tmp_path / homework.PROFILE} "
                                  f"is missing"), done.stderr
    assert "Traceback" not in done.stderr


# -- the shipped graders read their own copy --------------------------------

def test_the_gradescope_tree_loads_its_own_profile(tmp_path):
    from kit.release import gradescope
    tree = tmp_path / "autograder"
    gradescope.assemble(tree)
    shipped = homework.load(tree)
    assert shipped.root == tree.resolve()
    assert shipped.kinds   # the homework's own check kinds ship with it
    for path in (shipped.rubric, shipped.mistakes, shipped.questions,
                 shipped.test_values, *shipped.kinds):
        assert path.exists() and path.is_relative_to(tree.resolve())
    # what the grader's Python lacks is the running grader's: the tree's
    # own grader package carries it
    assert (tree / "autograder" / "python_features.toml").read_bytes() == \
        homework.SHARED_FEATURES.read_bytes()
    assert not shipped.reference.exists()
    assert shipped.rubric.read_bytes() == homework.current().rubric \
        .read_bytes()


def test_the_scripts_read_the_venv_from_the_profile(tmp_path):
    # run_autograder picks the profile's venv python (here a stand-in
    # that records its arguments) when AUTOGRADER_PYTHON is unset.
    from kit.release import gradescope
    root = tmp_path / "gs"
    source = root / "source"
    gradescope.assemble(source)
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    python.write_text(f"#!/bin/sh\necho \"$@\" >> {tmp_path / 'calls'}\n")
    python.chmod(0o755)
    profile = source / homework.PROFILE
    profile.write_text(profile.read_text().replace(
        homework.current().gradescope_venv, str(venv)))
    (root / "submission").mkdir()
    (root / "results").mkdir()
    env = {k: v for k, v in os.environ.items()
           if k not in ("AUTOGRADER_PYTHON",)}
    env["AUTOGRADER_ROOT"] = str(root)
    subprocess.run(["bash", str(source / "run_autograder")], env=env,
                   capture_output=True, timeout=120)
    assert "autograder" in (tmp_path / "calls").read_text()


def test_the_release_carries_the_profile_and_what_it_names(tmp_path):
    from kit.release import student as release
    hw = homework.current()
    # the release writes its public values itself; the rest comes with
    # the profile (or with the grader package's copy)
    (tmp_path / hw.test_values.relative_to(hw.root)).mkdir(parents=True)
    release.ship_profile(tmp_path)
    shipped = homework.load(tmp_path)
    assert shipped.root == tmp_path.resolve()
    assert shipped.questions.read_bytes() == hw.questions.read_bytes()
    assert shipped.rubric.read_bytes() == hw.rubric.read_bytes()
