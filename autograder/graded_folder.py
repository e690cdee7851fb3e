"""The graded folder: ``grade --out OUT`` and the staff commands that
read OUT again (``report``, ``similarity``).

:func:`grade_paths` grades every path (a Gradescope export among them is
opened) through the batch engine (autograder/batch.py) into OUT: each
submission's folder (autograder/report/layout.py), grades.csv, one page
per inline question, then the staff's outputs (the class report, names
from the export, ``--compare``'s regrade diff), which are written after
the grades and never at their expense. The staff tools live in
autograder/staff/, which only the kit ships: elsewhere their commands are
a usage error and ``grade`` writes the grades alone.
"""
from __future__ import annotations

import importlib
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from autograder import homework
from autograder.batch import (ConfigError, Entry, Progress, budgeted_runner,
                              grade_all, preflight, read_config)
from autograder.config import GradingConfig, load_mistake_messages
from autograder.files import atomic
from autograder.report import batch_state, layout, outdir, \
    results as report
from autograder.files.atomic import OutputError
from autograder.submission.locate import check_path, submission_names
from autograder.values import values_dir


def grade_paths(paths: list[Path], sandbox_factory: Callable[[], Any], *,
                out: Path, rubric: Path | None = None,
                values: Path | None = None, jobs: int = 1,
                timeout: float | None = None, public_only: bool = False,
                compare: Path | None = None, course: Path | None = None,
                report_options: Any = None,
                hw: homework.Homework | None = None,
                new_values: bool = False) -> int:
    """Grade every path (a Gradescope export among them is opened) into
    ``out`` in the sandbox ``sandbox_factory()`` gives: the submission
    folders, grades.csv, the answer pages and the staff's outputs, with
    the course folder's decisions (``course``, default course/ beside
    the profile: checked whole before anything is graded); print the
    summary. ``report_options`` (class_report.ReportOptions: earlier
    editions for similarity, the anonymised view) shape the class report;
    ``hw``: the homework graded (default: the one in use); ``new_values``:
    regrade a folder graded with other test values. Returns the exit
    status."""
    paths = [p for p in paths if not p.name.startswith(".")]
    for path in paths:
        check_path(path)
    if not paths:
        raise ConfigError("no submission to grade")
    if compare is not None:
        _check_compare(compare, out)
    export_dir = Path(tempfile.mkdtemp(prefix="autograder-export-"))
    try:
        export = _open_export(paths, export_dir)
        given = [str(p) for p in paths]   # grades.csv's path column
        if export is not None:
            paths, given = export.paths, export.given
        term = _load_term(course, rubric, paths, export)
        digest = batch_state.values_digest(values or values_dir())
        try:   # before the sandbox and its canary: OUT can hold the batch
            outdir.check_out(out, len(paths))
            batch_state.check_values(out, digest, new_values=new_values)
        except (outdir.OutDirError, batch_state.IncompleteError) as exc:
            raise ConfigError(str(exc)) from None
        with sandbox_factory() as sandbox:
            config, failed = _grade_into(
                paths, given, sandbox, export, out=out, rubric=rubric,
                values=values, jobs=jobs, timeout=timeout,
                public_only=public_only, hw=hw,
                values_digest=(digest, new_values))
            try:
                lines = _staff_outputs(out, config.mistakes, compare, export,
                                       term, report_options)
            except OutputError as exc:
                raise ConfigError(
                    f"{exc} (grades.csv and every submission's results "
                    f"are complete; free space, then `python -m autograder"
                    f" report {out}` writes the class report)") from None
            for line in lines:
                print(line)
    finally:
        shutil.rmtree(export_dir, ignore_errors=True)
    return _grader_error_status(failed)


# Exit status of a batch where the grader failed some submissions (its own
# environment: disk, memory, a vanished file): the others are graded.
GRADER_ERROR_EXIT = 3


