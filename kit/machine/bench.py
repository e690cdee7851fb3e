"""Seconds per submission: warm forked sandbox workers vs fresh interpreters.

``make bench`` (``python -m kit.machine.bench [--n 60] [--jobs 2]``) first
times one submission's run, ``check`` and ``gradescope``, beside a bare
``import torch`` in the same run (``kit/machine/bench_startup.py``). Then
it writes ``--n`` submissions (copies of the reference and of the example
variants) to a temporary directory and grades them all with the real pipeline
(``autograder.batch.grade_all``: the rubric's full probe set on the
frozen cases, each submission's folder written as ``grade`` writes it)
and the real sandbox. As a baseline it grades the first
``--baseline`` of them with a fresh ``python -c`` interpreter per submission
that imports torch and runs the same probes (no isolation at all, so the
baseline is if anything flattered), and extrapolates. Prints both and the
speedup, the batch's seconds per submission against a bare import torch
and against the otter-style baseline (``--otter`` submissions, one ``otter
check`` each, when otter can assign the notebook here), and what the
value-flow diagnosis costs a failing submission (kit/corpus/diagnosis_bugs.py).
The targets are figures to compare with, not assertions.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from autograder import homework
from autograder import batch, grade as G
from autograder.config import GradingConfig, load_config
from autograder.report import layout
from autograder.sandbox.protocol import CRASH, Probe, ProbeResult
from autograder.sandbox import parent_clock, wire
from autograder.sandbox.pool import Sandbox
from kit.machine import bench_startup
from kit.corpus import diagnosis_bugs
from kit.corpus.examples import example_sources

ROOT = Path(__file__).resolve().parents[2]
TARGET_SECONDS = 0.25   # per submission, 2 cores
GRADESCOPE_MB = 768     # the default container's memory

FRESH_TIMEOUT = 600.0   # seconds for one fresh interpreter's probes
_FRESH_SCRIPT = """
import sys
from multiprocessing.connection import Connection
from autograder.sandbox import wire
from autograder.sandbox.worker import execute_probes
source = open(sys.argv[1]).read()
probes = wire.decode_probes(open(sys.argv[2], "rb").read())
results = Connection(int(sys.argv[3]), readable=False)
for result in execute_probes(source, sys.argv[1], probes):
    wire.send(results, *wire.result_payload(result))
"""


def write_submissions(directory: Path, n: int) -> list[Path]:
    """``n`` submission files: the reference and the examples (typical
    mistakes), round robin."""
    sources = [homework.staff().reference.read_text(),
               *example_sources().values()]
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(n):
        path = directory / f"s{i:03d}" / homework.current().module_name
        path.parent.mkdir()
        path.write_text(sources[i % len(sources)])
        paths.append(path)
    return paths


def fresh_interpreter_runner(workdir: Path) -> G.Runner:
    """A Runner that starts a new interpreter per submission."""
    def run(source: str, filename: str,
            probes: list[Probe]) -> list[ProbeResult]:
        with tempfile.NamedTemporaryFile(dir=workdir, suffix=".probes",
                                         delete=False) as f:
            f.write(wire.encode_probes(probes))
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        mine, theirs = wire.channel()
        try:
            proc = subprocess.Popen(
                [sys.executable, "-c", _FRESH_SCRIPT, filename, f.name,
                 str(theirs.fileno())], pass_fds=[theirs.fileno()],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                env=env)
        finally:
            theirs.close()
        receiver = wire.Receiver(mine)
        try:
            return receive_results(receiver, probes,
                                   parent_clock.now() + FRESH_TIMEOUT)
        finally:
            receiver.close()
            try:   # the interpreter's exit is part of its cost
                proc.wait(FRESH_TIMEOUT)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            os.unlink(f.name)
    return run


def receive_results(receiver: wire.Receiver, probes: list[Probe],
                    deadline: float) -> list[ProbeResult]:
    """One result per probe from ``receiver``; a probe without a valid
    result (and every later one) is a crash."""
    results = []
    for probe in probes:
        try:
            header, outputs = receiver.receive(deadline)
            results.append(wire.result_from_header(header, outputs,
                                                   probe.id))
        except (wire.BadMessage, wire.Closed, wire.TimedOut):
            break
    return results + [ProbeResult(p.id, CRASH, "no result")
                      for p in probes[len(results):]]


def grade_all(paths: list[Path], runner: G.Runner, jobs: int,
              config: GradingConfig, out: Path | None = None
              ) -> tuple[float, list[float]]:
    """Seconds for grading every path with ``jobs`` threads through the
    batch engine (autograder/batch.py), and scores. With ``out``, each
    grade's results.json, feedback.md and source are written there, as
    ``grade`` does."""
    start = time.perf_counter()
    entries = [batch.Entry(path.parent.name, path, path.read_text())
               for path in paths]
    graded = batch.grade_all(entries, config, runner, jobs=jobs, out=out)
    return (time.perf_counter() - start,
            [grade.score for grade in graded.grades])


def class_report_seconds(out: Path, config: GradingConfig) -> float:
    """Seconds to write the class report of a graded folder, imports of
    its libraries included (as at the end of a ``grade`` run)."""
    from autograder.report import results as R
    from autograder.grade import GradeResult
    R.write_grades_csv([GradeResult.of(config.rubric, name, "")
                        for name in layout.submission_dirs(out)], [],
                       out / "grades.csv")
    start = time.perf_counter()
    from autograder.staff import class_report
    class_report.write_report(out, config.mistakes)
    return time.perf_counter() - start


def reference_plan(config: GradingConfig) -> list:
    """Each check of a grading run with the probes it sends, planned for
    the reference."""
    ctx = G.grading_context(config, homework.staff().reference.read_text())
    return G.plan_checks(config, ctx)


def _tree(pid: int) -> list[int]:
    """``pid`` and all its descendants (from /proc)."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        for task in Path(f"/proc/{current}/task").glob("*/children"):
            try:
                todo += [int(c) for c in task.read_text().split()]
            except OSError:
                pass
    return found


