"""Command line of the grader: ``python -m autograder grade|check|gradescope``.

Exit status: 0 whenever grading ran (whatever the scores); 2 for usage or
configuration errors (a path that does not exist, missing test values, an
invalid rubric, a machine where the canary submission fails: see
autograder/sandbox/preflight.py). No score is written unless the canary passed.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import threading
import textwrap
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from autograder.report import layout, results as report
from autograder.config import (GradingConfig, load_config,
                               load_mistake_messages)
from autograder.grade import (GradeResult, Runner, failed_grade,
                              grade_source, sandbox_runner)
from autograder.rubric import DEFAULT_RUBRIC, Rubric, RubricError, load_rubric
from autograder.submission.locate import (Submission, UsageError, check_path,
                                          resolve, submission_name,
                                          unique_names)
from autograder.values import ValuesError, values_dir

USAGE_ERROR = 2
ROOT_ENV = "AUTOGRADER_ROOT"
DEFAULT_ROOT = "/autograder"
DEFAULT_CHECK_FILE = Path("transformer_lm") / "modeling_attention.py"

DESCRIPTION = """\
Autograder of the attention homework ({tasks}).

  grade       grade submissions (staff): results.json + feedback.md each,
              grades.csv and a summary table
  check       preview of your grade on the public test cases (students)
  report      OUT/report.html: the class report of a graded folder
  similarity  rank pairs of a graded folder's submissions by similarity
  gradescope  grade $AUTOGRADER_ROOT/submission into
              $AUTOGRADER_ROOT/results/results.json (Gradescope's harness)

{points} points{bonus}; points, tolerances and test cases per item are in
autograder/rubric.toml.
Exit status: 0 when grading ran (whatever the scores), 2 for a usage or
configuration error (bad path, missing test values, invalid rubric, or a
grader environment that fails its canary: then no score is written).
"""

GRADE_HELP = """\
Grade each PATH as one submission. A PATH is a .py file, a directory (that
holds exactly one modeling_attention.py; transformer_lm/ is preferred), or a
.zip of either. To grade every entry of a folder of submissions pass
FOLDER/* (or `make grade SUBMISSIONS=FOLDER`).

Writes OUT/grades.csv (submission, score, max_score, one column per task)
and, per submission, OUT/submissions/<name>/results.json (Gradescope
format) and feedback.md. A submission whose code cannot be found (no
modeling_attention.py in its folder or zip, an unsafe zip) gets 0 with the
reason; it does not stop the batch. Submission names come from the file,
folder or zip name (repeats get -2, -3, ...).

Gradescope's "Export Submissions" archive (the zip, or its folder with
submission_metadata.yml) is accepted as it comes: each submission_<id>
folder is graded, grades.csv gains the submission id, names, emails and
SIDs, and OUT/gradescope_scores.csv (Name, SID, Email, Score) is ready to
upload back to Gradescope or an LMS gradebook.
"""


# --------------------------------------------------------------------------
# Shared helpers

class ConfigError(Exception):
    """Usage or configuration problem: exit status 2."""


def _load_config(rubric_path: Path | None, values: Path | None,
                 sets: tuple[str, ...]) -> GradingConfig:
    try:
        config = load_config(rubric_path, values, sets=sets)
    except (RubricError, ValuesError) as exc:
        raise ConfigError(str(exc)) from None
    if not config.cases:
        raise ConfigError("no test cases found: run `make test-values`")
    return config


def _grade_one(sub: Submission, config: GradingConfig, runner: Runner,
               *, public_only: bool = False,
               timeout: float | None = None) -> GradeResult:
    """Grade a resolved submission; never raises."""
    if sub.error or sub.source is None:
        return failed_grade(sub.name, sub.filename or str(sub.path),
                            config.rubric,
                            error=sub.error or "no source to grade")
    try:
        return grade_source(sub.source, sub.filename, config, runner,
                            name=sub.name, public_only=public_only,
                            timeout=timeout)
    except Exception:   # noqa: BLE001 - a RubricError here is a grader bug
        return failed_grade(sub.name, sub.filename, config.rubric,
                            internal_error=traceback.format_exc())


def _write_outputs(grade: GradeResult, folder: Path) -> None:
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


_early_sandbox: Any = None   # started by main() before the handoff is read


def _sandbox_context():
    """The command's warm Sandbox (closed afterwards). Its fork server is
    forked from this process, sharing torch's memory (what keeps grading
    within Gradescope's 768 MB), so commands create it first: before any
    test value is loaded and before any torch operation runs here. Under
    ``python -m autograder`` main() has already started it, before this
    process held the real arguments and environment
    (autograder/sandbox/cleanenv.py).
    """
    global _early_sandbox
    if _early_sandbox is not None:
        sandbox, _early_sandbox = _early_sandbox, None
        return sandbox
    from autograder.sandbox.pool import Sandbox
    return Sandbox(fork_server_from_here=True)


def _read_answers(grade: GradeResult,
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


def _write_question_pages(by_submission: dict[str, dict[str, str]],
                          out: Path) -> str:
    """One page per question with every student's answer, for TAs."""
    if not by_submission:
        return ""
    from autograder.submission import answers
    try:
        answers.write_question_pages(out, dict(sorted(by_submission.items())))
    except OSError as exc:
        return f"inline answers: could not write the pages ({exc})"
    return f"inline answers: {out / 'answers'}/Q*.md"


# --------------------------------------------------------------------------
# Commands

def _preflight(sandbox: Any, *, quiet: bool = False,
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


def _beside_canary(sandbox: Any, load: Any) -> tuple[Any, list[str]]:
    """``load()`` (reading the rubric and the values) while the canary
    runs in the sandbox, so the worker's CPU and the parent's overlap;
    then both results. Nothing is graded before both succeeded; an error
    of ``load`` comes first, as when they ran one after the other."""
    outcome: dict[str, Any] = {}

    def canary() -> None:
        try:
            outcome["layers"] = _preflight(sandbox)
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


def _warn_if_values_exposed(values: Path | None) -> None:
    # As root the worker drops to an unprivileged user, which protects only
    # files that user cannot read: say so when the hidden values are open.
    from autograder.sandbox.pool import exposed_to_others
    hidden = Path(values or values_dir()) / "hidden.safetensors"
    if os.geteuid() == 0 and exposed_to_others(hidden):
        print(f"warning: {hidden} is readable by every user, including the "
              f"worker user student code runs as; lock it with "
              f"`chmod -R go-rwx {hidden.parent}` (the Gradescope setup "
              f"does this)", file=sys.stderr)


def cmd_grade(args: argparse.Namespace) -> int:
    """Grade every PATH into --out."""
    paths = [Path(p) for p in args.paths
             if not Path(p).name.startswith(".")]
    for path in paths:
        check_path(path)
    if not paths:
        raise ConfigError("no submission to grade")
    if args.compare is not None:
        _check_compare(Path(args.compare), Path(args.out))
    export_dir = Path(tempfile.mkdtemp(prefix="autograder-export-"))
    try:
        export = _open_export(paths, export_dir)
        if export is not None:
            paths = export.paths
        with _sandbox_context() as sandbox:
            return _grade_paths(args, paths, sandbox, export)
    finally:
        shutil.rmtree(export_dir, ignore_errors=True)


def _open_export(paths: list[Path], workdir: Path) -> Any:
    """Gradescope's "Export Submissions" archive among the paths, opened
    (its submission folders to grade and their submitters), or None."""
    try:
        from autograder.staff import gradescope_export as gse
    except ImportError:   # a release without the staff tools
        return None
    found = gse.find_export(paths)
    if found is None:
        return None
    try:
        export = gse.open_export(found, workdir)
    except gse.ExportError as exc:
        raise ConfigError(str(exc)) from None
    if not export.paths:
        left_out = "".join(f"\n  left out: {name} ({why})"
                           for name, why in export.skipped[:10])
        raise ConfigError(f"{found}: the export lists no submission "
                          f"folder{left_out}")
    return export


def _grade_paths(args: argparse.Namespace, paths: list[Path],
                 sandbox: Any, export: Any = None) -> int:
    sets = ("public",) if args.public_only else ("public", "hidden")
    config = _load_config(args.rubric, args.values, sets)
    rubric = config.rubric
    if not args.public_only and not any(c.set == "hidden"
                                        for c in config.cases):
        raise ConfigError("test_values/hidden.safetensors is missing: the "
                          "hidden cases cannot be graded (pass "
                          "--public-only to grade on the public cases)")
    layers = _preflight(sandbox)
    if "mount-namespace" not in layers and "landlock" not in layers:
        _warn_if_values_exposed(args.values)
    # --jobs workers at once share the container's memory (memlimit).
    sandbox.jobs = max(1, args.jobs)
    out = Path(args.out)
    (out / layout.SUBMISSIONS).mkdir(parents=True, exist_ok=True)
    names = unique_names([submission_name(p) for p in paths])
    if export is not None:
        export.folders = {n: p.name for n, p in zip(names, paths)}
    task_ids = [t.id for t in rubric.tasks]
    progress = Progress(len(paths))
    workdir = Path(tempfile.mkdtemp(prefix="autograder-"))
    answers_by_name: dict[str, dict[str, str]] = {}
    runner = sandbox_runner(sandbox, total_seconds=rubric.submission_timeout)
    broken = threading.Event()

    def work(pair: tuple[Path, str]) -> GradeResult:
        try:
            return grade_one(pair)
        except ConfigError:
            raise
        except Exception:   # noqa: BLE001 - one submission, not the batch
            path, name = pair
            grade = failed_grade(name, str(path), rubric,
                                 internal_error=traceback.format_exc())
            try:
                _write_outputs(grade, layout.submission_dir(out, name))
            except OSError:
                pass   # its row in grades.csv still says what happened
            progress.step(name)
            return grade

    def grade_one(pair: tuple[Path, str]) -> GradeResult:
        path, name = pair
        sub = resolve(path, workdir, name)
        if broken.is_set():
            raise ConfigError("stopped: the grader's environment failed "
                              "during the batch")
        grade = _grade_one(sub, config, runner,
                           public_only=args.public_only, timeout=args.timeout)
        grade.jail = layers
        if grade.internal_error or (grade.score == 0 and not grade.error):
            # A zero may be the environment breaking mid-batch (a deleted
            # venv...): prove the canary still passes before keeping it.
            try:
                _preflight(sandbox, quiet=True)
            except ConfigError as exc:
                broken.set()
                raise ConfigError(f"{exc}\n(found after grading {name}: "
                                  f"it and the rest got no score, and "
                                  f"grades.csv was not written)") from None
        found = _read_answers(grade, sub)
        if found is not None:
            answers_by_name[name] = found
        folder = layout.submission_dir(out, name)
        _write_outputs(grade, folder)
        _keep_for_staff(sub, found, folder)
        progress.step(name)
        return grade

    try:
        with ThreadPoolExecutor(max(1, args.jobs)) as pool:
            grades = list(pool.map(work, zip(paths, names)))
        report.write_grades_csv(grades, task_ids, out / "grades.csv")
        note = _write_question_pages(answers_by_name, out)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(report.summary_table(grades, task_ids))
    print(f"\n{len(grades)} graded into {out}/ (grades.csv, "
          f"{layout.SUBMISSIONS}/<submission>/results.json and "
          f"feedback.md)")
    if note:
        print(note)
    for line in _staff_outputs(out, args.compare, export):
        print(line)
    return 0


def _staff_outputs(out: Path, compare: Path | None,
                   export: Any = None) -> list[str]:
    """Names from a Gradescope export, the class report and, with
    --compare, the regrade diff; written after the grades, never at their
    expense."""
    lines = []
    if export is not None:
        from autograder.staff import gradescope_export
        lines.append(gradescope_export.annotate(out, export))
    lines.append(_class_report(out))
    if compare is not None:
        try:
            from autograder.staff import regrade
            lines.append(regrade.write_comparison(compare, out))
        except Exception as exc:   # noqa: BLE001 - grades are already safe
            lines.append(f"comparison: not written ({type(exc).__name__}: "
                         f"{exc})")
    return [line for line in lines if line]


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


def _class_report(out: Path) -> str:
    """Write OUT/report.html (the staff's view of the batch); a failure
    there is reported and never costs the grades already written."""
    try:
        from autograder.staff import class_report
    except ImportError:   # a release without the staff tools
        return ""
    try:
        return (f"class report: "
                f"{class_report.write_report(out, load_mistake_messages())}")
    except Exception as exc:   # noqa: BLE001 - grades are already safe
        why = f"{type(exc).__name__}: {str(exc)[:300]}"
        try:   # a page that says what failed, where the report would be
            from autograder.report.mdsafe import html_text
            (out / class_report.REPORT_NAME).write_text(
                f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>"
                f"Class report</title></head><body><h1>Class report not "
                f"written</h1><p>{html_text(why)}</p><p>grades.csv and "
                f"each submission's results are complete; "
                f"<code>python -m autograder report {html_text(out)}"
                f"</code> tries again.</p></body></html>\n")
        except OSError:
            pass
        return f"class report: not written ({why})"


def _check_compare(previous: Path, out: Path) -> None:
    if not (previous / "grades.csv").is_file():
        raise ConfigError(f"--compare {previous}: no grades.csv there (a "
                          f"folder written by an earlier grade run)")
    if previous.resolve() == out.resolve():
        raise ConfigError(f"--compare {previous} is the output folder: "
                          f"grade into a new folder (--out) so the "
                          f"previous grades stay to compare with")


def cmd_report(args: argparse.Namespace) -> int:
    """(Re)write OUT/report.html from a graded folder."""
    out = Path(args.out)
    if not (out / "grades.csv").is_file() and \
            not layout.submission_dirs(out, "results.json"):
        raise ConfigError(f"{out}: no grades.csv or results.json (grade "
                          f"into it first: python -m autograder grade "
                          f"--out {out} PATH...)")
    class_report = _staff_tool("class_report")
    messages = load_mistake_messages()
    print(f"class report: {class_report.write_report(out, messages)}")
    return 0


def _staff_tool(name: str) -> Any:
    """A module of autograder/staff/, or a usage error where
    this copy of the grader does not ship it (Gradescope, the release)."""
    import importlib
    try:
        return importlib.import_module(f"autograder.staff.{name}")
    except ModuleNotFoundError:
        raise ConfigError(f"this copy of the grader has no staff tools "
                          f"({name}): run it from the kit") from None


def cmd_similarity(args: argparse.Namespace) -> int:
    """Print the similarity ranking of a graded folder."""
    out = Path(args.out)
    if not layout.submission_dirs(out, "source.py"):
        raise ConfigError(f"{out}: no source.py kept (grade into it first: "
                          f"python -m autograder grade --out {out} PATH...)")
    print(_staff_tool("similarity").summary(out))
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    """Preview on the public cases, printed for the student."""
    path = Path(args.file or DEFAULT_CHECK_FILE)
    if not path.is_file():
        raise ConfigError(f"{path}: no such file (run from the homework "
                          f"folder, or give the file: `python -m autograder"
                          f" check path/to/modeling_attention.py`)")
    workdir = Path(tempfile.mkdtemp(prefix="autograder-"))
    try:
        with _sandbox_context() as sandbox:
            config = _load_config(args.rubric, args.values, ("public",))
            _preflight(sandbox, quiet=True, remember=True)
            sub = resolve(path, workdir)
            sub.filename = str(path)
            grade = _grade_one(sub, config, sandbox_runner(
                sandbox, total_seconds=config.rubric.submission_timeout),
                public_only=True, timeout=args.timeout)
            if grade.internal_error:   # prove the environment next time
                from autograder.sandbox.preflight import forget_preflight
                forget_preflight(sandbox)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(report.check_text(grade))
    return 0


def grade_gradescope(submission_dir: Path, results_path: Path, *,
                     rubric_path: Path | None = None,
                     values: Path | None = None,
                     sandbox: Any = None) -> dict[str, Any]:
    """Grade whatever is under ``submission_dir`` (a folder with
    modeling_attention.py, or a zip of it) into ``results_path``. Always
    writes a valid results.json, even if the grader itself fails."""
    grade: GradeResult | None = None
    config: GradingConfig | None = None
    try:
        config, layers = _beside_canary(
            sandbox if sandbox is not None else _default_sandbox(),
            lambda: _load_config(rubric_path, values, ("public", "hidden")))
        with tempfile.TemporaryDirectory(prefix="autograder-") as tmp:
            sub = resolve(Path(submission_dir), Path(tmp), "submission")
            if sub.error:
                sub = _nested_zip(Path(submission_dir), Path(tmp)) or sub
            grade = _grade_one(sub, config, sandbox_runner(
                sandbox, total_seconds=config.rubric.submission_timeout))
            grade.jail = layers
            _read_answers(grade, sub)
    except ConfigError as exc:
        # Not the student's fault: Gradescope shows the apology, not a 0.
        print(f"error: {exc}", file=sys.stderr)
        grade = failed_grade("submission", str(submission_dir),
                             _fallback_rubric(config),
                             internal_error=str(exc))
    except Exception:   # noqa: BLE001 - results.json must be written
        grade = failed_grade("submission", str(submission_dir),
                             _fallback_rubric(config),
                             internal_error=traceback.format_exc())
    try:
        return report.write_results(grade, Path(results_path))
    except Exception:   # noqa: BLE001 - last resort: a minimal valid file
        data = {"score": 0.0, "output": report.APOLOGY,
                "output_format": "md", "tests": []}
        report.write_json(data, Path(results_path))
        return data


def _fallback_rubric(config: GradingConfig | None) -> Rubric:
    """The rubric an ungraded result is out of: the config's, or, when
    the config could not be read, the default rubric's."""
    return config.rubric if config is not None else load_rubric()


def _default_sandbox() -> Any:
    from autograder.sandbox.pool import default_sandbox
    return default_sandbox()


def _nested_zip(folder: Path, workdir: Path) -> Submission | None:
    """Students sometimes upload submission.zip inside a folder."""
    if not folder.is_dir():
        return None
    for archive in sorted(folder.rglob("*.zip")):
        sub = resolve(archive, workdir, "submission")
        if not sub.error:
            return sub
    return None


def cmd_gradescope(args: argparse.Namespace) -> int:
    """Gradescope entry point."""
    root = Path(args.root or os.environ.get(ROOT_ENV, DEFAULT_ROOT))
    results = root / "results" / "results.json"
    try:
        sandbox = _sandbox_context()
    except Exception:   # noqa: BLE001 - grade anyway, on the default one
        sandbox = None
    try:
        data = grade_gradescope(root / "submission", results,
                                rubric_path=args.rubric, values=args.values,
                                sandbox=sandbox)
    finally:
        if sandbox is not None:
            sandbox.close()
    print(f"score {data['score']}: wrote {results}")
    return 0


# --------------------------------------------------------------------------
# Parser

def _description() -> str:
    """The CLI's description, with the default rubric's tasks and points
    (they are the rubric's facts, not the code's)."""
    try:
        rubric = load_rubric()
    except (OSError, RubricError) as exc:   # help must still print
        return DESCRIPTION.format(tasks="rubric unreadable", points="?",
                                  bonus=f" ({exc})")
    tasks = ", ".join(t.title.split(": ", 1)[-1] for t in rubric.tasks)
    bonus = f" (+{rubric.max_bonus:g} bonus)" if rubric.max_bonus else ""
    text = DESCRIPTION.format(tasks=tasks, points=f"{rubric.max_score:g}",
                              bonus=bonus)
    first, rest = text.split("\n", 1)
    return textwrap.fill(first, 76) + "\n" + rest


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of ``python -m autograder``."""
    parser = argparse.ArgumentParser(
        prog="python -m autograder", description=_description(),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True

    def common(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("--rubric", type=Path, default=None,
                         help=f"rubric file (default {DEFAULT_RUBRIC.name} "
                              f"next to the grader)")
        sub.add_argument("--values", type=Path, default=None,
                         help="folder of the frozen test values (default "
                              "$AUTOGRADER_VALUES or test_values/)")

    grade = commands.add_parser(
        "grade", help="grade submissions (staff)", description=GRADE_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    grade.add_argument("paths", nargs="+", metavar="PATH",
                       help=".py file, folder or .zip of one submission")
    grade.add_argument("--out", default="grades", metavar="DIR",
                       help="output folder (default: grades)")
    grade.add_argument("--jobs", type=int, default=min(4, os.cpu_count()
                                                       or 1), metavar="N",
                       help="submissions graded in parallel (default: "
                            "%(default)s)")
    grade.add_argument("--timeout", type=float, default=None, metavar="S",
                       help="override every probe's time limit (seconds)")
    grade.add_argument("--compare", type=Path, default=None,
                       metavar="PREVIOUS_OUT",
                       help="after grading, write OUT/regrade.md: per "
                            "submission, which items changed since "
                            "PREVIOUS_OUT and why")
    grade.add_argument("--public-only", action="store_true",
                       help="grade on the public cases only (no hidden "
                            "values available)")
    common(grade)
    grade.set_defaults(run=cmd_grade)

    check = commands.add_parser(
        "check", help="preview your grade on the public cases (students)",
        description="Run the grader's checks on the PUBLIC test cases and "
                    "print what passes, what fails and why, with the "
                    "PEP 8 and shape-comment deductions. Hidden cases are "
                    "graded when you submit.")
    check.add_argument("file", nargs="?", metavar="FILE",
                       help=f"your module (default: {DEFAULT_CHECK_FILE})")
    check.add_argument("--timeout", type=float, default=None, metavar="S",
                       help=argparse.SUPPRESS)
    common(check)
    check.set_defaults(run=cmd_check)

    report_cmd = commands.add_parser(
        "report", help="write OUT/report.html, the class report (staff)",
        description="Read a graded folder (grades.csv and each "
                    "results.json; nothing is re-graded) and write "
                    "OUT/report.html: score distribution, pass rates, "
                    "named mistakes, deductions, limits and grader "
                    "failures, links to feedback and answer pages, a "
                    "sortable table. `grade` writes it too.")
    report_cmd.add_argument("out", metavar="OUT", help="a graded folder")
    report_cmd.set_defaults(run=cmd_report)

    similar = commands.add_parser(
        "similarity", help="rank pairs of submissions by similarity (staff)",
        description="Pairwise similarity of a graded folder's TODO regions "
                    "(skeleton lines, comments, names and whitespace "
                    "normalised away) and inline answers, ranked against "
                    "the batch's own distribution; writes side-by-side "
                    "pages to OUT/similarity/. A lead for a human, not a "
                    "verdict.")
    similar.add_argument("out", metavar="OUT", help="a graded folder")
    similar.set_defaults(run=cmd_similarity)

    gradescope = commands.add_parser(
        "gradescope", help="grade on Gradescope (used by run_autograder)",
        description=f"Grade ${ROOT_ENV}/submission (default {DEFAULT_ROOT})"
                    f" and write ${ROOT_ENV}/results/results.json. Always "
                    f"writes a valid results.json.")
    gradescope.add_argument("--root", default=None,
                            help=f"instead of ${ROOT_ENV}")
    common(gradescope)
    gradescope.set_defaults(run=cmd_gradescope)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status. Run as a program
    (``argv`` None) it first re-executes itself with a clean environment
    (autograder/sandbox/cleanenv.py), then starts the fork server, then
    reads its real arguments."""
    global _early_sandbox
    from autograder.sandbox import cleanenv
    if argv is None and not cleanenv.pending():
        cleanenv.reexec_clean(sys.argv[1:])   # returns only if impossible
    # The parent only compares small tensors; one thread keeps it (and the
    # fork server forked from it) free of OpenMP thread pools.
    import torch
    torch.set_num_threads(1)
    if argv is None and cleanenv.pending():
        from autograder.sandbox.pool import Sandbox
        _early_sandbox = Sandbox(fork_server_from_here=True)
        argv = cleanenv.take_handoff()
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except (ConfigError, UsageError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return USAGE_ERROR
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
