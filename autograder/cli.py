"""Command line of the grader: ``python -m autograder grade|check|gradescope``.

Parsing and delegating only: grading is autograder/batch.py's, the graded
folder (``grade``, ``report``, ``similarity``) autograder/graded_folder.py's,
the Gradescope entry autograder/gradescope/entry.py's.

Exit status: 0 whenever grading ran (whatever the scores); 2 for usage or
configuration errors (a path that does not exist, missing test values, an
invalid rubric, a machine where the canary submission fails: see
autograder/sandbox/preflight.py) and for an output folder that cannot be
written (a file, read-only, full: autograder/report/outdir.py, atomic.py);
3 for a ``grade`` batch in which the grader's own environment failed some
submissions (autograder/graded_folder.py). No score is written unless the
canary passed.
"""
from __future__ import annotations

import argparse
import os
import sys
import textwrap
from pathlib import Path
from typing import Any

from autograder import batch, graded_folder, homework
from autograder.batch import ConfigError
from autograder.report import results as report
from autograder.files.atomic import OutputError
from autograder.rubric import RubricError, load_rubric
from autograder.submission.locate import UsageError
from autograder.files.user_files import read_regular_text

USAGE_ERROR = 2
ROOT_ENV = "AUTOGRADER_ROOT"
DEFAULT_ROOT = "/autograder"

DESCRIPTION = """\
Autograder of {title} ({tasks}).

  grade       grade submissions (staff): results.json + feedback.md each,
              grades.csv and a summary table
  check       preview of your grade on the public test cases (students)
  report      OUT/report.html: the class report of a graded folder
  similarity  rank pairs of a graded folder's submissions by similarity
  term        apply the course folder (scores, adjustments, deadlines) to
              a graded folder again, without grading
  gradescope  grade $AUTOGRADER_ROOT/submission into
              $AUTOGRADER_ROOT/results/results.json (Gradescope's harness)

{points} points{bonus}; points, tolerances and test cases per item are in
{rubric}.
Exit status: 0 when grading ran (whatever the scores), 2 for a usage or
configuration error (bad path, missing test values, invalid rubric, an
output folder that cannot be written, or a grader environment that fails
its canary: then no score is written), 3 when `grade` could not grade some
submissions because its own environment failed (their scores are left
blank; the others are graded).
"""

# --help when no homework's profile can be read (an installed kit run
# outside a homework's folder): the commands need one to say their points.
NO_PROFILE_HELP = """\
usage: homework-grader [--homework DIR] COMMAND ...
       (in a checkout: python -m autograder COMMAND ...)

The grader of a homework: grade, check, report, similarity, term and
gradescope. Each reads the homework's profile (homework.toml), which
could not be read here:
  {error}

Name the homework's folder to see its commands and points:
  homework-grader --homework DIR --help
  {env}=DIR homework-grader --help
"""

GRADE_HELP = """\
Grade each PATH as one submission. A PATH is a .py file, a directory (that
holds exactly one {module}; {package}/ is preferred), or a
.zip of either. To grade every entry of a folder of submissions pass
FOLDER/* (or `make grade SUBMISSIONS=FOLDER`).

Writes OUT/grades.csv (submission, score, max_score, one column per task,
path) and, per submission, OUT/submissions/<name>/results.json (Gradescope
format) and feedback.md. A submission whose code cannot be found (no
{module} in its folder or zip, an unsafe zip) gets 0 with the
reason; it does not stop the batch. Submission names come from the file,
folder or zip name, made safe (repeats get -2, -3, ...); the path column
holds the PATH each was graded from, as given.

Gradescope's "Export Submissions" archive (the zip, or its folder with
submission_metadata.yml) is accepted as it comes: each submission_<id>
folder is graded, grades.csv gains the submission id, names, emails and
SIDs, and OUT/gradescope_scores.csv, canvas_grades.csv and
moodle_grades.csv are ready to upload to Gradescope, Canvas or Moodle.

The course folder (--course, default course/ beside homework.toml)
holds what staff decide: policy.toml (due date, grace, late penalty,
extensions), scores.csv (question scores), adjustments.csv and
submitted.csv (a local folder's submission times). They are checked
whole before grading and applied after it: grades.csv gains the
submission time, lateness, question points, adjustments and the total.
"""


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


def _check_sandbox():
    """``check``'s sandbox: the jailed one where this machine has what the
    jail needs, else a plain child process (the student's own code on
    their own machine: autograder/sandbox/plain.py)."""
    global _early_sandbox
    from autograder.sandbox import plain
    missing = plain.jail_missing()
    if not missing:
        return _sandbox_context()
    if _early_sandbox is not None:
        _early_sandbox.close()
        _early_sandbox = None
    return plain.PlainSandbox(missing)