def _pss_mib(pids: list[int]) -> float:
    """Physical memory of the processes: their proportional set sizes."""
    total = 0
    for pid in pids:
        try:
            rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
        except OSError:
            continue
        total += next((int(line.split()[1]) for line in rollup.splitlines()
                       if line.startswith("Pss:")), 0)
    return total / 1024


def peak_memory_of_grading(submission: Path) -> float:
    """Peak physical memory (MiB) of the whole process tree of one
    ``python -m autograder grade`` run, as a Gradescope run would use."""
    with tempfile.TemporaryDirectory(prefix="bench-mem-") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "autograder", "grade", "--out", out,
             str(submission)], stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, env={**os.environ,
                                            "PYTHONPATH": str(ROOT)})
        peak = 0.0
        while proc.poll() is None:
            peak = max(peak, _pss_mib(_tree(proc.pid)))
            time.sleep(0.02)
    return peak


def probe_seconds(config: GradingConfig) -> tuple[float, dict[str, float]]:
    """CPU seconds of the reference's probes run in-process, in all and
    per rubric check: where a submission's grading time goes."""
    from autograder.sandbox.worker import execute_probes
    source = homework.staff().reference.read_text()
    planned = reference_plan(config)
    check_of = {p.id: check.id for check, found in planned for p in found}
    probes = list({p.id: p for _, found in planned for p in found}.values())
    where = str(homework.staff().reference)
    list(execute_probes(source, where, probes))   # warm up
    by_check: dict[str, float] = {}
    for result in execute_probes(source, where, probes):
        key = check_of.get(result.id, "?")
        by_check[key] = by_check.get(key, 0.0) + result.seconds
    return sum(by_check.values()), by_check


def jail_cost(paths: list[Path], jobs: int,
              config: GradingConfig) -> list[str]:
    """Seconds per submission with the full jail and with only the
    privilege drop and limits (no namespaces, no Landlock): what the jail
    costs, line by line."""
    lines = []
    timings = {}
    for label, kwargs in (("full jail", {}),
                          ("limits only", {"namespaces": False,
                                           "landlock": False})):
        with Sandbox(**kwargs) as sandbox:
            runner = batch.budgeted_runner(sandbox, config)
            grade_all(paths[:1], runner, 1, config)   # warm up
            seconds, _ = grade_all(paths, runner, jobs, config)
            timings[label] = seconds / len(paths)
            lines.append(f"  {label + ':':<13} {timings[label]:.3f} "
                         f"s/submission ({', '.join(sandbox.layers)})")
    extra = timings["full jail"] - timings["limits only"]
    lines.append(f"  the jail costs {extra * 1000:+.0f} ms per submission")
    return lines


