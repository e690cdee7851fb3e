"""The batch engine: many submissions graded once each, in parallel.

Every command that grades goes through here: ``grade`` (a folder of
submissions: autograder/graded_folder.py), ``check`` and ``gradescope``
(one submission, :func:`grade_submission`), and the kit's own batches
(``kit_tests/grading_batch.py``, ``make bench``). One submission never
stops a batch: whatever happens to it is a grade (with ``error`` or
``internal_error``); only the grader's own environment failing (the
canary, autograder/sandbox/preflight.py) stops it, as a
:class:`ConfigError`, before a wrong score is kept.
"""
from __future__ import annotations

import shutil
import sys
import tempfile
import threading
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autograder.config import GradingConfig, MistakesError, load_config
from autograder.grade import (GradeResult, Runner, failed_grade,
                              grade_source, sandbox_runner)
from autograder.report import layout, results as report
from autograder.rubric import RubricError, load_rubric
from autograder.submission.locate import Submission, resolve
from autograder.values import ValuesError


class ConfigError(Exception):
    """Usage or configuration problem: exit status 2."""


def read_config(rubric: Path | None, values: Path | None,
                sets: tuple[str, ...]) -> GradingConfig:
    """The command's :class:`GradingConfig`, or ConfigError saying what
    is wrong with the rubric or the test values."""
    try:
        config = load_config(rubric, values, sets=sets)
    except (RubricError, ValuesError, MistakesError) as exc:
        raise ConfigError(str(exc)) from None
    if not config.cases:
        raise ConfigError("no test cases found: run `make test-values`")
    return config


# --------------------------------------------------------------------------
# The canary

def preflight(sandbox: Any, *, quiet: bool = False,
              remember: bool = False) -> list[str]:
    """The canary through the real sandbox, or ConfigError: no score is
    written on a machine where a correct submission would not pass.
    ``remember`` (``check`` only, a preview): a canary that passed in this
    environment before counts (autograder/sandbox/preflight.py)."""
    from autograder.sandbox.jail import LAYERS
    from autograder.sandbox.preflight import (PreflightError,
                                              remembered_preflight,
                                              run_preflight)
    try:
        layers = (remembered_preflight if remember else run_preflight)(
            sandbox)
    except PreflightError as exc:
        raise ConfigError(str(exc)) from None
    if not quiet:
        from autograder.sandbox.preflight import describe_jail
        print(describe_jail(sandbox, layers), file=sys.stderr)
    assert set(layers) <= set(LAYERS)
    return layers


def beside_canary(sandbox: Any, load: Callable[[], Any]
                  ) -> tuple[Any, list[str]]:
    """``load()`` (reading the rubric and the values) while the canary
    runs in the sandbox, so the worker's CPU and the parent's overlap;
    then both results. Nothing is graded before both succeeded; an error
    of ``load`` comes first, as when they ran one after the other."""
    outcome: dict[str, Any] = {}

    def canary() -> None:
        try:
            outcome["layers"] = preflight(sandbox)
        except BaseException as exc:   # noqa: B902 - re-raised below
            outcome["error"] = exc

    thread = threading.Thread(target=canary, name="canary", daemon=True)
    thread.start()
    try:
        loaded = load()
    finally:
        thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return loaded, outcome["layers"]


# --------------------------------------------------------------------------
# One submission

@dataclass(frozen=True)
class Entry:
    """One submission of a batch: its name, what was handed in, and (code
    already in memory) its source, graded as the file ``path``.
    ``timeout`` overrides every probe's time limit."""

    name: str
    path: Path
    source: str | None = None
    timeout: float | None = None

    def resolve(self, workdir: Path) -> Submission:
        """The submission's code (zips extracted under ``workdir``)."""
        if self.source is not None:
            return Submission(self.name, self.path, str(self.path),
                              self.source)
        return resolve(self.path, workdir, self.name)


