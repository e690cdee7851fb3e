"""Memory faults are the grader's, never the student's: a worker killed by
the container's OOM killer within its own limit is an internal error (no
score), a memory verdict makes the batch prove itself with the canary,
and a machine whose memory cannot hold the grader and one worker is
refused before anything is graded, with the figures.

The end-to-end tests (``e2e``) grade the reference in real memory cgroups
(v2 ``memory.max`` or v1 ``memory.limit_in_bytes``, a child of this
process's own group): its score never drops; it gets full marks, or the
grader refuses, or the submission gets no score. Skipped, saying why,
without a memory controller that lets us make a child group.
"""
from __future__ import annotations

import csv
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest

from autograder import batch
from autograder.config import load_config
from autograder.graded_folder import GRADER_ERROR_EXIT
from autograder.rubric import load_rubric
from autograder.sandbox import memlimit, supervisor
from autograder.sandbox.protocol import ENVIRONMENT, MEMORY, Probe
from kit_tests.worker_death import death

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "solutions" / "transformer_lm" / "modeling_attention.py"
MIB = 1024 * 1024


def _cgroup_v2(folder: Path, limit: int, current: int,
               inactive: int = 0) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "memory.max").write_text(f"{limit}\n")
    (folder / "memory.current").write_text(f"{current}\n")
    (folder / "memory.stat").write_text(f"anon {current}\n"
                                        f"inactive_file {inactive}\n")
    return folder


# --------------------------------------------------------------------------
# The room check, on cgroup files

def test_too_little_memory_is_refused_with_the_figures(tmp_path):
    group = _cgroup_v2(tmp_path / "g", 256 * MIB, 150 * MIB)
    with pytest.raises(memlimit.MemoryShortage) as caught:
        memlimit.check_room([group])
    parent = 150 + memlimit.PARENT_RESERVE_MB
    need = parent + memlimit.MIN_WORKER_MB
    assert str(caught.value).startswith(
        f"the grader needs about {need} MB (parent {parent} + worker "
        f"{memlimit.MIN_WORKER_MB}); this machine/container allows 256 MB")


def test_enough_memory_passes(tmp_path):
    group = _cgroup_v2(tmp_path / "g", 768 * MIB, 150 * MIB)
    memlimit.check_room([group])


def test_reclaimable_file_cache_is_not_counted(tmp_path):
    # 600 MB charged, 500 of them file pages the kernel drops first
    group = _cgroup_v2(tmp_path / "g", 768 * MIB, 600 * MIB,
                       inactive=500 * MIB)
    memlimit.check_room([group])
    assert memlimit.memory_budget([group]) == (768 * MIB, 100 * MIB)


def test_the_tightest_group_decides(tmp_path):
    own = _cgroup_v2(tmp_path / "own", 4096 * MIB, 100 * MIB)
    parent = _cgroup_v2(tmp_path / "parent", 300 * MIB, 200 * MIB)
    with pytest.raises(memlimit.MemoryShortage, match="allows 300 MB"):
        memlimit.check_room([own, parent])


def test_without_a_limit_available_memory_decides(tmp_path):
    meminfo = tmp_path / "meminfo"
    status = tmp_path / "status"
    status.write_text("VmRSS:\t  204800 kB\n")
    meminfo.write_text("MemTotal: 999999 kB\nMemAvailable:   51200 kB\n")
    with pytest.raises(memlimit.MemoryShortage, match="allows 250 MB"):
        memlimit.check_room([], meminfo=meminfo, status=status)
    meminfo.write_text("MemAvailable: 4096000 kB\n")
    memlimit.check_room([], meminfo=meminfo, status=status)


def test_grading_commands_refuse_before_the_canary(monkeypatch):
    def short() -> None:
        raise memlimit.MemoryShortage("the grader needs about 999 MB")
    monkeypatch.setattr(memlimit, "check_room", short)

    class NoSandbox:
        def run(self, *args, **kwargs):
            raise AssertionError("the canary ran on a refused machine")
    with pytest.raises(batch.ConfigError, match="needs about 999 MB"):
        batch.preflight(NoSandbox())


