"""Faults of the grader's own machine are never the student's: a full or
read-only temporary folder, or a submission that vanished mid-batch, is an
internal error with no score (and makes the batch prove itself with the
canary), while what the student handed in (a corrupt zip, a name the file
system refuses) stays the student's error.

The full and read-only folders are real tmpfs mounts (root only: skipped
otherwise, saying why); the end-to-end tests run ``python -m autograder
grade`` as staff do and are marked ``e2e``.
"""
from __future__ import annotations

import contextlib
import csv
import errno
import json
import os
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from autograder import batch
from autograder.config import load_config
from autograder.graded_folder import GRADER_ERROR_EXIT
from autograder.submission import locate
from autograder.submission.locate import resolve

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "solutions" / "transformer_lm" / "modeling_attention.py"


def _can_mount() -> str:
    """Why tmpfs mounts are impossible here ('' when they work)."""
    if os.geteuid() != 0:
        return "mounting a small tmpfs needs root"
    with tempfile.TemporaryDirectory() as folder:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k",
                               "tmpfs", folder], capture_output=True)
        if done.returncode:
            return f"mount -t tmpfs refused: {done.stderr.decode()[:200]}"
        subprocess.run(["umount", folder], check=True)
    return ""


NO_MOUNT = _can_mount()
needs_mount = pytest.mark.skipif(bool(NO_MOUNT), reason=NO_MOUNT)


@contextlib.contextmanager
def tmpfs(base: Path, *, full: bool = False, read_only: bool = False,
          size: str = "1m", slack: int = 0) -> Iterator[Path]:
    """A small tmpfs at ``base``/tmpfs, filled (``full``) up to ``slack``
    bytes or remounted read-only; unmounted afterwards."""
    point = base / "tmpfs"
    point.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs",
                    str(point)], check=True)
    try:
        point.chmod(0o1777)
        if full:
            with contextlib.suppress(OSError), \
                    open(point / "filler", "wb", buffering=0) as filler:
                while True:
                    filler.write(b"\0" * 4096)
            filler_size = (point / "filler").stat().st_size
            os.truncate(point / "filler", max(0, filler_size - slack))
        if read_only:
            subprocess.run(["mount", "-o", "remount,ro", str(point)],
                           check=True)
        yield point
    finally:
        subprocess.run(["umount", "-l", str(point)], check=False)


def _zipped(source: Path, archive: Path) -> Path:
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.write(source, "transformer_lm/modeling_attention.py")
    return archive


def _graders(sub) -> None:
    """The grader's failure: no student error, a cause, no score."""
    assert not sub.error and sub.source is None
    assert sub.internal_error.startswith("the grader could not ")
    assert sub.internal_error.endswith("no score was written")


# --------------------------------------------------------------------------
# Who is at fault, submission by submission

@needs_mount
def test_full_temporary_folder_is_the_graders(tmp_path):
    archive = _zipped(REFERENCE, tmp_path / "alice.zip")
    with tmpfs(tmp_path, full=True) as full:
        sub = resolve(archive, full)
    _graders(sub)
    assert "No space left on device (ENOSPC" in sub.internal_error


@needs_mount
def test_read_only_temporary_folder_is_the_graders(tmp_path):
    archive = _zipped(REFERENCE, tmp_path / "alice.zip")
    with tmpfs(tmp_path, read_only=True) as frozen:
        sub = resolve(archive, frozen)
    _graders(sub)
    assert "EROFS" in sub.internal_error


