"""The batch engine: many submissions graded once each, in parallel.

Every command that grades goes through here: ``grade`` (a folder of
submissions: autograder/graded_folder.py), ``check`` and ``gradescope``
(one submission, :func:`grade_submission`), and the kit's own batches
(``kit/corpus/grading_batch.py``, ``make bench``). One submission never
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autograder import homework
from autograder.config import GradingConfig, MistakesError, load_config
from autograder.grade import (GradeResult, Runner, failed_grade,
                              grade_source, sandbox_runner)
from autograder.files import atomic
from autograder.report import batch_state, layout, \
    results as report
from autograder.files.atomic import OutputError
from autograder.rubric import RubricError, load_rubric
from autograder.sandbox.protocol import MEMORY
from autograder.submission.locate import Submission, resolve, shown_name
from autograder.values import ValuesError


class ConfigError(Exception):
    """Usage or configuration problem: exit status 2."""


def read_config(rubric: Path | None, values: Path | None,
                sets: tuple[str, ...],
                hw: homework.Homework | None = None,
                probe_timeout: float | None = None) -> GradingConfig:
    """The command's :class:`GradingConfig` for the homework ``hw``
    (default: the one in use; ``probe_timeout``: its ``--timeout``), or
    ConfigError saying what is wrong with the rubric or the test values."""
    try:
        config = load_config(rubric, values, sets=sets, hw=hw,
                             probe_timeout=probe_timeout)
    except (RubricError, ValuesError, MistakesError) as exc:
        raise ConfigError(str(exc)) from None
    if not config.cases:
        raise ConfigError("no test cases found: run `make test-values`")
    return config


# --------------------------------------------------------------------------
# The canary

def preflight(sandbox: Any, *, quiet: bool = False,
              remember: bool = False, memory: bool = True) -> list[str]:
    """The canary through the real sandbox, or ConfigError: no score is
    written on a machine where a correct submission would not pass.
    ``remember`` (``check`` only, a preview): a canary that passed in this
    environment before counts (autograder/sandbox/preflight.py).
    ``memory``: first, refuse a machine whose memory cannot hold the
    grader and one worker (autograder/sandbox/memlimit.py; mid-batch the
    canary alone judges, beside workers that hold memory)."""
    from autograder.sandbox.jail import LAYERS
    from autograder.sandbox.memlimit import MemoryShortage, check_room
    from autograder.sandbox.preflight import (PreflightError,
                                              remembered_preflight,
                                              run_preflight)
    if memory:
        try:
            check_room()
        except MemoryShortage as exc:
            raise ConfigError(str(exc)) from None
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
    ``timeout`` overrides every probe's time limit for it alone (the kit's
    hostile code: ``GradingConfig.with_time_limit``)."""

    name: str
    path: Path
    source: str | None = None
    timeout: float | None = None

    def resolve(self, workdir: Path,
                hw: homework.Homework | None = None) -> Submission:
        """The submission's code (zips extracted under ``workdir``; ``hw``
        the homework whose module it holds)."""
        if self.source is not None:
            return Submission(self.name, self.path, str(self.path),
                              self.source)
        return resolve(self.path, workdir, self.name, hw=hw)


def failed(name: str, filename: str, config: GradingConfig | None, *,
           error: str = "", internal_error: str = "") -> GradeResult:
    """A zero grade for a submission that could not be graded at all, out
    of the config's rubric (``config`` None: the grader could not read
    it, and the result is out of the default rubric's maximum)."""
    rubric = config.rubric if config is not None else load_rubric()
    return failed_grade(name, filename, rubric, error=error,
                        internal_error=internal_error)