# --------------------------------------------------------------------------
# Who is at fault for a worker's death

def test_oom_kill_within_the_limit_is_the_graders(tmp_path, monkeypatch):
    failure = death(tmp_path, monkeypatch, -signal.SIGKILL, 3, 4)
    assert failure.status == ENVIRONMENT
    assert "within its own limit of 300 MB" in failure.message
    assert "no score was written" in failure.message
    assert "p1" not in failure.message   # a probe's id may name a hidden case


def test_a_kill_without_the_oom_killer_is_unchanged(tmp_path, monkeypatch):
    assert death(tmp_path, monkeypatch, -signal.SIGKILL, 3,
                 3).status == MEMORY
    assert death(tmp_path, monkeypatch, -signal.SIGSEGV, 3,
                 4).status != ENVIRONMENT


def test_oom_kill_stops_the_submissions_workers(tmp_path):
    # The grader's failure: no further worker is started for the rest.
    started = []

    class Attempt:
        def __init__(self, start, source, filename, probes, *rest):
            started.append([p.id for p in probes])
            self.layers, self.refused = None, []

        def results(self):
            raise supervisor.Failure(ENVIRONMENT, "out of memory: grader")
            yield

        def close(self) -> str:
            return ""

    probes = [Probe(f"p{i}", "SelfAttention", {}) for i in range(3)]
    settings = type("Settings", (), {"workdir": str(tmp_path),
                                     "output_limit": 100})()
    original = supervisor.Attempt
    supervisor.Attempt = Attempt
    try:
        results, _, _ = supervisor.supervise(
            lambda process: None, "", "f.py", probes, settings,
            float("inf"), 10.0)
    finally:
        supervisor.Attempt = original
    assert started == [["p0", "p1", "p2"]]
    assert results[0].status == ENVIRONMENT
    assert [r.status for r in results[1:]] == ["not_run", "not_run"]


@pytest.mark.parametrize("limits,proved", [({MEMORY: 1}, True),
                                           ({}, False)])
def test_a_memory_verdict_proves_the_canary_before_it_is_kept(
        monkeypatch, limits, proved):
    # A score above 0 with a memory verdict: the machine may have run
    # out, so the canary runs before it is kept (and only then).
    proofs = []
    monkeypatch.setattr(batch, "preflight",
                        lambda sandbox, **kw: proofs.append(kw) or [])
    graded = SimpleNamespace(name="a", score=5.0, max_score=16.0,
                             error="", internal_error="", limits=limits,
                             jail=[], tasks=[], mistakes=lambda: [])
    monkeypatch.setattr(batch, "grade_submission",
                        lambda *args, **kwargs: graded)
    config = load_config(sets=("public",))
    batch.grade_all([batch.Entry("a", Path("a.py"), "x = 1\n")], config,
                    None, public_only=True, canary="sandbox")
    assert proofs == ([{"quiet": True, "memory": False}] if proved else [])


# --------------------------------------------------------------------------
# End to end, in memory cgroups

def _remove_group(group: Path) -> None:
    """Kill what a test's cgroup still holds (none, normally) and remove
    it (the kernel frees it a moment after its last process)."""
    for pid in (group / "cgroup.procs").read_text().split():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass
    for _ in range(50):
        try:
            group.rmdir()
            break
        except OSError:
            time.sleep(0.1)


def _memory_group() -> tuple[Path, str] | str:
    """This process's memory cgroup and its limit file, or why none can
    be made here."""
    if os.geteuid() != 0:
        return "making a memory cgroup needs root"
    folders = memlimit.cgroup_folders()
    if not folders:
        return "no memory cgroup controller here"
    for name in ("memory.max", "memory.limit_in_bytes"):
        if (folders[0] / name).exists():
            probe = folders[0] / f"kit-probe-{uuid.uuid4().hex[:8]}"
            try:
                probe.mkdir()
                probe.rmdir()
            except OSError as exc:
                return f"cannot make a child memory cgroup: {exc}"
            return folders[0], name
    return "no memory limit file in this process's cgroup"


GROUP = _memory_group()
needs_cgroup = pytest.mark.skipif(isinstance(GROUP, str),
                                  reason=str(GROUP))


