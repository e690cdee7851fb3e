"""Seconds of one submission's run beside a bare ``import torch``, and the
otter-style per-submission baseline.

Most users meet the grader one submission at a time: a student's
``check`` and Gradescope, which runs ``run_autograder`` once per
submission. ``one_submission_runs`` times, in the same run and interleaved
(so a loaded machine slows all three alike), a bare ``python -c "import
torch"``, ``python -m autograder check`` on the reference (warm: its
canary remembered) and ``python -m autograder gradescope`` on a folder
holding the reference and the notebook. ``otter_seconds`` grades
submissions the otter-grader way, one ``otter check`` per submission with
the tests ``otter assign`` makes of the master notebook (the same frozen
public values and items, exception-based), for the batch comparison.

``python -m kit.machine.bench_startup [--repeats 5] [--otter 0]`` prints these
figures alone; ``make bench`` prints them with the rest.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from autograder import homework

ROOT = Path(__file__).resolve().parents[2]
TARGET_RATIO = 1.5      # one submission vs a bare import torch
RUN_TIMEOUT = 600.0


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), **extra}


def _timed(command: list[str], env: dict[str, str], cwd: Path) -> float:
    start = time.perf_counter()
    done = subprocess.run(command, env=env, cwd=cwd, timeout=RUN_TIMEOUT,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command[1:])} failed: "
                           f"{done.stderr.decode(errors='replace')[-500:]}")
    return seconds


def one_submission_runs(repeats: int = 5) -> dict[str, list[float]]:
    """Wall seconds per run of ``import torch``, ``check`` and
    ``gradescope``, interleaved ``repeats`` times after one warm-up run of
    each (page cache, remembered canary)."""
    python = sys.executable
    with tempfile.TemporaryDirectory(prefix="bench-one-") as tmp:
        work = Path(tmp)
        submission = work / "gs" / "submission"
        submission.mkdir(parents=True)
        hw = homework.staff()
        shutil.copy(hw.reference, submission / Path(hw.module_file).name)
        if hw.notebook.is_file():
            shutil.copy(hw.notebook, submission / hw.notebook.name)
        env = _env(AUTOGRADER_CACHE_DIR=str(work / "cache"))
        commands = {
            "import torch": [python, "-c", "import torch"],
            "check": [python, "-m", "autograder", "check",
                      str(hw.reference)],
            "gradescope": [python, "-m", "autograder", "gradescope",
                           "--root", str(work / "gs")]}
        times: dict[str, list[float]] = {name: [] for name in commands}
        for round_ in range(repeats + 1):
            for name, command in commands.items():
                seconds = _timed(command, env, work)
                if round_:   # the first round warms up
                    times[name].append(seconds)
    return times


def one_submission_lines(times: dict[str, list[float]]) -> list[str]:
    """The figures of ``one_submission_runs``: medians and ratios."""
    base = statistics.median(times["import torch"])
    lines = [f"one submission (median of {len(times['import torch'])} "
             f"interleaved runs each, load {_load()}):",
             f"  bare python -c 'import torch': {base:.2f} s"]
    for name, label in (("check", "check on the reference (warm)"),
                        ("gradescope", "gradescope, one submission")):
        median = statistics.median(times[name])
        ratio = median / base
        lines.append(f"  {label + ':':<34} {median:.2f} s = {ratio:.2f}x "
                     f"import torch (target <= {TARGET_RATIO}x: "
                     f"{'met' if ratio <= TARGET_RATIO else 'NOT met'})")
    return lines


def _load() -> str:
    try:
        return " ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def otter_seconds(paths: list[Path], workdir: Path) -> list[float]:
    """Wall seconds per submission graded the otter way: ``otter assign``
    once (not timed), then per submission a fresh ``otter check`` of the
    assigned tests with that submission as transformer_lm's module.
    Raises RuntimeError when otter cannot be run here."""
    python = sys.executable
    assigned = workdir / "otter"
    done = subprocess.run(
        [python, "-m", "otter", "assign", str(homework.staff().notebook),
         str(assigned)],
        cwd=homework.staff().notebook.parent, env=_env(MPLBACKEND="Agg"),
        capture_output=True, text=True, timeout=RUN_TIMEOUT)
    tests = assigned / "autograder"
    if done.returncode != 0 or not (tests / "tests").is_dir():
        raise RuntimeError(f"otter assign failed: {done.stderr[-300:]}")
    times = []
    for i, path in enumerate(paths):
        folder = workdir / f"otter-{i}"
        shutil.copytree(tests, folder)
        shutil.copy(path, folder / homework.current().module_file)
        (folder / "submission.py").write_text(
            f"import {homework.current().import_name}\n")
        env = {**_env(), "PYTHONPATH": f"{folder}{os.pathsep}{ROOT}"}
        start = time.perf_counter()
        subprocess.run([python, "-m", "otter", "check", "submission.py",
                        "-t", "tests"], cwd=folder, env=env,
                       timeout=RUN_TIMEOUT, capture_output=True)
        times.append(time.perf_counter() - start)
    return times


def main(argv: list[str] | None = None) -> None:
    """Print the one-submission figures (and the otter baseline)."""
    parser = argparse.ArgumentParser(
        prog="python -m kit.machine.bench_startup",
        description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--otter", type=int, default=0, metavar="N",
                        help="also grade N references the otter way")
    args = parser.parse_args(argv)
    print("\n".join(one_submission_lines(one_submission_runs(args.repeats))))
    if args.otter:
        with tempfile.TemporaryDirectory(prefix="bench-otter-") as tmp:
            times = otter_seconds([homework.staff().reference] * args.otter,
                                  Path(tmp))
        print(f"otter-style, per submission: "
              f"{statistics.median(times):.2f} s (median of {len(times)})")


if __name__ == "__main__":
    main()
