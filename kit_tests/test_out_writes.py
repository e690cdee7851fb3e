"""Everything under a graded folder (OUT) is whole or absent, OUT is proved
writable before any grading, and a batch is one unit: the units of
autograder/files/atomic.py, report/outdir.py and batch_state.py, and
``--compare`` on damaged files. The faults themselves (kills, full disks,
unwritable folders) are kit_tests/faults/."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from autograder.files import atomic
from autograder.report import batch_state, outdir

ROOT = Path(__file__).resolve().parents[1]

# Modules that write files, and why never under OUT.
NOT_OUT = {
    "autograder/files/atomic.py": "the one writer of OUT",
    "autograder/report/outdir.py": "a probe file in OUT, removed at once",
    "autograder/submission/locate.py": "extracts a submission into the "
                                       "batch's private work folder",
    "autograder/sandbox/": "the jail's and the workers' own files, in "
                           "private temporary folders or /proc",
}
# csvsafe renders CSV text in memory; the atomic writer writes it.
IN_MEMORY = {("autograder/text/csvsafe.py", "writer = csv.writer(text)")}
WRITES = re.compile(
    r"\bopen\([^)]*[\"'][rb]*[wax+]"         # open(..., "w"), "ab", "r+b"
    r"|(?<!atomic)\.write_(text|bytes)\("    # Path.write_text/bytes
    r"|\bos\.(replace|rename|write)\(|\.replace\(path\)"
    r"|\bshutil\.(copy\w*|move)\(|\bjson\.dump\("
    r"|\bcsv\.(writer|DictWriter)\(|mkstemp|NamedTemporaryFile"
    r"|O_WRONLY|O_CREAT")


def test_every_write_under_out_goes_through_the_atomic_writer():
    """A module of the grader that writes a file another way could leave
    it half written under its real name (a kill, a full disk)."""
    offenders = []
    for path in sorted((ROOT / "autograder").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if any(rel == k or (k.endswith("/") and rel.startswith(k))
               for k in NOT_OUT):
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0].strip()
            if WRITES.search(code) and (rel, code) not in IN_MEMORY:
                offenders.append(f"{rel}:{number}: {code}")
    assert offenders == [], "\n".join(offenders)


def test_the_scan_catches_each_way_of_writing():
    for line in ['open(p, "w")', "open(p, 'ab')", 'open(p, "r+b")',
                 "p.write_text(x)", "p.write_bytes(b)", "os.replace(a, b)",
                 "tmp.replace(path)", "shutil.copyfile(a, b)",
                 "json.dump(d, f)", "csv.writer(f)", "tempfile.mkstemp()",
                 "os.open(p, os.O_WRONLY)"]:
        assert WRITES.search(line), line
    for line in ["atomic.write_text(p, x)", "open(p)", 'open(p, "rb")',
                 "s.replace('a', 'b')", "json.dumps(d)"]:
        assert not WRITES.search(line), line


# --------------------------------------------------------------------------
# The atomic writer

def test_a_failed_write_leaves_the_old_file_whole_and_no_temp(
        tmp_path, monkeypatch):
    path = tmp_path / "feedback.md"
    atomic.write_text(path, "old text\n")

    def refuse(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(atomic.OutputError) as caught:
        atomic.write_text(path, "new text " * 1000)
    assert str(caught.value) == f"{path}: No space left on device"
    assert path.read_text() == "old text\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["feedback.md"]


def test_written_files_get_the_modes_open_would_give(tmp_path):
    path = tmp_path / "sub" / "results.json"
    atomic.write_text(path, "{}\n", durable=True)
    assert path.read_text() == "{}\n"
    mask = os.umask(0)
    os.umask(mask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~mask


def test_an_unwritable_folder_is_an_output_error_naming_it(tmp_path):
    blocker = tmp_path / "submissions"
    blocker.write_text("a file where a folder should be")
    with pytest.raises(atomic.OutputError) as caught:
        atomic.write_text(blocker / "x" / "results.json", "{}")
    assert str(blocker) in str(caught.value)


def test_the_kill_hook_kills_mid_write_of_the_nth_file(tmp_path):
    """Deterministic: the second feedback.md is cut in half in its
    temporary file, the real name keeps the old text, then SIGKILL."""
    script = (
        "import sys\nfrom pathlib import Path\n"
        "from autograder.files import atomic\n"
        "out = Path(sys.argv[1])\n"
        "atomic.write_text(out / 'a' / 'feedback.md', 'first\\n')\n"
        "atomic.write_text(out / 'results.json', '{}')\n"
        "atomic.write_text(out / 'b' / 'feedback.md', 'x' * 1000)\n"
        "print('not killed')\n")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "feedback.md").write_text("old\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT),
           atomic.KILL_ENV: "feedback.md:2"}
    proc = subprocess.run([sys.executable, "-c", script, str(tmp_path)],
                          capture_output=True, text=True, env=env,
                          timeout=60)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert "not killed" not in proc.stdout
    assert (tmp_path / "a" / "feedback.md").read_text() == "first\n"
    assert (tmp_path / "b" / "feedback.md").read_text() == "old\n"
    temps = [p for p in (tmp_path / "b").iterdir() if atomic.is_temporary(p)]
    assert [p.stat().st_size for p in temps] == [500]


# --------------------------------------------------------------------------
# OUT before the canary

def test_out_that_is_a_file_is_refused(tmp_path):
    target = tmp_path / "grades"
    target.write_text("")
    with pytest.raises(outdir.OutDirError, match="not a folder"):
        outdir.check_out(target, 3)


def test_a_missing_out_is_created(tmp_path):
    outdir.check_out(tmp_path / "a" / "b", 3)
    assert (tmp_path / "a" / "b").is_dir()
    assert list((tmp_path / "a" / "b").iterdir()) == []   # probe removed


def test_out_without_room_is_refused_with_the_figures(tmp_path,
                                                      monkeypatch):
    real = os.statvfs(tmp_path)
    free_blocks = outdir.needed_bytes(40) // real.f_frsize - 1

    class Full:
        def __getattr__(self, name):
            return free_blocks if name == "f_bavail" else \
                getattr(real, name)

    monkeypatch.setattr(os, "statvfs", lambda path: Full())
    with pytest.raises(outdir.OutDirError) as caught:
        outdir.check_out(tmp_path, 40)
    message = str(caught.value)
    assert message.startswith(f"{tmp_path}: ")
    assert "40 submissions" in message and "free space" in message
    outdir.check_out(tmp_path, 39)   # the estimate is what decides


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes whatever the "
                    "mode bits say (kit_tests/faults/ uses chattr there)")
def test_an_unwritable_out_is_refused(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        with pytest.raises(outdir.OutDirError, match="cannot write there"):
            outdir.check_out(locked, 1)
    finally:
        locked.chmod(0o700)


# --------------------------------------------------------------------------
# The batch as one unit

ROW = {"name": "c01", "score": 17.0, "max_score": 16.0,
       "tasks": {"self_attention": 5.0}, "note": ""}


def _stamped(tmp_path: Path) -> tuple[batch_state.BatchState, Path]:
    state = batch_state.BatchState(tmp_path, "id1", "grader1")
    folder = tmp_path / "submissions" / "c01"
    atomic.write_text(folder / "results.json", '{"score": 17}\n')
    atomic.write_text(folder / "feedback.md", "all passed\n")
    state.stamp(folder, "input1", ROW, ["results.json", "feedback.md"])
    return state, folder


def test_a_whole_unchanged_submission_is_kept(tmp_path):
    state, folder = _stamped(tmp_path)
    kept = state.kept(folder, "input1")
    assert kept is not None and kept.row == ROW and kept.answers is None


@pytest.mark.parametrize("fault", ["input", "grader", "cut", "deleted",
                                   "stamp", "row"])
def test_anything_in_doubt_is_graded_again(tmp_path, fault):
    state, folder = _stamped(tmp_path)
    digest = "input2" if fault == "input" else "input1"
    if fault == "grader":
        state = batch_state.BatchState(tmp_path, "id2", "grader2")
    elif fault == "cut":
        (folder / "feedback.md").write_text("all pa")
    elif fault == "deleted":
        (folder / "results.json").unlink()
    elif fault == "stamp":
        stamp = folder / batch_state.STAMP
        stamp.write_text(stamp.read_text()[:40])
    elif fault == "row":
        stamp = folder / batch_state.STAMP
        data = json.loads(stamp.read_text())
        data["row"]["score"] = "17"
        stamp.write_text(json.dumps(data))
    assert state.kept(folder, digest) is None


def test_an_unreadable_input_is_never_kept(tmp_path):
    assert batch_state.input_digest(tmp_path / "gone.py") is None
    state, folder = _stamped(tmp_path)
    assert state.kept(folder, None) is None


def test_input_digest_sees_any_change_in_a_folder(tmp_path):
    sub = tmp_path / "s"
    (sub / "transformer_lm").mkdir(parents=True)
    code = sub / "transformer_lm" / "modeling_attention.py"
    code.write_text("x = 1\n")
    first = batch_state.input_digest(sub)
    assert first == batch_state.input_digest(sub)
    code.write_text("x = 2\n")
    assert batch_state.input_digest(sub) != first


def test_an_interrupted_batch_is_refused_naming_the_fix(tmp_path):
    batch_state.require_complete(tmp_path, "report")   # an older folder
    state = batch_state.begin(tmp_path, "grader1")
    with pytest.raises(batch_state.IncompleteError) as caught:
        batch_state.require_complete(tmp_path, "report")
    assert "interrupted" in str(caught.value)
    assert f"grade --out {tmp_path}" in str(caught.value)
    again = batch_state.begin(tmp_path, "grader1")
    assert again.resumed and again.id == state.id
    again.write(batch_state.COMPLETE)
    batch_state.require_complete(tmp_path, "report")
    assert batch_state.begin(tmp_path, "grader1").id != state.id
    (tmp_path / batch_state.MARKER).write_text('{"state": "compl')
    with pytest.raises(batch_state.IncompleteError, match="damaged"):
        batch_state.require_complete(tmp_path, "report")


def test_a_folder_graded_with_other_values_is_refused_naming_the_fixes(
        tmp_path):
    batch_state.begin(tmp_path, "grader1", "a" * 64).write(
        batch_state.COMPLETE)
    batch_state.begin(tmp_path, "grader2", "a" * 64)   # same values: fine
    with pytest.raises(batch_state.OtherValuesError) as caught:
        batch_state.begin(tmp_path, "grader2", "b" * 64)
    text = str(caught.value)
    assert "aaaaaaaaaaaa" in text and "bbbbbbbbbbbb" in text
    assert "--new-values" in text and "--out another folder" in text
    again = batch_state.begin(tmp_path, "grader2", "b" * 64,
                              new_values=True)
    again.write(batch_state.COMPLETE)
    batch_state.check_values(tmp_path, "b" * 64, new_values=False)
    (tmp_path / batch_state.MARKER).write_text('{"state": "complete"}')
    batch_state.check_values(tmp_path, "c" * 64, new_values=False)  # older


def test_grade_refuses_other_values_before_the_sandbox_starts(tmp_path):
    from autograder import graded_folder, homework
    from autograder.batch import ConfigError
    hw = homework.current()
    out = tmp_path / "out"
    out.mkdir()
    (out / batch_state.MARKER).write_text(json.dumps(
        {"format": batch_state.FORMAT, "id": "x", "state": "complete",
         "grader": "g", "values": "f" * 64}))
    sub = tmp_path / "sub.py"
    sub.write_text(hw.module.read_text())

    def no_sandbox():
        raise AssertionError("the sandbox started")

    with pytest.raises(ConfigError, match="other test values"):
        graded_folder.grade_paths([sub], no_sandbox, out=out, hw=hw,
                                  course=tmp_path / "no-course")
    assert json.loads((out / batch_state.MARKER).read_text())["values"] \
        == "f" * 64


# --------------------------------------------------------------------------
# --compare against damaged files

def _graded(folder: Path, scores: dict[str, float]) -> None:
    from autograder.text import csvsafe
    csvsafe.write_rows(folder / "grades.csv", [
        ["submission", "score", "max_score"],
        *([n, s, 16] for n, s in scores.items())])
    for name, score in scores.items():
        atomic.write_text(folder / "submissions" / name / "results.json",
                          json.dumps({"score": score, "tests": [
                              {"name": "1.1", "number": "1.1",
                               "score": score, "max_score": 16,
                               "status": "passed" if score else "failed",
                               "output": ""}]}))


@pytest.mark.parametrize("damage", ["cut", "deleted", "wrong types"])
def test_compare_says_unreadable_never_a_score_change(tmp_path, damage):
    from autograder.staff import regrade
    before, after = tmp_path / "before", tmp_path / "after"
    _graded(before, {"c01": 17, "c02": 17})
    _graded(after, {"c01": 17, "c02": 17})
    damaged = before / "submissions" / "c01" / "results.json"
    if damage == "cut":
        damaged.write_text(damaged.read_text()[:30])
    elif damage == "deleted":
        damaged.unlink()
    else:
        damaged.write_text('{"score": "seventeen", "tests": 3}')
    changes = regrade.compare(before, after)
    assert [(c.name, c.before, c.after) for c in changes] == \
        [("c01", None, 17)]
    assert changes[0].unreadable.startswith("previous results.json")
    summary = regrade.summary(changes, 2)
    assert "0 of 2 submissions changed, 1 unreadable" in summary
    assert "c01: unreadable -> 17 (not compared" in summary
    assert "+17" not in regrade.markdown(changes, before, after, 2)


def test_a_second_run_into_the_same_out_is_refused(tmp_path):
    """The lock is the kernel's: it goes with the process however it
    ends, so a killed run never leaves the folder locked."""
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time\nfrom pathlib import Path\n"
         "from autograder.report import batch_state\n"
         "batch_state.begin(Path(sys.argv[1]), 'g')\n"
         "print('locked', flush=True)\ntime.sleep(60)\n", str(tmp_path)],
        stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert holder.stdout.readline() == "locked\n"
        with pytest.raises(batch_state.IncompleteError,
                           match="another grade run"):
            batch_state.begin(tmp_path, "g")
    finally:
        holder.kill()
        holder.wait()
    assert batch_state.begin(tmp_path, "g").resumed
