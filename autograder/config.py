"""One grading configuration: the rubric, the cases and the mistakes.

A command builds it once (:func:`load_config`) and passes it down; no
function below the command reads a default file by itself, so grading with
``--rubric OTHER.toml`` judges every check, region and deduction by that
rubric and nothing else.
"""
from __future__ import annotations

import tomllib
from dataclasses import dataclass, replace
from pathlib import Path

from autograder import homework
from autograder.rubric import Check, Rubric, load_rubric
from autograder.files.user_files import read_regular_text
from autograder.values import load_cases, values_dir


class MistakesError(ValueError):
    """The mistakes file cannot be read; the message names it."""


def load_mistake_messages(path: Path | None = None) -> dict[str, str]:
    """Catalogue id -> student-facing explanation, in file order (the
    order in which a wrong answer is matched). Raises MistakesError naming
    the file when it cannot be read. Default: the homework in use's."""
    path = path or homework.current().mistakes
    try:
        # never a FIFO; a link to a regular file is followed
        data = tomllib.loads(read_regular_text(path, follow_links=True))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise MistakesError(f"cannot read {path}: {exc}: regenerate it "
                            f"with `make generate`") from None
    return {mid: entry["message"] for mid, entry in data.items()}


@dataclass(frozen=True)
class GradingConfig:
    """Everything a grade depends on besides the submission: the rubric,
    the test cases and the mistake messages (catalogue id -> explanation).
    All three are required: an empty one is never read as "the default"."""

    rubric: Rubric
    cases: list
    mistakes: dict[str, str]
    #: The whole homework's task methods when ``rubric`` holds a part of
    #: it (a notebook cell grades one class): code in another task's class
    #: stays that task's, never "outside every task" (charged to all).
    whole_task_methods: dict[str, tuple[str, ...]] | None = None
    #: The homework graded (its module's name and package, its questions,
    #: its data files): read once by the command and handed on with the
    #: rest. None: the homework in use (``$HOMEWORK``), read when asked.
    homework: homework.Homework | None = None

    @property
    def profile(self) -> homework.Homework:
        """The homework this configuration grades."""
        return self.homework or homework.current()

    #: Seconds per probe for every check, over the rubric's (``grade
    #: --timeout``, ``check --timeout``; the kit's tests give hostile code
    #: short ones). None: each check's own (:meth:`time_limit`).
    probe_timeout: float | None = None

    def time_limit(self, check: Check) -> float:
        """Seconds of wall clock each probe of ``check`` gets: the
        command's override, else the item's ``timeout``, else the rubric's
        ``[grading] timeout`` (already the item's when it states none)."""
        return self.probe_timeout if self.probe_timeout is not None \
            else check.timeout

    def with_time_limit(self, seconds: float | None) -> GradingConfig:
        """This config with every probe's limit ``seconds`` (None: as
        it is)."""
        return self if seconds is None else replace(self,
                                                    probe_timeout=seconds)

    @property
    def task_methods(self) -> dict[str, tuple[str, ...]]:
        """Class ("" for a module-level function) -> the methods whose code
        the student writes: the rubric's ``methods`` of every task."""
        if self.whole_task_methods is not None:
            return dict(self.whole_task_methods)
        return {task.cls: task.methods for task in self.rubric.tasks}


def load_config(rubric: Path | str | None = None,
                values: Path | str | None = None, *,
                sets: tuple[str, ...] = ("public", "hidden"),
                mistakes: Path | str | None = None,
                hw: homework.Homework | None = None,
                probe_timeout: float | None = None) -> GradingConfig:
    """Read the rubric, the cases of ``sets`` (default
    ``$AUTOGRADER_VALUES`` or the homework's test values) and the mistake
    messages, each by default the homework ``hw``'s (default: the one in
    use, read here once); ``probe_timeout`` overrides every probe's
    seconds. Raises RubricError or ValuesError naming the file."""
    hw = hw or homework.current()
    return GradingConfig(load_rubric(rubric, hw=hw),
                         load_cases(Path(values) if values
                                    else values_dir(hw), sets=sets),
                         load_mistake_messages(Path(mistakes or
                                                    hw.mistakes)),
                         homework=hw, probe_timeout=probe_timeout)
