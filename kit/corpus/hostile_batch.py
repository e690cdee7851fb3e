"""Peak memory and time of one ``grade`` batch of hostile submissions:
``python -m kit.corpus.hostile_batch [--n 100] [--jobs 2]``.

The batch cycles through the catalogue's hostile entries
(kit/variants/hostile.toml), a submission whose every forward returns a
62 MB tensor (just under a frame's cap: once the parent kept all of them,
4.5 GB for one submission), a 100,000-character expression and names that
once took the batch's own files, with a correct submission every fifth.
The whole process tree (parent, fork server, workers) is sampled from
/proc (proportional set size) every 50 ms; prints the peak of the tree,
of the parent alone, the wall time, and whether grades.csv and the class
report were written with full marks for every correct submission.

Measured (2026-11-25, 2 shared and loaded cores, --jobs 2, --timeout 2):
100 submissions in 636 s; peak 1316 MiB for the tree, 456 MiB for the
parent; 100 rows, the 20 correct ones at full marks, report.html written.
"""
from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kit import variants
from kit.machine.bench import _pss_mib, _tree

ROOT = Path(__file__).resolve().parents[2]
BIG_RETURNS = """

def _big(*args, **kwargs):
    return torch.zeros(62 * 2 ** 20 // 4)


for _cls in list(globals().values()):
    if isinstance(_cls, type) and issubclass(_cls, nn.Module):
        _cls.forward = _big
"""


def sources() -> list[tuple[str, str]]:
    """(file name, source) of the hostile kinds, the correct one first."""
    reference = variants.find("styles/reference").source()
    found = [("correct.py", reference),
             ("big_returns.py", reference + BIG_RETURNS),
             ("deep.py", reference + "\n_X = " + "-" * 100_000 + "1\n"),
             ("grades.csv.py", reference), ("report.html.py", reference)]
    for name, variant in variants.load("hostile").items():
        found.append((f"{name}.py", variant.source()))
    return found


def write_batch(folder: Path, n: int) -> list[Path]:
    """``n`` submissions: every fifth correct, the others hostile (the
    62 MB returns every other hostile one), in that order."""
    kinds = sources()
    correct, big, others = kinds[0], kinds[1], kinds[2:]
    paths = []
    for i in range(n):
        if i % 5 == 0:
            name, text = correct
        elif i % 2:
            name, text = big
        else:
            name, text = others[(i // 2) % len(others)]
        path = folder / f"{i:03d}" / name
        path.parent.mkdir()
        path.write_text(text)
        paths.append(path)
    return paths


def main(argv: list[str] | None = None) -> int:
    """Grade the batch and print the figures."""
    parser = argparse.ArgumentParser(
        prog="python -m kit.corpus.hostile_batch",
        description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=100)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=2.0,
                        help="seconds per probe (hostile loops)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="hostile-batch-") as tmp:
        paths = write_batch(Path(tmp), args.n)
        out = Path(tmp) / "out"
        start = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, "-m", "autograder", "grade", "--out", str(out),
             "--jobs", str(args.jobs), "--timeout", str(args.timeout),
             *map(str, paths)], stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)})
        peak = parent = 0.0
        while proc.poll() is None:
            peak = max(peak, _pss_mib(_tree(proc.pid)))
            parent = max(parent, _pss_mib([proc.pid]))
            time.sleep(0.05)
        seconds = time.monotonic() - start
        stderr = proc.stderr.read()
        rows = {}
        if (out / "grades.csv").is_file():
            with open(out / "grades.csv", newline="") as handle:
                rows = {r["submission"]: r for r in csv.DictReader(handle)}
        correct = [r for n, r in rows.items() if n == "correct" or
                   n.startswith("correct-")]
        full = {r["score"] for r in correct}
        print(f"{args.n} submissions, --jobs {args.jobs}, --timeout "
              f"{args.timeout:g}: exit {proc.returncode}, {seconds:.0f} s "
              f"({seconds / args.n:.2f} s each)")
        print(f"peak memory: {peak:.0f} MiB for the process tree (parent, "
              f"fork server, workers), {parent:.0f} MiB for the parent")
        print(f"grades.csv rows: {len(rows)}; correct submissions: "
              f"{len(correct)}, scores {sorted(full)}; report.html: "
              f"{(out / 'report.html').is_file()}")
        if proc.returncode:
            print(stderr[-2000:])
    return 0


if __name__ == "__main__":
    sys.exit(main())
