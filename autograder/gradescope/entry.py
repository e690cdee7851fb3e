"""``python -m autograder gradescope``: grade ``$AUTOGRADER_ROOT/submission``
into ``$AUTOGRADER_ROOT/results/results.json``, Gradescope's contract.

A valid results.json is always written: a grader that cannot grade (its
rubric, values or canary failing, or its hidden values missing: a score on
the public cases alone would be a plausible wrong one) writes an apology
with no score rather than a student's zero, and ``run_autograder`` has a
shell fallback for a grader that cannot even start.
"""
from __future__ import annotations

import sys
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from autograder import batch
from autograder.grade import GradeResult
from autograder.report import results as report
from autograder.submission.locate import Submission, resolve


def grade_gradescope(submission_dir: Path, results_path: Path, *,
                     rubric_path: Path | None = None,
                     values: Path | None = None,
                     sandbox: Any = None) -> dict[str, Any]:
    """Grade whatever is under ``submission_dir`` (a folder with
    modeling_attention.py, or a zip of it) into ``results_path``. Always
    writes a valid results.json, even if the grader itself fails."""
    grade: GradeResult | None = None
    config = policy = None
    try:
        config, layers = batch.beside_canary(
            sandbox if sandbox is not None else _default_sandbox(),
            lambda: read_full_config(rubric_path, values))
        policy = course_policy(config.profile)
        with tempfile.TemporaryDirectory(prefix="autograder-") as tmp:
            sub = resolve(Path(submission_dir), Path(tmp), "submission",
                          hw=config.profile)
            if sub.error:
                sub = _nested_zip(Path(submission_dir), Path(tmp),
                                  config.profile) or sub
            grade = batch.grade_submission(
                sub, config, batch.budgeted_runner(sandbox, config))
            grade.jail = layers
            batch.read_answers(grade, sub, config.profile)
    except batch.ConfigError as exc:
        # Not the student's fault: Gradescope shows the apology, not a 0.
        print(f"error: {exc}", file=sys.stderr)
        grade = _failure(submission_dir, config, str(exc))
    except Exception:   # noqa: BLE001 - results.json must be written
        grade = _failure(submission_dir, config, traceback.format_exc())
    try:
        if grade is not None:
            data = report.results_json(grade)
            if grade.tasks and not (grade.error or grade.internal_error):
                from autograder.term import results_policy
                data = results_policy.adjust(
                    data, Path(submission_dir).parent /
                    results_policy.METADATA, policy,
                    config.rubric.max_score, config.rubric.bonus_policy)
            report.write_json(data, Path(results_path))
            return data
    except Exception:   # noqa: BLE001 - last resort: a minimal valid file
        traceback.print_exc()
    data = {"score": 0.0, "output": report.APOLOGY, "output_format": "md",
            "tests": [], "extra_data": {"internal_error": True}}
    report.write_json(data, Path(results_path))
    return data


def course_policy(hw: Any = None) -> Any:
    """The course's late policy as the zip ships it (course/policy.toml
    beside the profile, autograder/term/policy.py), or None. One the
    grader cannot read is its own failure: ConfigError, no score."""
    from autograder import homework
    from autograder.term.course import COURSE_FOLDER
    from autograder.term.files import StaffFileError
    from autograder.term.policy import POLICY_FILE, load_policy
    try:
        return load_policy((hw or homework.current()).root / COURSE_FOLDER
                           / POLICY_FILE)
    except StaffFileError as exc:
        raise batch.ConfigError(str(exc)) from None


def read_full_config(rubric_path: Path | None,
                     values: Path | None) -> Any:
    """The command's config with the hidden cases, or ConfigError: on
    Gradescope a missing hidden file is a broken image, never a reason to
    grade on the public cases alone."""
    config = batch.read_config(rubric_path, values, ("public", "hidden"))
    if not any(case.set == "hidden" for case in config.cases):
        raise batch.ConfigError(
            "the grader could not find its hidden test values "
            "(test_values/hidden.safetensors in the autograder's source): "
            "no score was written; rebuild the autograder with `make "
            "autograder` and upload dist/autograder.zip again")
    return config


def _failure(submission_dir: Path, config: Any,
             reason: str) -> GradeResult | None:
    """The grader's failure as a result out of the rubric, or None where
    not even a rubric can be read (a broken rubric.toml): the caller then
    writes the minimal apology."""
    try:
        return batch.failed("submission", str(submission_dir), config,
                            internal_error=reason)
    except Exception:   # noqa: BLE001 - no rubric to score against
        traceback.print_exc()
        return None


def _default_sandbox() -> Any:
    from autograder.sandbox.pool import default_sandbox
    return default_sandbox()


def _nested_zip(folder: Path, workdir: Path,
                hw: Any = None) -> Submission | None:
    """Students sometimes upload submission.zip inside a folder."""
    if not folder.is_dir():
        return None
    for archive in sorted(folder.rglob("*.zip")):
        sub = resolve(archive, workdir, "submission", hw=hw)
        if not sub.error:
            return sub
    return None


def run(root: Path, sandbox_factory: Callable[[], Any], *,
        rubric: Path | None = None, values: Path | None = None) -> int:
    """Grade ``root``/submission into ``root``/results/results.json in the
    sandbox ``sandbox_factory()`` gives (or, if it cannot start, the
    module's default one); print the score. Returns the exit status."""
    results = root / "results" / "results.json"
    if not (root / "submission").exists():   # a local try, set up wrong
        print(f"autograder: no {root / 'submission'}: put the submission "
              f"there (Gradescope does; locally, AUTOGRADER_ROOT or --root "
              f"names the folder holding submission/ and results/)",
              file=sys.stderr)
    try:
        sandbox = sandbox_factory()
    except Exception:   # noqa: BLE001 - grade anyway, on the default one
        sandbox = None
    try:
        data = grade_gradescope(root / "submission", results,
                                rubric_path=rubric, values=values,
                                sandbox=sandbox)
    finally:
        if sandbox is not None:
            sandbox.close()
    print(f"score {data['score']}: wrote {results}")
    return 0