def _grade_in_cgroup(limit_mb: int, tmp_path: Path,
                     sources: dict[str, str] | None = None, jobs: int = 1
                     ) -> tuple[subprocess.CompletedProcess, Path]:
    """``grade`` of ``sources`` (name -> code; default the reference
    alone), run in a fresh child cgroup limited to ``limit_mb`` (a
    wrapper writes its pid to cgroup.procs and execs)."""
    parent, limit_file = GROUP
    group = parent / f"kit-faults-{uuid.uuid4().hex[:8]}"
    group.mkdir()
    out = tmp_path / f"out-{limit_mb}"
    paths = []
    for name, code in (sources or {"reference": REFERENCE.read_text()}
                       ).items():
        paths.append(tmp_path / f"{name}.py")
        paths[-1].write_text(code)
    try:
        (group / limit_file).write_text(str(limit_mb * MIB))
        if (group / "memory.swap.max").exists():
            (group / "memory.swap.max").write_text("0")
        done = subprocess.run(
            ["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"',
             str(group), sys.executable, "-m", "autograder", "grade",
             *map(str, paths), "--out", str(out), "--jobs", str(jobs)],
            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
            capture_output=True, text=True, timeout=900)
    finally:
        _remove_group(group)
    return done, out


@pytest.mark.e2e
@needs_cgroup
@pytest.mark.parametrize("limit_mb", [256, 200])
def test_reference_never_loses_points_to_a_small_cgroup(tmp_path, limit_mb):
    done, out = _grade_in_cgroup(limit_mb, tmp_path)
    text = done.stdout + done.stderr
    assert "Traceback" not in text
    assert done.returncode in (0, 2, GRADER_ERROR_EXIT), text
    if done.returncode == 2:   # refused, with the figures
        assert re.search(r"error: the grader needs about \d+ MB \(parent "
                         r"\d+ \+ worker \d+\); this machine/container "
                         rf"allows {limit_mb} MB", done.stderr), text
        assert not (out / "grades.csv").exists()
        return
    results = json.loads((out / "submissions" / "reference" /
                          "results.json").read_text())
    rubric = load_rubric()
    if results["extra_data"].get("internal_error"):
        assert "used too much memory" not in json.dumps(results)
        assert done.returncode == GRADER_ERROR_EXIT, text
    else:
        assert done.returncode == 0, text
        assert results["score"] == rubric.max_score + rubric.max_bonus


@pytest.mark.e2e
@needs_cgroup
def test_a_roomy_cgroup_is_not_refused(tmp_path):
    done, out = _grade_in_cgroup(640, tmp_path)
    assert done.returncode == 0, done.stderr
    with open(out / "grades.csv", newline="") as handle:
        row, = csv.DictReader(handle)
    rubric = load_rubric()
    assert float(row["score"]) == rubric.max_score + rubric.max_bonus


def _bloated(reference: str) -> str:
    """The reference whose every method returns its result and 15 more
    tensors of 4 MiB: the most the wire lets a submission send back."""
    code = reference.replace(
        "import torch\n", "import torch\n_BIG = [torch.randn(1 << 20) "
        "for _ in range(15)]\n", 1)
    return re.sub(r"(\n        )return ([^\n#]+?)( *#[^\n]*)?\n",
                  r"\1return (\2, *_BIG)\n", code)


@pytest.mark.e2e
@needs_cgroup
def test_outputs_as_large_as_the_wire_allows_fit_gradescopes_memory(
        tmp_path):
    # Two such submissions graded side by side beside the reference, in
    # Gradescope's 768 MB: the parent holds what they send and still
    # grades everyone; the reference keeps full marks.
    bloated = _bloated(REFERENCE.read_text())
    assert bloated.count("*_BIG)") >= 5
    done, out = _grade_in_cgroup(768, tmp_path, {
        "bloated_a": bloated, "bloated_b": bloated,
        "reference": REFERENCE.read_text()}, jobs=2)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    with open(out / "grades.csv", newline="") as handle:
        rows = {r["submission"]: r for r in csv.DictReader(handle)}
    rubric = load_rubric()
    assert float(rows["reference"]["score"]) == \
        rubric.max_score + rubric.max_bonus
    assert all(rows[n]["score"] != "" for n in ("bloated_a", "bloated_b"))