def _grader_error_status(failed: list[str]) -> int:
    """0, or (saying which and why) GRADER_ERROR_EXIT if the grader failed
    some of the batch."""
    if not failed:
        return 0
    shown = ", ".join(failed[:10]) + (", ..." if len(failed) > 10 else "")
    print(f"autograder: {len(failed)} submission(s) not graded: the "
          f"grader's own environment failed (GRADER ERROR: {shown}); no "
          f"score was written for them (blank in grades.csv, the cause in "
          f"their results.json). Fix the cause, then rerun the same "
          f"command: it keeps the graded ones and grades these.",
          file=sys.stderr)
    return GRADER_ERROR_EXIT


def _grade_into(paths: list[Path], given: list[str], sandbox: Any,
                export: Any, *, out: Path, rubric: Path | None,
                values: Path | None, jobs: int, timeout: float | None,
                public_only: bool, hw: homework.Homework | None = None,
                values_digest: tuple[str | None, bool] = (None, False)
                ) -> tuple[GradingConfig, list[str]]:
    """Grade ``paths`` (``given``: each as the grader named it) into
    ``out`` by the command's config; returns it and the names of the
    submissions the grader failed to grade. ``values_digest``: the test
    values' manifest sha256 the batch records, and whether a folder
    graded with other values may be regraded."""
    config = read_config(rubric, values, ("public",) if public_only
                         else ("public", "hidden"), hw,
                         probe_timeout=timeout)
    if not public_only and not any(c.set == "hidden" for c in config.cases):
        raise ConfigError("test_values/hidden.safetensors is missing: the "
                          "hidden cases cannot be graded (pass "
                          "--public-only to grade on the public cases)")
    layers = preflight(sandbox)
    if "mount-namespace" not in layers and "landlock" not in layers:
        _warn_if_values_exposed(values)
    # --jobs workers at once share the container's memory (memlimit).
    sandbox.jobs = max(1, jobs)
    if min(jobs, len(paths)) > 1:   # side by side: a uid each, proven
        from autograder.sandbox.preflight import prove_spare_uids
        warning = prove_spare_uids(sandbox)
        if warning:
            print(f"warning: {warning}", file=sys.stderr)
    names, renamed = submission_names(paths)
    for line in renamed:
        print(f"warning: {line}", file=sys.stderr)
    if export is not None:
        export.folders = {n: p.name for n, p in zip(names, paths)}
    options = {"public_only": public_only, "timeout": timeout,
               "jail": sorted(layers)}
    try:
        state = batch_state.begin(out, batch_state.grader_fingerprint(
            rubric, values, options), values_digest[0],
            new_values=values_digest[1])
        _make_folder(out / layout.SUBMISSIONS)   # the layout of new grades
        graded = grade_all([Entry(n, p) for n, p in zip(names, paths)],
                           config,
                           budgeted_runner(sandbox, config), jobs=jobs,
                           public_only=public_only, out=out, canary=sandbox,
                           layers=layers, progress=Progress(len(paths)).step,
                           resume=state)
        task_ids = [t.id for t in config.rubric.tasks]
        report.write_grades_csv(graded.rows, task_ids, out / "grades.csv",
                                dict(zip(names, given)))
        _write_question_pages(graded.answers, out)
        from autograder.staff import regrade   # the rubric --compare diffs
        regrade.record_rubric(out, rubric)
        state.write(batch_state.COMPLETE)
    except batch_state.IncompleteError as exc:
        raise ConfigError(str(exc)) from None
    except OutputError as exc:
        raise ConfigError(f"{exc} (the grader's machine, not a submission:"
                          f" free space or fix the folder's permissions, "
                          f"then rerun the same command: it resumes)"
                          ) from None
    if graded.kept:
        print(f"resumed: {graded.kept} of {len(graded.rows)} submissions "
              f"kept from the previous run into {out} (the same input, "
              f"grader and whole outputs), {len(graded.rows) - graded.kept}"
              f" graded\n")
    print(report.summary_table(graded.rows, task_ids))
    done = (f"{len(graded.rows) - graded.kept} graded and {graded.kept} "
            f"kept" if graded.kept else f"{len(graded.rows)} graded")
    print(f"\n{done} into {out}/ (grades.csv, "
          f"{layout.SUBMISSIONS}/<submission>/results.json and "
          f"feedback.md)")
    if graded.answers:
        print(f"inline answers: {out / 'answers'}/Q*.md")
    return config, report.grader_errors(graded.rows)


