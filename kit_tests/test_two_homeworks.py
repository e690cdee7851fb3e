"""Two homeworks in one process: the grader is handed the homework it
grades (``load_config(hw=...)``, ``GradingConfig.homework``) and binds
none at import, so the checkout's attention homework and homeworks/ffn are
read and graded side by side, each by its own rubric, cases, mistakes,
module name and questions, whatever ``$HOMEWORK`` says."""
from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from autograder import homework
from autograder.config import load_config
from autograder.grade import grade_source
from autograder.local import in_process_runner
from autograder.submission import answers
from autograder.submission.locate import resolve

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {"attention": ROOT, "ffn": ROOT / "homeworks" / "ffn"}


@pytest.fixture(scope="module")
def profiles() -> dict[str, homework.Homework]:
    return {name: homework.load(folder, staff=True)
            for name, folder in FOLDERS.items()}


@pytest.fixture(scope="module")
def configs(profiles):
    """Each homework's public config, loaded one after the other here."""
    return {name: load_config(sets=("public",), hw=hw)
            for name, hw in profiles.items()}


def test_each_config_reads_its_own_homework(profiles, configs,
                                            monkeypatch):
    # $HOMEWORK names neither: what a config reads is the profile handed in
    monkeypatch.setenv(homework.ENV, str(FOLDERS["attention"]))
    for name, hw in profiles.items():
        config = configs[name]
        assert hw.name == name and config.profile is hw
        assert config.rubric.path == str(hw.rubric)
        shipped = tomllib.loads(hw.mistakes.read_text())
        assert list(config.mistakes) == list(shipped)
        rubric_classes = {t.cls for t in config.rubric.tasks}
        assert config.cases and {c.cls for c in config.cases} \
            <= rubric_classes
        assert answers.questions(hw) == answers.load_questions(hw.questions)
    assert not {t.cls for t in configs["ffn"].rubric.tasks} & {
        t.cls for t in configs["attention"].rubric.tasks}


def test_a_submission_is_found_by_the_homework_it_is_graded_for(
        profiles, tmp_path):
    folder = tmp_path / "both"
    for hw in profiles.values():
        (folder / hw.package).mkdir(parents=True)
        (folder / hw.package / hw.module_name).write_text(
            f"# {hw.name}\n")
    for name, hw in profiles.items():
        sub = resolve(folder, tmp_path, hw=hw)
        assert not sub.error and sub.source == f"# {name}\n", sub.error


def _grade(config, source: str, filename: str):
    return grade_source(source, filename, config, in_process_runner,
                        name=Path(filename).stem, public_only=True)


def test_both_references_earn_full_marks_in_one_process(profiles,
                                                        configs):
    for name, hw in profiles.items():
        grade = _grade(configs[name], hw.reference.read_text(),
                       hw.module_name)
        assert not (grade.error or grade.internal_error), (
            name, grade.error, grade.internal_error[-2000:])
        assert grade.score >= grade.max_score > 0, (
            name, [(t.task.id, t.score) for t in grade.tasks])


def test_a_mistake_is_named_by_its_own_homework(profiles, configs):
    hw = profiles["ffn"]
    catalogue = tomllib.loads((hw.catalogue / "mistakes.toml").read_text())
    mid, entry = next(iter(catalogue.items()))
    source = hw.reference.read_text()
    for before, after in entry["edits"]:
        source = source.replace(before, after, 1)
    grade = _grade(configs["ffn"], source, hw.module_name)
    assert grade.score < grade.max_score and mid in grade.mistakes()
    # the other homework's config finds none of its classes in it
    other = _grade(configs["attention"], source, hw.module_name)
    assert other.score == 0
