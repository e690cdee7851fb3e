"""What every fault scenario shares: a small batch (the reference, the
skeleton and one catalogued mistake), the grader run as staff run it
(``python -m autograder`` in its own process), a clean run's outputs to
judge against, and the judgements: every output whole or absent, no
traceback, grades equal to the clean run's.

A scenario injects its fault, runs the command and calls the checks
here. The deterministic kill is the atomic writer's test hook
(``KILL_ENV`` = ``NAME:N``: SIGKILL in the middle of the N-th write of a
file called NAME, ``*`` any file; autograder/files/atomic.py).
"""
from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from autograder.files import atomic
from autograder.report import batch_state, layout
from autograder.text import csvsafe

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "solutions" / "transformer_lm" / "modeling_attention.py"
SKELETON = ROOT / "transformer_lm" / "modeling_attention.py"
MISTAKE = "no_scale"            # an entry of kit/variants/examples.toml
KILL_ENV = atomic.KILL_ENV
KILLED = -signal.SIGKILL
# The files of a submission's folder compared byte for byte (results.json
# without its execution time) with the clean run's.
SUBMISSION_FILES = ("results.json", "feedback.md", "source.py",
                    "answers.json")


def write_submissions(folder: Path) -> Path:
    """``folder`` with the three submissions as .py files; returns it."""
    from kit.corpus.examples import example_sources
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "reference.py").write_text(REFERENCE.read_text())
    (folder / "skeleton.py").write_text(SKELETON.read_text())
    (folder / f"{MISTAKE}.py").write_text(example_sources()[MISTAKE])
    return folder


def run(*args: str, env: dict[str, str] | None = None,
        timeout: float = 600) -> subprocess.CompletedProcess:
    """``python -m autograder ARGS`` in its own process, from the kit."""
    full = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run([sys.executable, "-m", "autograder", *args],
                          capture_output=True, text=True, cwd=ROOT,
                          env=full, timeout=timeout)


def run_here(*args: str) -> subprocess.CompletedProcess:
    """The command line's ``main(ARGS)`` in this process, its output
    captured: for commands that stop before any sandbox starts (a refused
    OUT, an incomplete folder), as fast as a function call."""
    import contextlib
    import io
    from autograder import cli
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(list(args))
    return subprocess.CompletedProcess(["autograder", *args], code,
                                       out.getvalue(), err.getvalue())


def grade(out: Path, subs: Path, *extra: str,
          env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``grade --out OUT --jobs 2`` every submission of ``subs``."""
    return run("grade", "--out", str(out), "--jobs", "2", *extra,
               *sorted(str(p) for p in subs.iterdir()), env=env)


def killed_at(out: Path, subs: Path, spec: str, *extra: str
              ) -> subprocess.CompletedProcess:
    """``grade`` killed mid-write by the hook (``NAME:N``); asserts that
    it was."""
    proc = grade(out, subs, *extra, env={KILL_ENV: spec})
    assert proc.returncode == KILLED, \
        f"not killed at {spec}: exit {proc.returncode}\n{proc.stderr}"
    return proc


@dataclass
class Clean:
    """A clean run: its folder and what it printed."""

    out: Path
    stdout: str

    def outputs(self) -> dict[str, str]:
        """The comparable outputs, by path relative to OUT."""
        return comparable(self.out)


def clean_run(out: Path, subs: Path, *extra: str) -> Clean:
    """Grade ``subs`` into a new ``out`` with no fault; asserts it
    worked."""
    proc = grade(out, subs, *extra)
    assert proc.returncode == 0, proc.stderr
    assert_no_traceback(proc)
    return Clean(out, proc.stdout)


def comparable(out: Path) -> dict[str, str]:
    """grades.csv and each submission's files, as text (results.json
    without its execution time): what a resumed or faulted run must
    equal."""
    found = {}
    if (out / "grades.csv").is_file():
        found["grades.csv"] = (out / "grades.csv").read_text()
    for name, folder in layout.submission_dirs(out).items():
        for file in SUBMISSION_FILES:
            path = folder / file
            if path.is_file():
                text = path.read_text()
                if file == "results.json":
                    text = _timeless(text)
                found[f"{layout.SUBMISSIONS}/{name}/{file}"] = text
    return found


def _timeless(text: str) -> str:
    try:
        data = json.loads(text)
    except ValueError:
        return text   # compared as it is: it will differ
    data.pop("execution_time", None)
    return json.dumps(data, sort_keys=True)


def assert_whole_or_absent(out: Path, clean: Clean) -> None:
    """Every output under ``out`` is whole: a submission's files and
    grades.csv equal the clean run's where present (so never a part, and
    never another grade); the other files parse (JSON, CSV) or end as
    their writer ends them (HTML). The atomic writer's temporary files
    (a dot, ``.tmp``) are not outputs."""
    expected = clean.outputs()
    for rel, text in comparable(out).items():
        assert rel in expected, f"{rel}: not in the clean run"
        assert text == expected[rel], f"{rel}: differs from the clean run"
    for path in out.rglob("*"):
        if not path.is_file() or atomic.is_temporary(path):
            continue
        data = path.read_bytes()
        rel = path.relative_to(out).as_posix()
        if path.suffix == ".json":
            json.loads(data)
        elif path.suffix == ".csv":
            rows = list(csv.reader(data.decode().splitlines()))
            assert rows and len({len(r) for r in rows}) == 1, rel
        elif path.suffix == ".html":
            assert data.rstrip().endswith(b"</html>"), f"{rel}: cut"


def assert_same_grades(out: Path, clean: Clean) -> None:
    """``out`` holds exactly the clean run's grades.csv and submission
    files (results.json minus times), and a complete batch."""
    assert comparable(out) == clean.outputs()
    batch_state.require_complete(out, "the fault suite")


def assert_no_traceback(proc: subprocess.CompletedProcess) -> None:
    """No Python traceback reached the user."""
    assert "Traceback (most recent call last)" not in proc.stderr + \
        proc.stdout, proc.stderr[-3000:]


def assert_stopped(proc: subprocess.CompletedProcess, *words: str) -> None:
    """Exit 2, one ``error: `` line naming the cause, no traceback."""
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    assert_no_traceback(proc)
    errors = [line for line in proc.stderr.splitlines()
              if line.startswith("error: ")]
    assert errors, proc.stderr[-2000:]
    for word in words:
        assert word in proc.stderr, (word, proc.stderr[-2000:])


def csv_rows(out: Path) -> list[list[str]]:
    """grades.csv's rows, read as the grader reads them."""
    return csvsafe.read_rows(out / "grades.csv")


def copy_out(src: Path, dest: Path) -> Path:
    """A copy of a graded folder (to damage or regrade)."""
    shutil.copytree(src, dest, symlinks=True)
    return dest


def is_root() -> bool:
    """Whether this process may mount and make files immutable."""
    return hasattr(os, "geteuid") and os.geteuid() == 0


__all__ = ["KILLED", "KILL_ENV", "MISTAKE", "Clean", "assert_no_traceback",
           "assert_same_grades", "assert_stopped", "assert_whole_or_absent",
           "clean_run", "comparable", "copy_out", "csv_rows", "grade",
           "is_root", "killed_at", "run", "run_here", "write_submissions"]