def _make_folder(folder: Path) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(folder, exc) from None


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


def _require_complete(out: Path, command: str) -> None:
    try:
        batch_state.require_complete(out, command)
    except batch_state.IncompleteError as exc:
        raise ConfigError(str(exc)) from None


def _check_compare(previous: Path, out: Path) -> None:
    _require_complete(previous, f"grade --compare {previous}")
    if not (previous / "grades.csv").is_file():
        raise ConfigError(f"--compare {previous}: no grades.csv there (a "
                          f"folder written by an earlier grade run)")
    if previous.resolve() == out.resolve():
        raise ConfigError(f"--compare {previous} is the output folder: "
                          f"grade into a new folder (--out) so the "
                          f"previous grades stay to compare with")


def _open_export(paths: list[Path], workdir: Path) -> Any:
    """Gradescope's "Export Submissions" archive among the paths, opened
    (its submission folders to grade and their submitters), or None."""
    try:
        from autograder.staff import gradescope_export as gse
    except ImportError:   # a release without the staff tools
        return None
    try:
        found = gse.find_export(paths)
        if found is None:
            for path in gse.lookalikes(paths):
                print(f"note: {path} holds {gse.METADATA} but is graded as "
                      f"one submission: a Gradescope export is read only "
                      f"when named alone", file=sys.stderr)
            return None
        export = gse.open_export(found, workdir)
    except gse.ExportError as exc:
        raise ConfigError(str(exc)) from None
    if not export.paths:
        left_out = "".join(f"\n  left out: {name} ({why})"
                           for name, why in export.skipped[:10])
        raise ConfigError(f"{found}: the export lists no submission "
                          f"folder{left_out}")
    return export


def _load_term(course: Path | None, rubric: Path | None,
               paths: list[Path], export: Any) -> Any:
    """The course folder's decisions, checked whole against the batch
    about to be graded, with the rubric they mark (see ``load_term``)."""
    names, _ = submission_names(paths)
    folders = {n: p.name for n, p in zip(names, paths)} \
        if export is not None else {}
    return load_term(course, rubric, names, export, folders)


def load_term(course: Path | None, rubric: Path | None, names: list[str],
              export: Any, folders: dict[str, str],
              questions: dict[str, float] | None = None) -> Any:
    """(Course, Rubric): the course folder (default course/ beside the
    profile) checked whole against the submissions ``names`` and, for an
    export, their folders and submitters (autograder/term/course.py); a
    usage error naming every problem's file, line and fix."""
    from autograder.rubric import RubricError, load_rubric
    from autograder.term.course import Roster, default_folder, load_course
    from autograder.term.files import StaffFileError
    aliases: dict[str, list[str]] = {}
    missing: list[str] = []
    if export is not None:
        missing = [f for f in export.submitters if f not in
                   set(folders.values())]
        for name, folder in [*folders.items(), *((f, f) for f in missing)]:
            aliases[name] = [folder, folder.removeprefix("submission_"),
                             *(x for p in export.submitters.get(folder, [])
                               for x in (p.sid, p.email))]
    try:
        loaded = load_rubric(rubric)
        return load_course(course or default_folder(), loaded,
                           Roster(names, aliases, missing),
                           questions), loaded
    except (RubricError, StaffFileError) as exc:
        raise ConfigError(str(exc)) from None