def failed(name: str, filename: str, config: GradingConfig | None, *,
           error: str = "", internal_error: str = "") -> GradeResult:
    """A zero grade for a submission that could not be graded at all, out
    of the config's rubric (``config`` None: the grader could not read
    it, and the result is out of the default rubric's maximum)."""
    rubric = config.rubric if config is not None else load_rubric()
    return failed_grade(name, filename, rubric, error=error,
                        internal_error=internal_error)


def grade_submission(sub: Submission, config: GradingConfig,
                     runner: Runner, *, public_only: bool = False,
                     timeout: float | None = None) -> GradeResult:
    """Grade a resolved submission; never raises."""
    if sub.error or sub.source is None:
        return failed(sub.name, sub.filename or str(sub.path), config,
                      error=sub.error or "no source to grade")
    try:
        return grade_source(sub.source, sub.filename, config, runner,
                            name=sub.name, public_only=public_only,
                            timeout=timeout)
    except Exception:   # noqa: BLE001 - a RubricError here is a grader bug
        return failed(sub.name, sub.filename, config,
                      internal_error=traceback.format_exc())


def check_file(path: Path, sandbox: Any, *, rubric: Path | None = None,
               values: Path | None = None,
               timeout: float | None = None) -> GradeResult:
    """``check``'s preview: the file graded on the public cases, after the
    canary (one that passed in this environment before counts). Where the
    jail cannot run, in a plain child process
    (autograder/sandbox/plain.py: the student's own code, a preview)."""
    from autograder.sandbox import plain
    workdir = Path(tempfile.mkdtemp(prefix="autograder-"))
    try:
        config = read_config(rubric, values, ("public",))
        with plain.for_check(sandbox) as used:
            sub = resolve(path, workdir)
            sub.filename = str(path)
            grade = grade_submission(sub, config,
                                     budgeted_runner(used, config),
                                     public_only=True, timeout=timeout)
            if grade.internal_error:   # prove the environment next time
                from autograder.sandbox.preflight import forget_preflight
                forget_preflight(used)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return grade


def budgeted_runner(sandbox: Any, config: GradingConfig) -> Runner:
    """A Runner on ``sandbox`` (None: the module's default one) with the
    rubric's time budget for all the probes of one submission."""
    return sandbox_runner(sandbox,
                          total_seconds=config.rubric.submission_timeout)


def read_answers(grade: GradeResult,
                 sub: Submission) -> dict[str, str] | None:
    """Put the notebook's inline answers (Q1-Q5, graded by hand) into the
    student's feedback and return them for the TAs' pages. A missing or
    broken notebook is reported there and costs no points."""
    from autograder.submission import answers
    if not sub.notebooks:
        grade.answers = answers.answers_markdown(
            None, error="no notebook (.ipynb) in the submission")
        return None
    try:
        found = answers.collect_answers(sub.notebooks[0])
    except Exception as exc:   # noqa: BLE001 - answers never cost points
        grade.answers = answers.answers_markdown(None, error=str(exc))
        return None
    grade.answers = answers.answers_markdown(found)
    return found


def write_outputs(grade: GradeResult, folder: Path) -> None:
    """The submission's results.json (Gradescope format) and
    feedback.md; a minimal valid results.json if they cannot be made."""
    folder.mkdir(parents=True, exist_ok=True)
    try:
        report.write_results(grade, folder / "results.json")
        (folder / "feedback.md").write_text(report.feedback_markdown(grade))
    except Exception:   # noqa: BLE001 - fall back to a minimal valid file
        fallback = GradeResult(grade.name, grade.filename,
                               max_score=grade.max_score,
                               max_bonus=grade.max_bonus,
                               internal_error=traceback.format_exc())
        report.write_results(fallback, folder / "results.json")


def _keep_for_staff(sub: Submission, found: dict[str, str] | None,
                    folder: Path) -> None:
    """Keep the graded source and the inline answers beside the results,
    for the staff tools that read a graded folder (similarity)."""
    try:
        if sub.source is not None:
            (folder / "source.py").write_text(sub.source)
        if found is not None:
            report.write_json(found, folder / "answers.json")
    except OSError:
        pass   # a convenience for staff tools: never fails the batch