# --------------------------------------------------------------------------
# Commands

def cmd_grade(args: argparse.Namespace) -> int:
    """Grade every PATH into --out (the homework read once, by main)."""
    return graded_folder.grade_paths(
        [Path(p) for p in args.paths], _sandbox_context, out=Path(args.out),
        rubric=args.rubric, values=args.values, jobs=args.jobs,
        timeout=args.timeout, public_only=args.public_only,
        compare=args.compare, course=args.course,
        report_options=_report_options(args), hw=args.homework,
        new_values=args.new_values)


def cmd_check(args: argparse.Namespace) -> int:
    """Preview on the public cases, printed for the student."""
    hw = args.homework
    path = Path(args.file or hw.module_file)
    if not path.is_file():
        from autograder.sandbox.plain import this_python
        name = hw.module_name
        raise ConfigError(f"{path}: no such file (run from the homework "
                          f"folder, or give the file: `make check "
                          f"FILE=path/to/{name}`, or `{this_python()} -m "
                          f"autograder check path/to/{name}`)")
    # An import the grader's environment lacks: refused before any score
    # (the grader would give 0; a score here would be a plausible wrong one).
    from autograder.submission import imports
    if path.suffix == ".py":
        try:
            refusal = imports.refusal(path.read_text(),
                                      imports.load_allowed(hw.imports))
        except (OSError, UnicodeDecodeError):
            refusal = ""   # the grade below says why it is unreadable
        if refusal:
            print(f"NOT checked: {refusal}", file=sys.stderr)
            return 1
    with _check_sandbox() as sandbox:
        grade = batch.check_file(path, sandbox, rubric=args.rubric,
                                 values=args.values, timeout=args.timeout,
                                 hw=hw)
    if grade.internal_error:
        # The preview failed in the grader's own code: a student's words
        # (the staff's apology promises a regrade that a preview has not).
        from autograder.sandbox.plain import check_failed
        raise ConfigError(check_failed(grade.internal_error))
    print(report.check_text(grade))
    # Code this Python accepts and the grader's older one would not.
    from autograder.submission import python_version
    try:
        if path.suffix == ".py":
            for line in python_version.check_warnings(
                    read_regular_text(path, follow_links=True),
                    path=hw.python_features):
                print(line)
    except (OSError, UnicodeDecodeError):
        pass   # the grade above already said why the file is unreadable
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    """(Re)write OUT/report.html from a graded folder."""
    print(graded_folder.rewrite_report(Path(args.out),
                                       _report_options(args)))
    return 0


def cmd_term(args: argparse.Namespace) -> int:
    """Apply the course folder to a graded folder again."""
    for line in graded_folder.apply_course(Path(args.out), args.course):
        print(line)
    return 0


def cmd_similarity(args: argparse.Namespace) -> int:
    """Print the similarity ranking of a graded folder."""
    print(graded_folder.similarity_summary(Path(args.out),
                                           tuple(args.archive)))
    return 0


def _report_options(args: argparse.Namespace) -> Any:
    """The class report's options (earlier editions, the anonymised
    view), or None where none was asked (or no staff tools ship)."""
    if not (args.archive or args.anonymise):
        return None
    from autograder.staff.class_report import ReportOptions
    return ReportOptions(tuple(args.archive), args.anonymise,
                         args.pseudonym_key)


def cmd_gradescope(args: argparse.Namespace) -> int:
    """Gradescope entry point (autograder/gradescope/entry.py)."""
    try:
        from autograder.gradescope import entry
    except ModuleNotFoundError:   # the student release leaves it out
        raise ConfigError("this copy of the grader has no Gradescope entry: "
                          "it runs in the Gradescope image built by `make "
                          "autograder`") from None
    root = Path(args.root or os.environ.get(ROOT_ENV, DEFAULT_ROOT))
    return entry.run(root, _sandbox_context, rubric=args.rubric,
                     values=args.values)


# --------------------------------------------------------------------------
# Parser

def _shown(path: Path) -> str:
    """``path`` as the user can open it: relative to the current folder
    where it is inside it (the homework in use may be another's)."""
    try:
        return Path(path).resolve().relative_to(Path.cwd()).as_posix()
    except (ValueError, OSError):   # outside it, or no current folder
        return str(path)