def apply_course(out: Path, course: Path | None = None,
                 rubric: Path | None = None,
                 questions: dict[str, float] | None = None) -> list[str]:
    """``term OUT``: apply the course folder to a graded folder again
    (after a TA's edits) without grading: grades.csv's term columns, each
    final.md and the upload files; the lines for the terminal."""
    _require_complete(out, f"python -m autograder term {out}")
    if not (out / "grades.csv").is_file():
        raise ConfigError(f"{out}: no grades.csv (grade into it first: "
                          f"python -m autograder grade --out {out} PATH...)")
    from autograder.text import csvsafe
    names = [r["submission"] for r in
             csvsafe.read_dicts(out / "grades.csv")[1]]
    export = None
    try:
        from autograder.staff import gradescope_export as gse
    except ImportError:   # a copy of the grader without the staff tools
        gse = None
    if gse is not None:
        try:
            export = gse.load_kept(out)
        except gse.ExportError as exc:
            raise ConfigError(str(exc)) from None
    term = load_term(course, rubric, names, export,
                     export.folders if export is not None else {},
                     questions)
    lines: list[str] = []
    finals = _apply_term(out, term, export, lines)
    _write_exports(out, term, export, finals, lines)
    return lines


def _write_exports(out: Path, term: Any, export: Any,
                   finals: dict[str, Any], lines: list[str]) -> None:
    """The upload files of a Gradescope export; without one, none (and
    none left from an export graded into OUT before: a stale upload file
    is a plausible wrong grade)."""
    if export is None:
        _remove_stale_exports(out)
    if export is None or term is None:
        return
    from autograder.staff import lms_exports
    policy = term[0].policy
    lines.append(lms_exports.write_all(
        out, export, term[1].max_score, term[1].bonus_policy,
        homework.current().name, finals,
        policy.canvas_column if policy is not None else ""))


def _remove_stale_exports(out: Path) -> None:
    try:
        from autograder.staff import gradescope_export, lms_exports
    except ImportError:   # this copy never writes them
        return
    for name in (gradescope_export.KEPT, lms_exports.GRADESCOPE_CSV,
                 lms_exports.CANVAS_CSV, lms_exports.MOODLE_CSV):
        try:
            (out / name).unlink(missing_ok=True)
        except OSError as exc:
            raise OutputError(out / name, exc) from None


def _write_question_pages(by_submission: dict[str, dict[str, str]],
                          out: Path) -> None:
    """One page per question with every student's answer, for TAs (an OS
    error is an OutputError: the batch is not complete without them);
    none where no submission answered anything (a batch of code only)."""
    if not any(by_submission.values()):
        return
    from autograder.submission import answers
    answers.write_question_pages(out, dict(sorted(by_submission.items())))


def _staff_outputs(out: Path, messages: dict[str, str],
                   compare: Path | None, export: Any = None,
                   term: Any = None, report_options: Any = None
                   ) -> list[str]:
    """Names from a Gradescope export, the term's totals, the upload
    files, the class report and, with --compare, the regrade diff;
    written after the grades, never at their expense."""
    lines = []
    if export is not None:
        from autograder.staff import gradescope_export
        lines.append(gradescope_export.annotate(out, export))
    finals = _apply_term(out, term, export, lines)
    _write_exports(out, term, export, finals, lines)
    lines.append(write_class_report(out, messages, report_options))
    if compare is not None:
        try:
            from autograder.staff import regrade
            lines.append(regrade.write_comparison(compare, out))
        except OutputError:
            raise   # the machine's failure: the command stops
        except Exception as exc:   # noqa: BLE001 - grades are already safe
            lines.append(f"comparison: not written ({type(exc).__name__}: "
                         f"{exc})")
    return [line for line in lines if line]


def _apply_term(out: Path, term: Any, export: Any,
                lines: list[str]) -> dict[str, Any]:
    """The course's totals into grades.csv and each final.md (none, and
    no stale final.md, where the course decides nothing)."""
    if term is None:
        return {}
    from autograder.term import outputs
    course, rubric = term
    times = {}
    if export is not None:
        times = {name: export.created[folder]
                 for name, folder in export.folders.items()
                 if folder in export.created}
    from autograder.term.files import StaffFileError
    try:
        finals = outputs.apply(out, course, rubric.max_score,
                               rubric.bonus_policy, times)
    except StaffFileError as exc:   # an adjustment past its item's range
        raise ConfigError(str(exc)) from None
    if not course.active:
        return finals
    pending = {name: f.pending for name, f in finals.items()
               if f.total is None}
    lines.append(f"term ({course.folder}): {len(finals) - len(pending)} "
                 f"totals in grades.csv and each {outputs.FINAL_NAME}"
                 + (f", {len(pending)} pending: {_pending_words(pending)}"
                    if pending else ""))
    return finals