def grade_submission(sub: Submission, config: GradingConfig,
                     runner: Runner, *, public_only: bool = False
                     ) -> GradeResult:
    """Grade a resolved submission; never raises."""
    if sub.internal_error:   # the grader's machine failed reading it
        return failed(sub.name, sub.filename or shown_name(sub.path.name),
                      config, internal_error=sub.internal_error)
    if sub.error or sub.source is None:
        # the name handed in, never the grader's own (temporary) path
        return failed(sub.name, sub.filename or shown_name(sub.path.name),
                      config, error=sub.error or "no source to grade")
    try:
        return grade_source(sub.source, sub.filename, config, runner,
                            name=sub.name, public_only=public_only)
    except Exception:   # noqa: BLE001 - a RubricError here is a grader bug
        return failed(sub.name, sub.filename, config,
                      internal_error=traceback.format_exc())


def check_file(path: Path, sandbox: Any, *, rubric: Path | None = None,
               values: Path | None = None,
               timeout: float | None = None,
               hw: homework.Homework | None = None) -> GradeResult:
    """``check``'s preview: the file graded on the public cases, after the
    canary (one that passed in this environment before counts). Where the
    jail cannot run, in a plain child process
    (autograder/sandbox/plain.py: the student's own code, a preview)."""
    from autograder.sandbox import plain
    workdir = grader_tempdir()
    try:
        config = read_config(rubric, values, ("public",), hw,
                             probe_timeout=timeout)
        with plain.for_check(sandbox) as used:
            sub = resolve(path, workdir, hw=config.profile)
            sub.filename = str(path)
            grade = grade_submission(sub, config,
                                     budgeted_runner(used, config),
                                     public_only=True)
            if grade.internal_error:   # prove the environment next time
                from autograder.sandbox.preflight import forget_preflight
                forget_preflight(used)
    except plain.PlainUnavailable as exc:
        raise ConfigError(str(exc)) from None
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return grade


def grader_tempdir() -> Path:
    """A fresh folder for the grader's own scratch files (extracted
    zips), or ConfigError naming the temporary folder and the cause."""
    try:
        return Path(tempfile.mkdtemp(prefix="autograder-"))
    except OSError as exc:
        raise ConfigError(f"the grader could not create its temporary "
                          f"folder in {tempfile.gettempdir()}: "
                          f"{exc.strerror or exc}; no score was written "
                          f"(free space there, or set TMPDIR to a "
                          f"writable folder)") from None


def budgeted_runner(sandbox: Any, config: GradingConfig) -> Runner:
    """A Runner on ``sandbox`` (None: the module's default one) with the
    rubric's time budget for all the probes of one submission."""
    return sandbox_runner(sandbox,
                          total_seconds=config.rubric.submission_timeout)


def read_answers(grade: GradeResult, sub: Submission,
                 hw: homework.Homework | None = None
                 ) -> dict[str, str] | None:
    """Put the notebook's inline answers (the questions of the homework
    ``hw``, graded by hand) into the student's feedback and return them
    for the TAs' pages. A missing or broken notebook is reported there
    and costs no points."""
    from autograder.submission import answers
    if not sub.notebooks:
        grade.answers = answers.answers_markdown(
            None, error="no notebook (.ipynb) in the submission")
        return None
    try:
        asked = answers.questions(hw)
        found = answers.collect_answers(sub.notebooks[0], asked)
    except Exception as exc:   # noqa: BLE001 - answers never cost points
        grade.answers = answers.answers_markdown(None, error=str(exc))
        return None
    grade.answers = answers.answers_markdown(found, asked=asked)
    return found


def write_outputs(grade: GradeResult, folder: Path) -> list[str]:
    """The submission's results.json (Gradescope format) and feedback.md,
    each whole or absent (autograder/files/atomic.py); a minimal valid
    results.json if they cannot be made. Returns the files written; an
    OS error writing them is an OutputError (the batch stops)."""
    try:
        data = report.results_json(grade)
        feedback = report.feedback_markdown(grade)
    except Exception:   # noqa: BLE001 - fall back to a minimal valid file
        fallback = GradeResult(grade.name, grade.filename,
                               max_score=grade.max_score,
                               max_bonus=grade.max_bonus,
                               internal_error=traceback.format_exc())
        report.write_results(fallback, folder / "results.json")
        _remove(folder / "feedback.md")   # not an earlier grade's
        return ["results.json"]
    report.write_json(data, folder / "results.json")
    atomic.write_text(folder / "feedback.md", feedback)
    return ["results.json", "feedback.md"]