def _description(hw: homework.Homework) -> str:
    """The CLI's description, with the homework's rubric's tasks and
    points (they are the rubric's facts, not the code's)."""
    try:
        rubric = load_rubric(hw=hw)
    except (OSError, RubricError) as exc:   # help must still print
        return DESCRIPTION.format(tasks="rubric unreadable", points="?",
                                  bonus=f" ({exc})", title=hw.title,
                                  rubric=_shown(hw.rubric))
    tasks = ", ".join(t.title.split(": ", 1)[-1] for t in rubric.tasks)
    bonus = f" (+{rubric.max_bonus:g} bonus)" if rubric.max_bonus else ""
    points = f"{rubric.max_score:g}"
    try:   # the questions the staff score (help prints without them)
        from autograder.term.course import question_points
        asked = sum(question_points(hw.questions).values()) \
            if hw.questions else 0
    except ValueError:   # StaffFileError: shown by the commands using it
        asked = 0
    if asked:   # "22 points (+1 bonus): 16 autograded and 6 for ..."
        points = f"{rubric.max_score + asked:g}"
        bonus += (f": {rubric.max_score:g} autograded and {asked:g} for "
                  f"the notebook's questions, scored by the staff")
    text = DESCRIPTION.format(tasks=tasks, points=points,
                              bonus=bonus, title=hw.title,
                              rubric=_shown(hw.rubric))
    first, rest = text.split("\n", 1)
    return textwrap.fill(first, 76) + "\n" + rest


def _common(sub: argparse.ArgumentParser, hw: homework.Homework) -> None:
    """The options every grading command takes: the rubric, the values."""
    sub.add_argument("--rubric", type=Path, default=None,
                     help=f"rubric file (default {hw.rubric.name} "
                          f"next to the grader)")
    sub.add_argument("--values", type=Path, default=None,
                     help="folder of the frozen test values (default "
                          "$AUTOGRADER_VALUES or test_values/)")


def _staff_file(check: str):
    """An argparse type: a path the staff tool's ``check`` accepts (known
    a folder or a regular file before anything opens it), or a usage
    error naming it."""
    def parse(text: str) -> Path:
        try:
            tool = graded_folder.staff_tool(check.split(".")[0])
            getattr(tool, check.split(".")[1])(Path(text))
        except (ConfigError, ValueError) as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        return Path(text)
    return parse


def _report_flags(sub: argparse.ArgumentParser, view: bool = True) -> None:
    """``--archive`` (similarity with earlier editions) and, with
    ``view``, the anonymised view's flags."""
    sub.add_argument("--archive", action="append", default=[],
                     metavar="OLD_OUT",
                     type=_staff_file("similarity.archive_kind"),
                     help="an earlier edition's graded folder (or a .zip "
                          "of one): its submissions are compared with "
                          "these for similarity, not regraded "
                          "(repeatable)")
    if not view:
        return
    sub.add_argument("--anonymise", action="store_true",
                     help="also write OUT/anonymised/: the class report, "
                          "feedback and answer pages under stable "
                          "pseudonyms, no name, email or SID")
    sub.add_argument("--pseudonym-key", type=_staff_file(
        "anonymise.check_key"), default=None, metavar="FILE",
        help="the staff-only key of the pseudonyms, kept and extended "
             "(default OUT/pseudonyms.csv; one file for the term keeps "
             "each student's pseudonym across assignments)")


