"""Faults of the output folder and of the grading process itself: kills
mid-write of each kind of output and at seeded random moments, a full or
unwritable OUT, an interrupted regrade, a damaged ``--compare`` folder.
Each is judged against a clean run of the same three submissions: every
output whole or absent, the grader's failure told as its own (exit 2, no
traceback), and a rerun of the same command ending with the clean run's
grades."""
from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autograder import homework
from autograder.report import batch_state
from kit_tests.faults import harness as h

pytestmark = pytest.mark.e2e
SEED = int(os.environ.get("FAULT_SEED", "7"))   # the random kills' seed


def _stamped(out: Path) -> int:
    """How many submissions the interrupted batch in ``out`` finished (a
    stamp by its grader)."""
    marker = batch_state.load(out / batch_state.MARKER)
    grader = marker.get("grader") if isinstance(marker, dict) else None
    return sum(isinstance(stamp, dict) and stamp.get("grader") == grader
               for stamp in (batch_state.load(folder / batch_state.STAMP)
                             for folder in (out / "submissions").glob("*")))


def _resume_and_judge(out: Path, subs: Path, clean: h.Clean,
                      *extra: str) -> subprocess.CompletedProcess:
    """Rerun the same command: it keeps what was whole and ends with the
    clean run's grades."""
    kept = _stamped(out)
    proc = h.grade(out, subs, *extra)
    assert proc.returncode == 0, proc.stderr[-2000:]
    h.assert_no_traceback(proc)
    if kept:
        assert f"resumed: {kept} of 3 submissions kept" in proc.stdout
    else:
        assert "resumed:" not in proc.stdout
    h.assert_same_grades(out, clean)
    return proc


# --------------------------------------------------------------------------
# Kills

# One folder killed again and again, mid-write of each kind of output, each
# rerun resuming what the last one left (grades.csv, then the complete
# marker, then the class report: by then every submission is kept).
KILL_CHAIN = ("feedback.md:1", ".graded.json:2", "source.py:1",
              "results.json:1", "grades.csv:1", ".batch.json:2")


def test_killed_mid_write_of_each_output_then_resumed(tmp_path, subs,
                                                      clean):
    out = tmp_path / "out"
    for spec in KILL_CHAIN:
        if spec.startswith("results.json") and _stamped(out) == 3:
            continue   # nothing left to grade: no results.json written
        h.killed_at(out, subs, spec)
        h.assert_whole_or_absent(out, clean)
        h.assert_stopped(h.run_here("report", str(out)), "interrupted",
                         "Rerun the same")
        assert not (out / "report.html").exists()
    # the batch is whole once grades.csv and its marker are: the class
    # report, killed, is absent, and `report` writes it
    assert _stamped(out) == 3
    h.killed_at(out, subs, "report.html:1")
    h.assert_same_grades(out, clean)
    # grades.csv of kept rows only: each still names its path as given
    assert [row[-1] for row in h.csv_rows(out)] == [
        "path", *sorted(str(p) for p in subs.iterdir())]
    assert not (out / "report.html").exists()
    again = h.run_here("report", str(out))
    assert again.returncode == 0, again.stderr
    h.assert_whole_or_absent(out, clean)
    assert (out / "report.html").is_file()