def _keep_for_staff(sub: Submission, found: dict[str, str] | None,
                    folder: Path) -> list[str]:
    """Keep the graded source and the inline answers beside the results,
    for the staff tools that read a graded folder (similarity); returns
    the files written. An OS error is an OutputError: the disk that
    cannot hold these cannot hold the next results either."""
    written = []
    if sub.source is not None:
        atomic.write_text(folder / "source.py", sub.source)
        written.append("source.py")
    if found is not None:
        report.write_json(found, folder / "answers.json")
        written.append("answers.json")
    else:   # not one left by an earlier grading of another input
        _remove(folder / "answers.json")
    return written


def _remove(path: Path) -> None:
    try:
        path.unlink(missing_ok=True)
    except OSError as exc:
        raise OutputError(path, exc) from None


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
    """What a batch produced: the grades of the submissions graded in this
    run, in the entries' order; every entry's grades.csv row
    (``report.grade_row``), kept ones included; the inline answers
    found, by submission name; and how many entries were kept from an
    earlier run (``resume``)."""

    grades: list[GradeResult]
    answers: dict[str, dict[str, str]]
    rows: list[dict[str, Any]] = field(default_factory=list)
    kept: int = 0


def grade_all(entries: Sequence[Entry], config: GradingConfig,
              runner: Runner, *, jobs: int = 1, public_only: bool = False,
              out: Path | None = None, canary: Any = None,
              layers: list[str] | None = None,
              progress: Callable[[str], None] | None = None,
              resume: batch_state.BatchState | None = None) -> Graded:
    """Grade every entry once, ``jobs`` at a time, through ``runner``.

    With ``out``, each submission's inline answers are read and its
    results.json, feedback.md, source.py and answers.json written to
    ``layout.submission_dir(out, name)``, each whole or absent; an OS
    error writing them stops the batch (ConfigError naming the path and
    the cause). With ``resume`` (the batch's state in ``out``), an entry
    whose input, grader and outputs are unchanged since an earlier run is
    kept, not graded again, and each graded one is stamped after its
    files. With ``canary`` (the sandbox), a zero or an internal error is
    kept only once the canary passes again: if it fails, ConfigError
    stops the batch. ``layers`` (the jail's, from the canary) are
    recorded in each grade; ``progress`` is called with each finished
    submission's name."""
    run = _BatchRun(config, runner, public_only=public_only, out=out,
                    canary=canary, layers=layers,
                    step=progress or (lambda name: None), resume=resume)
    try:
        with ThreadPoolExecutor(max(1, jobs)) as pool:
            done = list(pool.map(run.work, entries))
    finally:
        shutil.rmtree(run.workdir, ignore_errors=True)
    if run.fatal:
        raise run.fatal[0]
    grades = [g for g in done if isinstance(g, GradeResult)]
    return Graded(grades, run.found_answers,
                  [report.grade_row(g) for g in done if g is not None],
                  kept=sum(isinstance(g, dict) for g in done))