def _add_grade(commands: argparse._SubParsersAction,
               hw: homework.Homework) -> None:
    grade = commands.add_parser(
        "grade", help="grade submissions (staff)",
        description=GRADE_HELP.format(module=hw.module_name,
                                      package=hw.package),
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
    grade.add_argument("--course", type=Path, default=None, metavar="DIR",
                       help="the course folder: policy.toml, scores.csv, "
                            "adjustments.csv, submitted.csv (default: "
                            "course/ beside homework.toml)")
    grade.add_argument("--public-only", action="store_true",
                       help="grade on the public cases only (no hidden "
                            "values available)")
    grade.add_argument("--new-values", action="store_true",
                       help="regrade an OUT graded with other test values "
                            "(another edition's) with these: its grades "
                            "are replaced (refused without this flag)")
    _report_flags(grade)
    _common(grade, hw)
    grade.set_defaults(run=cmd_grade)


def _add_check(commands: argparse._SubParsersAction,
               hw: homework.Homework) -> None:
    check = commands.add_parser(
        "check", help="preview your grade on the public cases (students)",
        description="Run the grader's checks on the PUBLIC test cases and "
                    "print what passes, what fails and why, with the "
                    "PEP 8 and shape-comment deductions. Hidden cases are "
                    "graded when you submit.")
    check.add_argument("file", nargs="?", metavar="FILE",
                       help=f"your module (default: {hw.module_file})")
    check.add_argument("--timeout", type=float, default=None, metavar="S",
                       help=argparse.SUPPRESS)
    _common(check, hw)
    check.set_defaults(run=cmd_check)


def _add_folder_commands(commands: argparse._SubParsersAction,
                         hw: homework.Homework) -> None:
    """``report`` and ``similarity``: they read a graded folder."""
    report_cmd = commands.add_parser(
        "report", help="write OUT/report.html, the class report (staff)",
        description="Read a graded folder (grades.csv and each "
                    "results.json; nothing is re-graded) and write "
                    "OUT/report.html: score distribution, pass rates, "
                    "named mistakes, deductions, limits and grader "
                    "failures, links to feedback and answer pages, a "
                    "sortable table. `grade` writes it too.")
    report_cmd.add_argument("out", metavar="OUT", help="a graded folder")
    _report_flags(report_cmd)
    report_cmd.set_defaults(run=cmd_report)

    similar = commands.add_parser(
        "similarity", help="rank pairs of submissions by similarity (staff)",
        description="Pairwise similarity of a graded folder's code, as the "
                    "grader reads it (the TODO regions, code above their "
                    "markers, helpers; skeleton lines, comments, names and "
                    "whitespace normalised away) and inline answers, "
                    "ranked against the batch's own distribution; "
                    "identical or near-identical pairs are flagged "
                    "whatever it is. Writes side-by-side pages to "
                    "OUT/similarity/. A lead for a human, not a verdict.")
    similar.add_argument("out", metavar="OUT", help="a graded folder")
    _report_flags(similar, view=False)
    similar.set_defaults(run=cmd_similarity)

    term = commands.add_parser(
        "term", help="apply the course folder to a graded folder (staff)",
        description="Read the course folder (policy.toml, scores.csv, "
                    "adjustments.csv, submitted.csv; checked whole) and "
                    "apply it to a graded folder without grading: "
                    "grades.csv's term columns, each final.md and, for a "
                    "Gradescope export, the upload files. `grade` does "
                    "this too.")
    term.add_argument("out", metavar="OUT", help="a graded folder")
    term.add_argument("--course", type=Path, default=None, metavar="DIR",
                      help="the course folder (default: course/ beside "
                           "homework.toml)")
    term.set_defaults(run=cmd_term)


def _add_gradescope(commands: argparse._SubParsersAction,
                    hw: homework.Homework) -> None:
    gradescope = commands.add_parser(
        "gradescope", help="grade on Gradescope (used by run_autograder)",
        description=f"Grade ${ROOT_ENV}/submission (default {DEFAULT_ROOT})"
                    f" and write ${ROOT_ENV}/results/results.json. Always "
                    f"writes a valid results.json.")
    gradescope.add_argument("--root", default=None,
                            help=f"instead of ${ROOT_ENV}")
    _common(gradescope, hw)
    gradescope.set_defaults(run=cmd_gradescope)


def build_parser(hw: homework.Homework | None = None
                 ) -> argparse.ArgumentParser:
    """The argparse parser of ``python -m autograder`` for the homework
    ``hw`` (default: the one in use, read here once and handed to each
    command as ``args.homework``): one function adds each command, in the
    order ``--help`` lists them."""
    hw = hw or homework.current()
    parser = argparse.ArgumentParser(
        prog="python -m autograder", description=_description(hw),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.set_defaults(homework=hw)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True
    for add in (_add_grade, _add_check, _add_folder_commands,
                _add_gradescope):
        add(commands, hw)
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
    try:
        hw = homework.current()
    except homework.HomeworkError as exc:
        if not argv or argv[0] in ("-h", "--help"):   # help needs no profile
            print(NO_PROFILE_HELP.format(error=exc, env=homework.ENV))
            return 0 if argv else USAGE_ERROR
        print(f"error: {exc}", file=sys.stderr)
        return USAGE_ERROR
    args = build_parser(hw).parse_args(argv)
    try:
        return args.run(args)
    except (ConfigError, UsageError, OutputError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return USAGE_ERROR
    except OSError as exc:   # the machine's (a disk, a folder): no traceback
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"error: {where}{exc.strerror or exc} (the grader's machine, "
              f"not a submission: fix it and run the command again)",
              file=sys.stderr)
        return USAGE_ERROR
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