def test_killed_at_seeded_random_points_then_resumed(tmp_path, subs,
                                                     clean):
    """A kill at a random write, then one at a random moment of the
    rerun; the third run ends with the clean run's grades."""
    rng = random.Random(SEED)
    writes = sum(1 for p in clean.out.rglob("*") if p.is_file())
    nth = rng.randint(1, writes)
    out = tmp_path / "out"
    proc = h.grade(out, subs, env={h.KILL_ENV: f"*:{nth}"})
    assert proc.returncode in (h.KILLED, 0), (SEED, nth, proc.stderr)
    h.assert_whole_or_absent(out, clean)
    delay = rng.uniform(0.0, 4.0)
    proc = subprocess.Popen(
        [sys.executable, "-m", "autograder", "grade", "--out", str(out),
         "--jobs", "2", *sorted(str(p) for p in subs.iterdir())],
        cwd=h.ROOT, env={**os.environ, "PYTHONPATH": str(h.ROOT)},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _wait_for_batch(out, proc)
    try:   # from the moment the batch began
        proc.wait(timeout=delay)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    h.assert_whole_or_absent(out, clean)
    _resume_and_judge(out, subs, clean)


def _wait_for_batch(out: Path, proc: subprocess.Popen) -> None:
    """Until ``proc`` (grading into ``out``) has begun its batch: the
    marker is written just before the first submission."""
    deadline = time.monotonic() + 900   # a loaded machine is slow
    marker = out / batch_state.MARKER
    before = marker.stat().st_mtime_ns if marker.exists() else None
    while not marker.exists() or marker.stat().st_mtime_ns == before:
        if proc.poll() is not None:
            _, err = proc.communicate()
            raise AssertionError(f"the grader ended (exit {proc.returncode})"
                                 f" before its batch began: {err}")
        assert time.monotonic() < deadline, "no batch began in 900 s"
        time.sleep(0.02)


# --------------------------------------------------------------------------
# An output folder that cannot hold the batch

def test_out_that_is_a_file_stops_before_grading(tmp_path, subs):
    out = tmp_path / "grades"
    out.write_text("not a folder\n")
    proc = h.grade(out, subs)
    h.assert_stopped(proc, f"error: {out}: not a folder")
    assert out.read_text() == "not a folder\n"


def test_unwritable_out_stops_before_grading(tmp_path, subs):
    out = tmp_path / "grades"
    out.mkdir()
    if h.is_root():   # root ignores mode bits: the immutable attribute
        if shutil.which("chattr") is None or subprocess.run(
                ["chattr", "+i", str(out)], capture_output=True).returncode:
            pytest.skip("root, and chattr +i is not available here: "
                        "nothing makes a folder unwritable for root")
    else:
        out.chmod(0o500)
    try:
        proc = h.run_here("grade", "--out", str(out), str(subs))
    finally:
        if h.is_root():
            subprocess.run(["chattr", "-i", str(out)], check=True)
        out.chmod(0o700)
    h.assert_stopped(proc, f"error: {out}: cannot write there")
    assert list(out.iterdir()) == []


def test_read_only_out_stops_before_grading(tmpfs, subs):
    out = tmpfs("1m", "ro") / "grades"
    proc = h.run_here("grade", "--out", str(out), str(subs))
    h.assert_stopped(proc, f"error: {out}: cannot create it",
                     "Read-only file system")


def test_full_out_stops_before_grading(tmpfs, subs):
    out = tmpfs("512k") / "grades"
    proc = h.run_here("grade", "--out", str(out),
                      *sorted(str(p) for p in subs.iterdir()))
    h.assert_stopped(proc, f"error: {out}: ", "MB free",
                     "the batch needs about", "3 submissions")
    assert [p.name for p in out.iterdir()] == []


def test_disk_full_mid_batch_stops_at_once_then_resumes(
        tmpfs, tmp_path, subs, clean):
    disk = tmpfs("8m")
    out = disk / "grades"
    proc = subprocess.Popen(
        [sys.executable, "-m", "autograder", "grade", "--out", str(out),
         "--jobs", "2", *sorted(str(p) for p in subs.iterdir())],
        cwd=h.ROOT, env={**os.environ, "PYTHONPATH": str(h.ROOT)},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for_batch(out, proc)
    filler = disk / "filler"
    try:
        with open(filler, "wb") as handle:
            while True:
                handle.write(b"\0" * (1 << 16))
                handle.flush()
    except OSError:
        pass   # full
    stdout, stderr = proc.communicate(timeout=900)
    done = subprocess.CompletedProcess(proc.args, proc.returncode, stdout,
                                       stderr)
    h.assert_stopped(done, "No space left on device", "rerun the same")
    assert "graded into" not in stdout
    h.assert_whole_or_absent(out, clean)
    filler.unlink()
    _resume_and_judge(out, subs, clean)


# --------------------------------------------------------------------------
# An interrupted regrade; a damaged folder to compare with

@pytest.fixture(scope="module")
def regraded(tmp_path_factory, subs, clean):
    """A rubric giving 1.2 one point more; its clean run, compared with a
    copy of the first clean run whose reference results.json is cut in
    half and whose skeleton results.json is gone."""
    from kit.generate.rubric_change import change_point, item_points
    base = tmp_path_factory.mktemp("regrade")
    text = homework.current().rubric.read_text()
    rubric = base / "rubric.toml"
    rubric.write_text(change_point(text, "1.2", item_points(text, "1.2") + 1))
    damaged = h.copy_out(clean.out, base / "damaged")
    cut = damaged / "submissions" / "reference" / "results.json"
    cut.write_text(cut.read_text()[:len(cut.read_text()) // 2])
    (damaged / "submissions" / "skeleton" / "results.json").unlink()
    compared = h.clean_run(base / "clean", subs, "--rubric", str(rubric),
                           "--compare", str(damaged))
    return rubric, compared


def test_damaged_compare_folder_says_unreadable(regraded):
    _, compared = regraded
    lines = compared.stdout.splitlines()
    reference = next(line for line in lines
                     if line.strip().startswith("reference:"))
    assert "unreadable -> 18 (not compared: previous results.json" in \
        reference
    skeleton = next(line for line in lines
                    if line.strip().startswith("skeleton:"))
    assert "unreadable -> 0" in skeleton
    assert "2 unreadable" in compared.stdout
    page = (compared.out / "regrade.md").read_text()
    assert "+18" not in page and "0 -> 18" not in page


def test_interrupted_regrade_is_refused_then_resumes(tmp_path, subs, clean,
                                                     regraded):
    rubric, compared = regraded
    out = h.copy_out(clean.out, tmp_path / "out")
    h.killed_at(out, subs, "results.json:2", "--rubric", str(rubric))
    for args in (["report", str(out)], ["similarity", str(out)],
                 ["grade", "--out", str(tmp_path / "new"), "--compare",
                  str(out), str(subs / "reference.py")]):
        h.assert_stopped(h.run_here(*args), "interrupted", "Rerun the same")
    assert not (tmp_path / "new").exists()
    _resume_and_judge(out, subs, compared, "--rubric", str(rubric))