def static_seconds(config: GradingConfig) -> dict[str, float]:
    """Seconds of the grading process's own static checks on hostile
    sources at their budgets: the shape-comment check with a 100 KB comment
    block on a traced statement, and pycodestyle on a file at the style
    check's size limit (longer files are not checked: a deduction)."""
    from autograder.checks.shape_comments import check_shape_comments
    from autograder.checks.shape_notation import notation_of
    from autograder.checks.style import MAX_STYLE_CHARS, all_style_issues
    reference = homework.staff().reference.read_text()
    anchor = "        )  # [bs, seq, seq]\n"
    block = "".join("        # [bs, seq, hidden] x (a b c) zz x zz x zz\n"
                    for _ in range(2200))
    hostile = reference.replace(anchor, "        )\n" + block, 1)
    line = hostile[:hostile.index("probs = torch.softmax(")].count("\n") + 1
    dims = {"batch_size": 2, "seq_len": 5, "input_size": 7, "hidden": 12}
    start = time.perf_counter()
    check_shape_comments(hostile, {line: [[[2, 5, 5]]]}, dims,
                         config.task_methods,
                         notation=notation_of(config.profile))
    comments = time.perf_counter() - start
    padded = reference + "y = [" + "1, " * ((MAX_STYLE_CHARS -
                                             len(reference)) // 3 - 2) + "]\n"
    start = time.perf_counter()
    all_style_issues(padded[:MAX_STYLE_CHARS])
    style = time.perf_counter() - start
    return {"shape comments, 100 KB comment block": comments,
            f"pycodestyle, {MAX_STYLE_CHARS:,} characters": style}


def otter_line(n: int, per_warm: float) -> str:
    """The otter-style per-submission baseline of ``n`` submissions beside
    the batch's figure (bench_startup.otter_seconds), or why it could not
    be built."""
    try:
        with tempfile.TemporaryDirectory(prefix="bench-otter-") as tmp:
            paths = write_submissions(Path(tmp) / "subs", n)
            times = bench_startup.otter_seconds(paths, Path(tmp))
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        return f"otter-style baseline: not built here ({exc})"
    otter = statistics.median(times)
    return (f"otter-style (otter check per submission, {len(times)} "
            f"graded): {otter:.2f} s/submission; the batch takes "
            f"{per_warm / otter:.3f}x that (target <= 0.15x: "
            f"{'met' if per_warm / otter <= 0.15 else 'NOT met'})")


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark and print the figures."""
    parser = argparse.ArgumentParser(
        prog="python -m kit.machine.bench",
        description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=60,
                        help="submissions graded with the sandbox")
    parser.add_argument("--jobs", type=int, default=2,
                        help="submissions graded concurrently")
    parser.add_argument("--baseline", type=int, default=10,
                        help="submissions graded with fresh interpreters")
    parser.add_argument("--repeats", type=int, default=5,
                        help="runs of import torch, check and gradescope")
    parser.add_argument("--otter", type=int, default=3, metavar="N",
                        help="submissions graded the otter way (0: skip)")
    args = parser.parse_args(argv)
    # One submission at a time first, before this process holds torch's
    # threads and the sandbox's memory.
    runs = bench_startup.one_submission_runs(args.repeats)
    print("\n".join(bench_startup.one_submission_lines(runs)))
    torch_seconds = statistics.median(runs["import torch"])
    # The parent's comparisons are on tiny tensors: intra-op threads only
    # compete with the workers and the other grading threads.
    torch.set_num_threads(1)
    config = load_config()
    probes = {p.id for _, found in reference_plan(config)
              for p in found}
    print(f"{len(probes)} probes per submission, {len(config.cases)} "
          f"cases, {args.jobs} jobs, {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        paths = write_submissions(Path(tmp), max(args.n, args.baseline))
        start = time.perf_counter()
        with Sandbox() as sandbox:
            runner = batch.budgeted_runner(sandbox, config)
            grade_all(paths[:1], runner, 1, config)   # warm up
            warmup = time.perf_counter() - start
            out = Path(tmp) / "out"
            warm, scores = grade_all(paths[:args.n], runner, args.jobs,
                                     config, out)
        report_time = class_report_seconds(out, config)
        fresh, fresh_scores = grade_all(
            paths[:args.baseline], fresh_interpreter_runner(Path(tmp)),
            args.jobs, config)
    if fresh_scores != scores[:len(fresh_scores)]:
        print("warning: the two runners gave different scores")
    per_warm, per_fresh = warm / args.n, fresh / args.baseline
    print(f"fork server start (torch import, once): {warmup:.2f} s")
    print(f"warm sandbox:      {per_warm:.3f} s/submission "
          f"({args.n} submissions in {warm:.1f} s)")
    print(f"fresh interpreter: {per_fresh:.3f} s/submission "
          f"({args.baseline} in {fresh:.1f} s; {args.n} would take "
          f"~{per_fresh * args.n:.0f} s)")
    print(f"speedup: {per_fresh / per_warm:.1f}x")
    print(f"batch of {args.n}: {per_warm:.3f} s/submission = "
          f"{per_warm / torch_seconds:.3f}x a bare import torch")
    if args.otter:
        print(otter_line(args.otter, per_warm))
    print(f"target: <= {TARGET_SECONDS} s/submission on 2 cores "
          f"({'met' if per_warm <= TARGET_SECONDS else 'NOT met'} here)")
    with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        paths = write_submissions(Path(tmp), 20)
        print("what the jail costs (20 submissions):")
        print("\n".join(jail_cost(paths, args.jobs, config)))
    with Sandbox() as sandbox:
        print("\n".join(diagnosis_bugs.bench_lines(sandbox, config)))
    total, by_check = probe_seconds(config)
    heavy = max(by_check, key=by_check.get)
    print(f"where the time goes: the probes take {total:.2f} s of CPU per "
          f"submission, {by_check[heavy]:.2f} s of it check {heavy} (the "
          f"slowest), {total - by_check[heavy]:.2f} s all the other checks")
    for what, seconds in static_seconds(config).items():
        print(f"static check on hostile input ({what}): {seconds:.2f} s")
    print(f"class report of the {args.n} (report.html, linked pages, "
          f"similarity): {report_time:.2f} s, {100 * report_time / warm:.0f}"
          f"% of grading them (target <= 10%)")
    peak = peak_memory_of_grading(homework.staff().reference)
    print(f"peak memory grading the reference (parent, fork server, "
          f"worker): {peak:.0f} MiB; Gradescope's default container has "
          f"{GRADESCOPE_MB} MB")


if __name__ == "__main__":
    main()