@needs_mount
def test_a_corrupt_zip_stays_the_students_on_a_full_disk(tmp_path):
    archive = _zipped(REFERENCE, tmp_path / "bob.zip")
    data = archive.read_bytes()
    archive.write_bytes(data[:len(data) // 2])   # cut in half by the student
    with tmpfs(tmp_path, full=True) as full:
        sub = resolve(archive, full)
    assert "not a readable zip" in sub.error and not sub.internal_error


def test_vanished_submission_is_the_graders(tmp_path):
    for name in ("carol.zip", "carol.py", "carol"):
        sub = resolve(tmp_path / name, tmp_path)
        _graders(sub)
        assert "is gone" in sub.internal_error


@pytest.mark.parametrize("code,graders", [
    (errno.EIO, True), (errno.EACCES, True), (errno.EDQUOT, True),
    (errno.ENOMEM, True), (errno.ENAMETOOLONG, False),
    (errno.EILSEQ, False)])
def test_who_is_at_fault_for_an_extraction_error(tmp_path, monkeypatch,
                                                 code, graders):
    # The file system's own errors (what root or a healthy disk cannot
    # show here) as extraction meets them.
    def failing(zf, info, dest):
        raise OSError(code, os.strerror(code), str(dest))
    monkeypatch.setattr(locate, "_copy_capped", failing)
    sub = resolve(_zipped(REFERENCE, tmp_path / "gina.zip"), tmp_path)
    if graders:
        _graders(sub)
        assert errno.errorcode[code] in sub.internal_error
    else:
        assert sub.error and not sub.internal_error


def test_unreadable_name_stays_the_students(tmp_path):
    # A name the file system refuses (too long) inside the zip: the
    # submission's, as before.
    archive = tmp_path / "dave.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("x" * 300 + "/modeling_attention.py", "print(1)\n")
    sub = resolve(archive, tmp_path)
    assert sub.error and not sub.internal_error


# --------------------------------------------------------------------------
# The batch: no score, and the canary before anything more is kept

@pytest.fixture(scope="module")
def config():
    return load_config(sets=("public",))


def _never(source, filename, probes):
    raise AssertionError("a submission the grader could not read was run")


def test_grader_fault_is_an_internal_error_and_proves_the_canary(
        tmp_path, config, monkeypatch):
    proofs = []
    monkeypatch.setattr(batch, "preflight",
                        lambda sandbox, **kw: proofs.append(sandbox) or [])
    gone = batch.Entry("erin", tmp_path / "erin.zip")
    graded = batch.grade_all([gone], config, _never, canary="sandbox",
                             out=tmp_path / "out")
    grade, = graded.grades
    assert grade.internal_error and "is gone" in grade.internal_error
    assert not grade.error and grade.tasks == []
    assert proofs == ["sandbox"]
    written = json.loads((tmp_path / "out" / "submissions" / "erin" /
                          "results.json").read_text())
    assert written["extra_data"]["internal_error"] is True


def test_grader_fault_with_a_failing_canary_stops_the_batch(
        tmp_path, config, monkeypatch):
    def failing(sandbox, **kw):
        raise batch.ConfigError("the grader cannot grade on this machine")
    monkeypatch.setattr(batch, "preflight", failing)
    gone = batch.Entry("frank", tmp_path / "frank")
    with pytest.raises(batch.ConfigError, match="cannot grade"):
        batch.grade_all([gone], config, _never, canary="sandbox")


def test_unwritable_temporary_folder_is_a_usage_error(
        tmp_path, config, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "missing"))
    with pytest.raises(batch.ConfigError,
                       match="could not create its temporary folder"):
        batch.grade_all([], config, _never)


# --------------------------------------------------------------------------
# End to end: `grade` as staff run it

def _grade(args: list[str], env: dict[str, str] | None = None,
           **popen) -> subprocess.Popen:
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.Popen([sys.executable, "-m", "autograder", "grade",
                             *args], cwd=ROOT, env=full_env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            **popen)


def _rows(out: Path) -> dict[str, dict[str, str]]:
    with open(out / "grades.csv", newline="") as handle:
        return {row["submission"]: row for row in csv.DictReader(handle)}


def _results(out: Path, name: str) -> dict:
    return json.loads((out / "submissions" / name /
                       "results.json").read_text())


@pytest.mark.e2e
@needs_mount
def test_batch_with_a_full_tmpdir_scores_no_one_by_the_fault(tmp_path):
    # The reference, zipped three times, graded with TMPDIR on a full
    # tmpfs: each either earns full marks or is the grader's error (no
    # score), and nothing is a student's zero. Two pages are left free:
    # on a folder with none Python's tempfile silently picks another.
    folder = tmp_path / "subs"
    folder.mkdir()
    names = ["r1", "r2", "r3"]
    for name in names:
        _zipped(REFERENCE, folder / f"{name}.zip")
    out = tmp_path / "out"
    with tmpfs(tmp_path, full=True, size="4m", slack=8192) as full:
        run = _grade([*(str(folder / f"{n}.zip") for n in names),
                      "--out", str(out), "--jobs", "1"],
                     env={"TMPDIR": str(full)})
        stdout, stderr = run.communicate(timeout=900)
    assert "Traceback" not in stderr + stdout
    if run.returncode == 2:   # the canary itself could not run: no score
        assert stderr.startswith("error: ") or "\nerror: " in stderr
        assert not (out / "grades.csv").exists()
        return
    assert run.returncode == GRADER_ERROR_EXIT, stderr
    assert "no score was written for them" in stderr
    rows = _rows(out)
    full_marks = float(rows["r1"]["max_score"])
    faults = 0
    for name in names:
        results = _results(out, name)
        if results["extra_data"].get("internal_error"):
            faults += 1
            assert rows[name]["score"] == "", rows[name]   # blank, not 0
            assert "No space left on device" in json.dumps(results)
            assert "no score was written" in json.dumps(results)
            assert "not a readable zip" not in json.dumps(results)
        else:
            assert results["score"] >= full_marks, results["output"]
    assert faults, "the full TMPDIR was never used: the test proves nothing"
    assert "GRADER ERROR" in stdout


@pytest.mark.e2e
def test_submission_deleted_mid_batch_is_the_graders(tmp_path):
    folder = tmp_path / "subs"
    (folder / "late").mkdir(parents=True)
    _zipped(REFERENCE, folder / "early.zip")
    (folder / "late" / "modeling_attention.py").write_text(
        REFERENCE.read_text())
    out = tmp_path / "out"
    run = _grade([str(folder / "early.zip"), str(folder / "late"),
                  "--out", str(out), "--jobs", "1"])
    # The jail line comes once the canary passed, before any submission
    # is read: "late" is deleted while "early" is being graded.
    deadline = time.monotonic() + 300
    seen = ""
    while "jail:" not in seen and time.monotonic() < deadline:
        line = run.stderr.readline()
        if not line:
            break
        seen += line
    assert "jail:" in seen, seen
    (folder / "late" / "modeling_attention.py").unlink()
    (folder / "late").rmdir()
    stdout, stderr = run.communicate(timeout=600)
    assert run.returncode == GRADER_ERROR_EXIT, seen + stderr
    assert "Traceback" not in seen + stderr + stdout
    assert _rows(out)["late"]["score"] == ""
    late = _results(out, "late")
    assert late["extra_data"]["internal_error"] is True
    assert "is gone" in late["output"]
    assert "no score was written" in late["output"]
    assert "GRADER ERROR" in stdout
    early = _results(out, "early")
    assert not early["extra_data"].get("internal_error")
    assert early["score"] >= float(_rows(out)["early"]["max_score"])