def _pending_words(pending: dict[str, list[str]], shown: int = 5) -> str:
    """``frank (Q1, Q2); dave (submission time)``: who waits for what,
    the first ``shown`` (the rest: grades.csv's pending column)."""
    words = "; ".join(f"{name} ({', '.join(what)})"
                      for name, what in list(pending.items())[:shown])
    more = len(pending) - shown
    return words + (f"; {more} more (grades.csv's pending column)"
                    if more > 0 else "")


def write_class_report(out: Path, messages: dict[str, str],
                       options: Any = None) -> str:
    """Write OUT/report.html (the staff's view of the batch, mistakes
    explained by ``messages``, the config's; ``options``: a
    class_report.ReportOptions); a failure there is reported and never
    costs the grades already written."""
    try:
        from autograder.staff import anonymise, class_report
    except ImportError:   # a release without the staff tools
        return ""
    try:
        return anonymise.write_views(out, messages, options)
    except OutputError:
        raise   # the machine's failure: the command stops
    except Exception as exc:   # noqa: BLE001 - grades are already safe
        why = f"{type(exc).__name__}: {str(exc)[:300]}"
        try:   # a page that says what failed, where the report would be
            from autograder.text.mdsafe import html_text
            atomic.write_text(
                out / class_report.REPORT_NAME,
                f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>"
                f"Class report</title></head><body><h1>Class report not "
                f"written</h1><p>{html_text(why)}</p><p>grades.csv and "
                f"each submission's results are complete; "
                f"<code>python -m autograder report {html_text(out)}"
                f"</code> tries again.</p></body></html>\n")
        except OutputError:
            pass   # whatever was there stays whole
        return f"class report: not written ({why})"


def rewrite_report(out: Path, options: Any = None) -> str:
    """``report``: (re)write OUT/report.html from a graded folder (and,
    by ``options``, the anonymised view); the lines saying where."""
    _require_complete(out, f"python -m autograder report {out}")
    if not (out / "grades.csv").is_file() and \
            not layout.submission_dirs(out, "results.json"):
        raise ConfigError(f"{out}: no grades.csv or results.json (grade "
                          f"into it first: python -m autograder grade "
                          f"--out {out} PATH...)")
    anonymise = staff_tool("anonymise")
    messages = load_mistake_messages()
    try:
        return anonymise.write_views(out, messages, options, strict=True)
    except ValueError as exc:   # a staff file (the key, an archive)
        raise ConfigError(str(exc)) from None


def similarity_summary(out: Path, archive: tuple[Path, ...] = ()) -> str:
    """``similarity``: the ranking of a graded folder's pairs (and of
    them against each ``archive``: earlier editions' graded folders)."""
    _require_complete(out, f"python -m autograder similarity {out}")
    if not layout.submission_dirs(out, "source.py"):
        raise ConfigError(f"{out}: no source.py kept (grade into it first: "
                          f"python -m autograder grade --out {out} PATH...)")
    similarity = staff_tool("similarity")
    try:
        return similarity.summary(out, archive=archive)
    except similarity.ArchiveError as exc:
        raise ConfigError(str(exc)) from None


def staff_tool(name: str) -> Any:
    """A module of autograder/staff/, or a usage error where this copy of
    the grader does not ship it (Gradescope, the release)."""
    try:
        return importlib.import_module(f"autograder.staff.{name}")
    except ModuleNotFoundError:
        raise ConfigError(f"this copy of the grader has no staff tools "
                          f"({name}): run it from the kit") from None