class _BatchRun:
    """One :func:`grade_all` run: what its worker threads share (the
    first error that stopped it, the answers found, the temporary
    folder) and the steps of grading one entry."""

    def __init__(self, config: GradingConfig, runner: Runner, *,
                 public_only: bool, out: Path | None, canary: Any,
                 layers: list[str] | None, step: Callable[[str], None],
                 resume: batch_state.BatchState | None) -> None:
        self.config, self.runner = config, runner
        self.public_only, self.out, self.canary = public_only, out, canary
        self.layers, self.step, self.resume = layers, step, resume
        self.broken = threading.Event()
        self.fatal: list[ConfigError] = []   # the first error that stopped
        self.fatal_lock = threading.Lock()
        self.found_answers: dict[str, dict[str, str]] = {}
        self.workdir = grader_tempdir()

    def stop(self, exc: ConfigError) -> None:
        with self.fatal_lock:
            if not self.fatal:
                self.fatal.append(exc)
        self.broken.set()

    def save(self, entry: Entry, sub: Submission, grade: GradeResult,
             digest: str | None) -> None:
        assert self.out is not None
        # A submission whose notebook is missing or unreadable is on the
        # TAs' answer pages too, with no answer: else its questions stay
        # pending and nobody is shown whom to score.
        found = read_answers(grade, sub, self.config.profile)
        if found is None:
            found = {}
        self.found_answers[entry.name] = found
        folder = layout.submission_dir(self.out, entry.name)
        if self.resume is not None:   # stale until the new files are whole
            _remove(folder / batch_state.STAMP)
        files = write_outputs(grade, folder)
        files += _keep_for_staff(sub, found, folder)
        if self.resume is not None and not grade.internal_error:
            self.resume.stamp(folder, digest, report.grade_row(grade), files)

    def kept(self, entry: Entry) -> tuple[str | None, dict[str, Any] | None]:
        """The entry's input digest (with ``resume``), and its row when an
        earlier run's outputs are kept."""
        if self.resume is None or self.out is None:
            return None, None
        digest = batch_state.input_digest(entry.path, entry.source)
        kept = self.resume.kept(layout.submission_dir(self.out, entry.name),
                                digest)
        if kept is None:
            return digest, None
        if kept.answers is not None:
            self.found_answers[entry.name] = kept.answers
        return digest, kept.row

    def prove_environment(self, entry: Entry, grade: GradeResult) -> None:
        """A zero may be the environment breaking mid-batch (a deleted
        venv...), a memory verdict the machine running out: prove the
        canary still passes before keeping it."""
        if self.canary is None or not (
                grade.internal_error or grade.limits.get(MEMORY) or (
                    grade.score == 0 and not grade.error)):
            return
        try:
            preflight(self.canary, quiet=True, memory=False)
        except ConfigError as exc:
            raise ConfigError(f"{exc}\n(found after grading "
                              f"{entry.name}: it and the rest got no "
                              f"score, and grades.csv was not "
                              f"written)") from None

    def grade_one(self, entry: Entry) -> GradeResult | dict[str, Any]:
        digest, row = self.kept(entry)
        if row is not None:
            self.step(entry.name)
            return row
        sub = entry.resolve(self.workdir, self.config.profile)
        grade = grade_submission(sub,
                                 self.config.with_time_limit(entry.timeout),
                                 self.runner, public_only=self.public_only)
        if self.layers is not None:
            grade.jail = self.layers
        self.prove_environment(entry, grade)
        if self.out is not None:
            self.save(entry, sub, grade, digest)
        self.step(entry.name)
        return grade

    def work(self, entry: Entry) -> GradeResult | dict[str, Any] | None:
        if self.broken.is_set():
            return None
        try:
            return self.grade_one(entry)
        except ConfigError as exc:
            self.stop(exc)
            return None
        except OutputError as exc:
            self.stop(_output_stopped(exc, self.out))
            return None
        except Exception:   # noqa: BLE001 - one submission, not the batch
            return self.grader_failed(entry)

    def grader_failed(self, entry: Entry) -> GradeResult | None:
        """The grader's own failure on one submission: an internal error
        for it, the batch goes on."""
        grade = failed(entry.name, str(entry.path), self.config,
                       internal_error=traceback.format_exc())
        if self.out is not None:
            try:
                write_outputs(grade,
                              layout.submission_dir(self.out, entry.name))
            except OutputError as exc:
                self.stop(_output_stopped(exc, self.out))
                return None
        self.step(entry.name)
        return grade


def _output_stopped(exc: OutputError, out: Path | None) -> ConfigError:
    """The batch's stop on a file of OUT it could not write."""
    again = (f"; rerun the same command to resume into {out}"
             if out is not None else "")
    return ConfigError(f"{exc} (the grader's machine, not a submission: "
                       f"the batch stopped and grades.csv was not written;"
                       f" free space or fix the folder's permissions{again})")