HOG = """
import sys, time
group = sys.argv[1]
def read(name):
    return int(open(f"{group}/{name}").read().split()[0])
limit_name, usage_name = ("memory.max", "memory.current") if \\
    __import__("os").path.exists(f"{group}/memory.max") else \\
    ("memory.limit_in_bytes", "memory.usage_in_bytes")
room = read(limit_name) - read(usage_name) - 20 * 2 ** 20
held = bytearray(max(0, room))
for at in range(0, len(held), 4096):
    held[at] = 1
print("holding", len(held) >> 20, flush=True)
time.sleep(600)
"""


def _oom_kills(group: Path) -> int:
    for name in ("memory.events", "memory.oom_control"):
        try:
            for line in (group / name).read_text().splitlines():
                if line.startswith("oom_kill "):
                    return int(line.split()[1])
        except OSError:
            continue
    return 0


@pytest.mark.e2e
@needs_cgroup
def test_container_running_out_mid_batch_scores_no_one(tmp_path):
    # The grader passes its checks in 640 MB; then another process of the
    # container takes all but 20 MB: workers are killed within their own
    # limits. No submission may lose a point
    # to it: full marks, no score, or the batch stopped (exit 2).
    parent, limit_file = GROUP
    group = parent / f"kit-faults-{uuid.uuid4().hex[:8]}"
    group.mkdir()
    folder = tmp_path / "subs"
    folder.mkdir()
    # Eight: the hog must be in place while workers still run (three were
    # graded in 2.4 s after the jail line, sometimes before it was).
    names = [f"r{i}" for i in range(1, 9)]
    for name in names:
        (folder / f"{name}.py").write_text(REFERENCE.read_text())
    out = tmp_path / "out"
    hog = None
    try:
        (group / limit_file).write_text(str(640 * MIB))
        enter = 'echo $$ > "$0/cgroup.procs" && exec "$@"'
        run = subprocess.Popen(
            ["sh", "-c", enter, str(group), sys.executable, "-m",
             "autograder", "grade", *sorted(map(str, folder.iterdir())),
             "--out", str(out), "--jobs", "1"],
            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        seen = ""
        while "jail:" not in seen:
            line = run.stderr.readline()
            if not line:
                break
            seen += line
        hog = subprocess.Popen(
            # (immune where the kernel lets root lower its score; else
            # the workers' own score of 1000 still makes them the victims)
            ["sh", "-c", 'echo $$ > "$0/cgroup.procs" && '
             '{ echo -1000 > /proc/self/oom_score_adj; } 2>/dev/null; '
             'exec "$@"',
             str(group), sys.executable, "-c", HOG, str(group)],
            stdout=subprocess.PIPE, text=True)
        hog.stdout.readline()
        stdout, stderr = run.communicate(timeout=900)
        kills = _oom_kills(group)
    finally:
        if hog is not None:
            hog.kill()
            hog.wait()
        _remove_group(group)
    text = seen + stdout + stderr
    assert kills, "nothing was OOM-killed: the test proves nothing\n" + text
    assert "Traceback" not in text
    assert "used too much memory" not in text
    # never killed in silence: graded, some not graded (exit 3), or stopped
    assert run.returncode in (0, 2, GRADER_ERROR_EXIT), text
    if run.returncode == 2:
        assert "out-of-memory killer" in stderr, text
        assert not (out / "grades.csv").exists()
        return
    rubric = load_rubric()
    failed = 0
    for name in names:
        results = json.loads((out / "submissions" / name /
                              "results.json").read_text())
        if not results["extra_data"].get("internal_error"):
            assert results["score"] == rubric.max_score + rubric.max_bonus
        else:
            failed += 1
            assert "out-of-memory killer" in json.dumps(results)
            assert "used too much memory" not in json.dumps(results)
    assert (run.returncode == GRADER_ERROR_EXIT) == bool(failed), text
