"""Build submission.zip: your module and your notebook, ready to upload.

Run ``make submission`` (or ``python homework.py submission``). It refuses,
and says why, when a file is missing, the notebook is not valid JSON, no
task is implemented yet (every code block still holds only the skeleton's
``raise NotImplementedError``), your module imports a package the grader
does not have (autograder/imports.toml) or it does not import (checked in a
separate Python process, exactly as the grader will import it); a refusal
removes an older submission.zip, so that no stale zip is left to upload.
Unanswered inline questions only give a warning.
"""
from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

from homework_profile import value   # beside this file

ROOT = Path(__file__).resolve().parent
MODULE = value("module", "file")
NOTEBOOK = value("notebook", "master")   # where the release puts it
OUT = ROOT / "submission.zip"
IMPORT_TIMEOUT = 120  # seconds; importing torch alone can take a while


class SubmissionError(Exception):
    """A reason not to build the zip, worded for the student."""


def check_files(root: Path) -> None:
    """Both files exist; the notebook parses as JSON."""
    for rel in (MODULE, NOTEBOOK):
        if not (root / rel).is_file():
            raise SubmissionError(f"{rel} is missing: restore it (it came "
                                  f"with the homework) and run again.")
    try:
        json.loads((root / NOTEBOOK).read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise SubmissionError(f"{NOTEBOOK} is not a valid notebook ({exc}). "
                              f"Save it from Jupyter and run again.")


def _skeleton_statement(node: ast.stmt) -> bool:
    """``raise NotImplementedError(...)`` or ``pass``: what the skeleton
    holds where the student's code goes."""
    if isinstance(node, ast.Pass):
        return True
    if not isinstance(node, ast.Raise) or node.exc is None:
        return False
    exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
    return isinstance(exc, ast.Name) and exc.id == "NotImplementedError"


def untouched(source: str) -> bool:
    """Whether every region the grader grades in ``source`` (the marked
    blocks, and the whole body of a rubric method whose markers were
    deleted) holds only the skeleton's statements. False when it cannot
    tell (a syntax error: the import check speaks then)."""
    from autograder.rubric import load_rubric
    from autograder.submission.regions import graded_regions
    try:
        methods = {task.cls: task.methods for task in load_rubric().tasks}
    except Exception:  # noqa: BLE001 - an unreadable rubric: cannot tell
        return False
    try:
        tree = ast.parse(source)
        # the marked blocks (or a whole body whose markers were deleted);
        # the skeleton's own lines outside them are no work of the student
        found = [r for r in graded_regions(source, tree, methods=methods)
                 if not r.outside]
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    if not found:
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.stmt) and not _skeleton_statement(node) \
                and any(r.start <= node.lineno <= r.end for r in found):
            return False
    return True


def check_started(root: Path) -> None:
    """Refuse the untouched skeleton: it would score 0."""
    if untouched((root / MODULE).read_text(encoding="utf-8",
                                           errors="replace")):
        raise SubmissionError(
            f"no task is implemented yet in {MODULE}: every block between "
            f"`# YOUR CODE STARTS HERE` and `# YOUR CODE ENDS HERE` still "
            f"holds only the skeleton's `raise NotImplementedError`, which "
            f"scores 0. Write your code there (save the file; `make check` "
            f"shows what each task needs) and run again.")


def check_imports(root: Path) -> None:
    """Refuse an import of a package the grader does not have: there the
    module would not import (autograder/imports.toml lists what it has)."""
    from autograder.submission.imports import refusal
    why = refusal((root / MODULE).read_text(encoding="utf-8",
                                            errors="replace"))
    if why:
        raise SubmissionError(why)


def graded_names() -> list[str]:
    """The classes (and functions) the rubric's tasks grade, which the
    grader looks up in the module; none if the rubric is unreadable (the
    import alone is checked then)."""
    from autograder.rubric import load_rubric
    try:
        return list(dict.fromkeys(task.cls for task in load_rubric().tasks))
    except Exception:  # noqa: BLE001 - an unreadable rubric: cannot tell
        return []


def check_import(root: Path) -> None:
    """Import the module in a fresh interpreter, as the grader does, and
    look up every name the rubric grades."""
    code = ("import importlib.util, sys\n"
            "spec = importlib.util.spec_from_file_location("
            f"{Path(MODULE).stem!r}, sys.argv[1])\n"
            "module = importlib.util.module_from_spec(spec)\n"
            "spec.loader.exec_module(module)\n"
            "for name in sys.argv[2:]:\n"
            "    getattr(module, name)\n")
    env = dict(os.environ, PYTHONPATH=str(root))
    try:
        done = subprocess.run([sys.executable, "-c", code, str(root / MODULE),
                               *graded_names()],
                              cwd=root, env=env, capture_output=True,
                              text=True, timeout=IMPORT_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise SubmissionError(f"importing {MODULE} took more than "
                              f"{IMPORT_TIMEOUT} s: remove code that runs "
                              f"at import time (outside the classes).")
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-12:])
        raise SubmissionError(f"{MODULE} does not import, so the grader "
                              f"could not run it:\n\n{tail}\n\nFix the "
                              f"error (`make check` shows more) and run "
                              f"again.")


def unanswered(root: Path) -> list[str]:
    """Inline questions whose answer cell is still empty."""
    try:
        from autograder.submission.answers import collect_answers
        answers = collect_answers(root / NOTEBOOK)
    except Exception:  # noqa: BLE001 - a warning only, never a blocker
        return []
    return [q for q, text in answers.items() if not text]


def answered_below(root: Path) -> list[str]:
    """Inline questions whose answer cell is empty while text sits in the
    cells below it (the grader collects those cells, up to the next
    question; the student is told to move the text into the answer cell,
    where the TA looks first)."""
    try:
        from autograder.submission.answers import answered_below as below
        return below(root / NOTEBOOK)
    except Exception:  # noqa: BLE001 - a warning only, never a blocker
        return []


def build(root: Path = ROOT, out: Path = OUT) -> Path:
    """Check the files and write ``out``; SubmissionError if not fit."""
    check_files(root)
    check_started(root)
    check_imports(root)
    check_import(root)
    tmp = out.with_suffix(".zip.tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as archive:
        for rel in (MODULE, NOTEBOOK):
            archive.write(root / rel, rel)
    tmp.replace(out)
    return out


def main() -> int:
    """Build the zip and say what to do with it."""
    try:
        out = build()
    except SubmissionError as exc:
        print(f"NOT built: {exc}", file=sys.stderr)
        if OUT.exists():   # a stale zip must not be uploaded by mistake
            OUT.unlink()
            print(f"Removed the older {OUT.name}: it does not hold your "
                  f"current files.", file=sys.stderr)
        return 1
    below = answered_below(ROOT)
    for question in below:
        print(f"warning: the **Answer {question}:** cell in {NOTEBOOK} is "
              f"empty but you wrote in a cell below it: move your answer "
              f"into the **Answer {question}:** cell (the grader collects "
              f"the cells below it up to the next question, but the "
              f"answer cell is where it belongs).")
    missing = [q for q in unanswered(ROOT) if q not in below]
    if missing:
        print(f"warning: no answer yet to {', '.join(missing)} in {NOTEBOOK} "
              f"(save the notebook if you did answer).")
    size = out.stat().st_size / 1024
    print(f"wrote {out.name} ({size:.0f} KB) with {MODULE} and {NOTEBOOK}.\n"
          f"Upload {out.name} to Gradescope.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
