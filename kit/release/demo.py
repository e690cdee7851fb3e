"""``make demo``: the whole staff workflow on the bundled examples.

1. builds the student release (``kit.release.student``: leak scan, self-grade)
   and the Gradescope zip (``kit.release.gradescope``);
2. stages ``build/demo/submissions/``: the examples (typical mistakes,
   ``kit/variants/examples.toml``),
   the reference (copied in now, never committed there), the skeleton, and
   the reference as the release's ``make submission`` would zip it;
3. grades them with ``python -m autograder grade`` into
   ``build/demo/grades/`` (grades.csv, per-submission results.json and
   feedback.md, answers/Q*.md);
4. runs the Gradescope ``run_autograder`` from the zip on the reference, in
   a folder laid out like ``/autograder``;
5. prints a score table with one line of feedback per submission.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from autograder import homework
from autograder.report import layout
from autograder.submission import answers
from kit.release import gradescope, student as release
from kit.corpus.examples import build_examples

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "build" / "demo"


def stage_submissions(student: Path, dest: Path) -> list[Path]:
    """Write the examples, reference, skeleton and a zipped reference
    (built by the release's own make_submission.py) into ``dest``."""
    shutil.rmtree(dest, ignore_errors=True)
    build_examples(dest)
    shutil.copy2(homework.staff().reference, dest / "reference.py")
    module = homework.current().module_file
    shutil.copy2(student / module, dest / "skeleton.py")
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "student"
        shutil.copytree(student, copy)
        shutil.copy2(homework.staff().reference, copy / module)
        subprocess.run([sys.executable, "make_submission.py"], cwd=copy,
                       check=True, capture_output=True, text=True)
        shutil.copy2(copy / "submission.zip", dest / "reference_zip.zip")
    return sorted(dest.iterdir())


def feedback_line(result: dict) -> str:
    """One line: the first lost item's recognised mistake or first failed
    check, else 'all checks pass'."""
    for test in result.get("tests", []):
        if test.get("score", 0) < test.get("max_score", 0):
            lines = str(test.get("output", "")).splitlines()
            # a recognised mistake's explanation beats the raw difference
            failed = [ln for ln in lines if "Common mistake" in ln] or \
                [ln for ln in lines if "✘" in ln] or lines or [""]
            text = " ".join(failed[0].replace("✘", "").split()).lstrip("- ")
            return f"{test.get('number', test['name'])}: {text}"
    if not result.get("tests"):
        return " ".join(str(result.get("output", "")).split())
    return "all checks pass"


def run_gradescope(archive: Path, submission: Path) -> dict:
    """Grade ``submission`` with the zip's run_autograder, as Gradescope
    would (``AUTOGRADER_ROOT`` pointing at a fake /autograder)."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for name in ("source", "submission", "results"):
            (root / name).mkdir()
        with zipfile.ZipFile(archive) as zf:
            zf.extractall(root / "source")
        runner = root / "run_autograder"
        shutil.copy2(root / "source" / "run_autograder", runner)
        runner.chmod(0o755)
        # Gradescope keeps the uploaded file's name: the student's module
        shutil.copy2(submission,
                     root / "submission" / homework.current().module_name)
        env = dict(os.environ, AUTOGRADER_ROOT=str(root),
                   AUTOGRADER_PYTHON=sys.executable)
        subprocess.run([str(runner)], cwd=root, env=env, capture_output=True,
                       timeout=900)
        return json.loads((root / "results" / "results.json").read_text())


def main() -> int:
    """Run the demo; exit 1 if a step fails."""
    start = time.monotonic()
    try:
        student, student_zip = release.build()
    except release.ReleaseError as exc:
        print(f"demo stopped: the release failed: {exc}", file=sys.stderr)
        return 1
    print(f"release: {student_zip} "
          f"({time.monotonic() - start:.0f} s, leak-scanned, self-graded)")
    archive = gradescope.build()
    print(f"autograder: {archive}")
    subs = stage_submissions(student, BUILD / "submissions")
    out = BUILD / "grades"
    shutil.rmtree(out, ignore_errors=True)
    t0 = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "autograder", "grade", "--out", str(out),
         *map(str, subs)], cwd=ROOT, capture_output=True, text=True)
    if not (out / "grades.csv").exists():
        print(done.stdout, done.stderr, file=sys.stderr)
        return 1
    print(f"graded {len(subs)} submissions in "
          f"{time.monotonic() - t0:.0f} s into {out.relative_to(ROOT)}/")
    # The jail's layers (and why any is missing), as `grade` printed them.
    print("\n".join(line for line in done.stderr.splitlines()
                    if line.startswith(("jail:", "warning: jail",
                                        "  because "))))
    rows = []
    for sub in subs:
        name = re.sub(r"\.(py|zip)$", "", sub.name)
        path = layout.submission_dir(out, name) / "results.json"
        result = json.loads(path.read_text()) if path.exists() else {}
        rows.append((name, result.get("score", "-"),
                     sum(t.get("max_score", 0)
                         for t in result.get("tests", [])),
                     feedback_line(result)))
    width = max(len(r[0]) for r in rows)
    print(f"\n{'submission':<{width}}  score  feedback")
    for name, score, top, line in rows:
        shown = f"{score:g}/{top:g}" if isinstance(score, (int, float)) \
            else "-"
        print(f"{name:<{width}}  {shown:>5}  {line[:110]}")
    t0 = time.monotonic()
    gs = run_gradescope(archive, BUILD / "submissions" / "reference.py")
    print(f"\nGradescope run_autograder on reference.py: score "
          f"{gs['score']:g} ({time.monotonic() - t0:.0f} s)")
    asked = answers.questions()
    print(f"TA pages: {(out / 'answers').relative_to(ROOT)}/{asked[0]}.md ... "
          f"{asked[-1]}.md; feedback: {out.relative_to(ROOT)}/"
          f"{layout.SUBMISSIONS}/<name>/feedback.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