# --------------------------------------------------------------------------
# Many submissions

class Progress:
    """A one-line progress bar on stderr, only when it is a terminal."""

    def __init__(self, total: int, stream: Any = None):
        self.total, self.done = total, 0
        self.stream = stream or sys.stderr
        self.enabled = total > 1 and self.stream.isatty()
        self.lock = threading.Lock()

    def step(self, label: str) -> None:
        """Count one finished submission."""
        with self.lock:
            self.done += 1
            if not self.enabled:
                return
            width = 30
            filled = width * self.done // self.total
            bar = "#" * filled + "-" * (width - filled)
            self.stream.write(f"\r[{bar}] {self.done}/{self.total} "
                              f"{label[:30]:<30}")
            if self.done == self.total:
                self.stream.write("\n")
            self.stream.flush()


@dataclass
class Graded:
    """What a batch produced: the grades in the entries' order and the
    inline answers found, by submission name."""

    grades: list[GradeResult]
    answers: dict[str, dict[str, str]]


def grade_all(entries: Sequence[Entry], config: GradingConfig,
              runner: Runner, *, jobs: int = 1, public_only: bool = False,
              out: Path | None = None, canary: Any = None,
              layers: list[str] | None = None,
              progress: Callable[[str], None] | None = None) -> Graded:
    """Grade every entry once, ``jobs`` at a time, through ``runner``.

    With ``out``, each submission's inline answers are read and its
    results.json, feedback.md, source.py and answers.json written to
    ``layout.submission_dir(out, name)``. With ``canary`` (the sandbox),
    a zero or an internal error is kept only once the canary passes
    again: if it fails, ConfigError stops the batch. ``layers`` (the
    jail's, from the canary) are recorded in each grade; ``progress`` is
    called with each finished submission's name."""
    step = progress or (lambda name: None)
    broken = threading.Event()
    found_answers: dict[str, dict[str, str]] = {}
    workdir = Path(tempfile.mkdtemp(prefix="autograder-"))

    def grade_one(entry: Entry) -> GradeResult:
        sub = entry.resolve(workdir)
        if broken.is_set():
            raise ConfigError("stopped: the grader's environment failed "
                              "during the batch")
        grade = grade_submission(sub, config, runner,
                                 public_only=public_only,
                                 timeout=entry.timeout)
        if layers is not None:
            grade.jail = layers
        if canary is not None and (grade.internal_error or (
                grade.score == 0 and not grade.error)):
            # A zero may be the environment breaking mid-batch (a deleted
            # venv...): prove the canary still passes before keeping it.
            try:
                preflight(canary, quiet=True)
            except ConfigError as exc:
                broken.set()
                raise ConfigError(f"{exc}\n(found after grading "
                                  f"{entry.name}: it and the rest got no "
                                  f"score, and grades.csv was not "
                                  f"written)") from None
        if out is not None:
            found = read_answers(grade, sub)
            if found is not None:
                found_answers[entry.name] = found
            folder = layout.submission_dir(out, entry.name)
            write_outputs(grade, folder)
            _keep_for_staff(sub, found, folder)
        step(entry.name)
        return grade

    def work(entry: Entry) -> GradeResult:
        try:
            return grade_one(entry)
        except ConfigError:
            raise
        except Exception:   # noqa: BLE001 - one submission, not the batch
            grade = failed(entry.name, str(entry.path), config,
                           internal_error=traceback.format_exc())
            if out is not None:
                try:
                    write_outputs(grade,
                                  layout.submission_dir(out, entry.name))
                except OSError:
                    pass   # its row in grades.csv still says what happened
            step(entry.name)
            return grade

    try:
        with ThreadPoolExecutor(max(1, jobs)) as pool:
            grades = list(pool.map(work, entries))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return Graded(grades, found_answers)
