"""The attack suite: hostile submissions (kit_tests/attacks.py) graded in one
batch beside two honest ones, through the real command line, in every mode
this machine allows:

- ``root``: the grader runs as root (a TA's container, Gradescope);
- ``user``: an unprivileged grader (a TA's laptop). As root the suite
  creates a test user and runs the grader as that user;
- ``no-namespaces``: namespaces refused (Docker's default seccomp profile,
  as on Gradescope): Landlock, the privilege drop and the subreaper only.

In every mode no attack reads a staff file or another submission, earns a
point it did not compute, leaves a process or a file behind, reads the
grader's environment back, tampers with the grader, or changes another
submission's grade. The honest submissions (the reference) keep full marks.
"""
from __future__ import annotations

import hashlib
import json
import os
import pwd
import secrets
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from autograder.report.layout import submission_dir
from autograder.sandbox.jail import landlock_abi, readable_by
from autograder.rubric import load_rubric
from kit_tests import attacks
from kit_tests.jail_modes import refusal_without_namespaces
from kit_tests.reference_source import FULL_REFERENCE

ROOT = Path(__file__).resolve().parents[1]
TEST_USER = "autograder-attack-test"
SECRET = "hunter2-" + secrets.token_hex(4)
is_root = os.geteuid() == 0


def _grader_files() -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted((ROOT / "autograder").rglob("*.py"))}


def _test_user() -> tuple[int, int]:
    try:
        entry = pwd.getpwnam(TEST_USER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home",
                        "--shell", "/usr/sbin/nologin", TEST_USER],
                       check=True)
        entry = pwd.getpwnam(TEST_USER)
    return entry.pw_uid, entry.pw_gid


def _as_user(command: list[str], uid: int, gid: int,
             needed: list[str]) -> list[str]:
    """``command`` run as uid/gid. Where a folder above a needed path is
    closed to that user (a root-only home holding the interpreter or the
    checkout), run it in a private mount namespace in which that folder is
    an open tmpfs holding binds of the needed paths only."""
    setpriv = attacks.as_uid(uid, gid, command)
    blocked: dict[str, list[str]] = {}
    for path in needed:
        stop = readable_by(uid, gid, path)
        if stop and stop != path:
            blocked.setdefault(stop, []).append(path)
    if not blocked:
        return setpriv
    lines = ["set -e"]
    for n, (folder, paths) in enumerate(blocked.items()):
        for m, path in enumerate(paths):
            stage = f"/run/attack-stage-{n}-{m}"
            lines += [f"mkdir -p {stage}",
                      f"mount --bind {shlex.quote(path)} {stage}"]
        lines.append(f"mount -t tmpfs -o mode=755 tmpfs "
                     f"{shlex.quote(folder)}")
        for m, path in enumerate(paths):
            stage = f"/run/attack-stage-{n}-{m}"
            lines += [f"mkdir -p {shlex.quote(path)}",
                      f"mount --move {stage} {shlex.quote(path)}"]
    lines.append("exec " + shlex.join(setpriv))
    return ["unshare", "--mount", "--propagation", "private", "--",
            "sh", "-c", "\n".join(lines)]


def as_test_user(command: list[str], base: Path) -> list[str]:
    """``command`` run as the test user, who is given ``base`` (the run's
    own folder, recursively); skips, saying why, where the checkout is
    closed to other users (a root-only ``/root/kit``): a normal user
    cannot run the grader from it, and the root mode runs there."""
    uid, gid = _test_user()
    closed = attacks.closed_to(uid, gid, str(ROOT))
    if closed:
        pytest.skip(f"the checkout is closed to other users ({closed} "
                    f"has mode {os.stat(closed).st_mode & 0o777:o}): "
                    f"a normal user cannot run the grader from it; "
                    f"grade as root there (the root mode runs)")
    for path in [base, *base.rglob("*")]:
        os.chown(path, uid, gid)
    return _as_user(command, uid, gid, [
        os.path.realpath(sys.base_prefix), os.path.realpath(sys.prefix),
        str(ROOT), str(base)])


def _modes() -> list:
    modes = [pytest.param("root", marks=pytest.mark.skipif(
        not is_root, reason="the grader is not running as root"))]
    modes.append("user")
    modes.append(pytest.param("no-namespaces", marks=pytest.mark.skipif(
        landlock_abi() < 6, reason="without namespaces the jail needs "
        "Landlock ABI 6 (Linux 6.12), which this kernel lacks")))
    return modes


@pytest.fixture(scope="module", params=_modes())
def batch(request):
    """Grade every attack and two honest submissions in one batch."""
    mode = request.param
    # Asked when the mode runs, not at collection: the question builds a
    # sandbox (seconds every test process would pay, this file run or not).
    refusal = (refusal_without_namespaces() if mode == "no-namespaces"
               else None)
    if refusal is not None:
        pytest.skip(f"without namespaces the grader refuses to grade here, "
                    f"rightly ({refusal})")
    base = Path(tempfile.mkdtemp(prefix="attack-suite-"))
    base.chmod(0o755)
    subs, out = base / "submissions", base / "out"
    subs.mkdir()
    mark = f"{900 + secrets.randbelow(99)}.{secrets.randbelow(10**6)}"
    targets = [str(ROOT / "solutions"), str(ROOT / "test_values"),
               str(ROOT / ".git"), str(subs), str(out)]
    (subs / "victim.py").write_text(attacks.VICTIM_MARKER + FULL_REFERENCE)
    for name in attacks.ATTACKS:
        (subs / f"{name}.py").write_text(
            attacks.submission(name, targets, mark))
    (subs / "zz_victim_late.py").write_text(attacks.VICTIM_MARKER +
                                            FULL_REFERENCE)
    before = _grader_files()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE":
           "1", "AUTOGRADER_ATTACK_SECRET": SECRET}
    command = [sys.executable, "-m", "autograder", "grade", "--jobs", "2",
               "--timeout", "20", "--out", str(out),
               *sorted(str(p) for p in subs.iterdir())]
    if mode == "no-namespaces":
        env["AUTOGRADER_NO_NAMESPACES"] = "1"
    if mode == "user" and is_root:
        command = as_test_user(command, base)
    done = subprocess.run(command, env=env, capture_output=True, text=True,
                          timeout=900, cwd=ROOT)
    leftovers = " ".join(map(str, attacks.processes_matching(
        f"sleep {mark}")))
    files = [str(p) for folder in ("/tmp", "/var/tmp", "/dev/shm")
             if os.path.isdir(folder) for p in Path(folder).glob(f"*{mark}*")]
    yield {"mode": mode, "done": done, "out": out, "mark": mark,
           "leftovers": leftovers, "files": files, "before": before,
           "targets": targets}
    attacks.kill_matching(f"sleep {mark}")
    for path in files:
        os.remove(path)
    shutil.rmtree(base, ignore_errors=True)


def _results(batch, name: str) -> dict:
    return json.loads((submission_dir(batch["out"], name) /
                       "results.json").read_text())


def _found(batch, name: str) -> dict:
    text = (submission_dir(batch["out"], name) / "feedback.md").read_text()
    found = attacks.report(text)
    assert found is not None, f"{name}: the attack did not report\n{text}"
    return found


def _points(batch, name: str, item: str) -> float:
    return next(t["score"] for t in _results(batch, name)["tests"]
                if f"/ {item} " in t["name"])


def test_batch_completes(batch):
    done = batch["done"]
    assert done.returncode == 0, done.stderr[-3000:]
    assert "jail:" in done.stderr


def test_honest_submissions_keep_full_marks(batch):
    rubric = load_rubric()
    full = rubric.max_score + rubric.max_bonus
    for name in ("victim", "zz_victim_late"):
        assert _results(batch, name)["score"] == full, name


def test_no_staff_file_is_read(batch):
    read = _found(batch, "read_staff")["read"]
    assert read == [], read


def test_no_point_without_computing(batch):
    assert _points(batch, "replay_values", "1.2") == 0


def test_no_other_submission_is_seen(batch):
    found = _found(batch, "spy_on_others")
    assert found["hits"] == [] and "victim" not in found["argv"], found


def test_no_process_outlives_its_submission(batch):
    # Each attack ran: it started its processes, or the jail refused the
    # first (seccomp: no new process in the worker); none is left after.
    for name in ("leave_process", "leave_runners"):
        found = _found(batch, name)
        assert found.get("spawned") or found.get("refused"), (name, found)
    assert batch["leftovers"] == ""


def test_no_file_is_left_in_shared_folders(batch):
    assert batch["files"] == []
    found = _found(batch, "leave_and_find_note")
    assert found["left"] == [] and found["found"] == [], found


def test_filling_temporary_folders_hurts_nobody(batch):
    text = (submission_dir(batch["out"], "fill_tmp") /
            "feedback.md").read_text()
    if attacks.report(text) is None:
        # Without a mount namespace (no tmpfs to fill up) the keeper stops
        # a submission whose files outgrow the same bound; nothing was
        # written in a shared folder (test_no_file_is_left_...).
        assert "files grew past 64 MiB" in text, text
        assert batch["files"] == []
        return
    wrote = _found(batch, "fill_tmp")["wrote_mb"]
    # Its own scratch space is bounded; shared folders are not writable.
    assert all(wrote[f] == 0 for f in ("/tmp", "/var/tmp", "/dev/shm"))
    assert wrote["."] <= 64


def test_no_grader_secret_in_memory(batch):
    found = _found(batch, "memory_secrets")
    # (it read its arguments and environment, up to the stack's end: the
    # test proves something)
    assert found == {"secret": False, "victim": False, "read": True}
    for name in attacks.ATTACKS:
        assert SECRET not in (submission_dir(batch["out"], name) /
                              "feedback.md"
                              ).read_text()


def test_grader_cannot_be_tampered_with(batch):
    assert _found(batch, "tamper_grader")["changed"] == []
    assert _grader_files() == batch["before"]


def test_kill_attempts_hurt_nobody(batch):
    # The batch completed (above) and the later honest submission scored
    # full marks: nothing outside its own jail was killed.
    assert "killed" in _found(batch, "kill_everyone")


def test_forged_frames_are_rejected(batch):
    # The forgery is rejected and the rest graded normally: 1.1 keeps its
    # point and the total is 1.1 plus the deductions: grader_access, which
    # quotes only the harness's own ``import ctypes`` (line 1, the rules'
    # list since the grader_access deduction), nothing the forgery wrote,
    # and the static rules that code the grader cannot read counts as
    # failing.
    results = _results(batch, "forge_frames")
    item = next(t for t in results["tests"] if "/ 1.1 " in t["name"])
    assert item["score"] == item["max_score"] > 0
    deductions = [t for t in results["tests"]
                  if t["name"].startswith("Deduction")]
    assert any("reaches into the grader" in t["name"] for t in deductions)
    assert results["score"] == _points(batch, "forge_frames", "1.1") + \
        sum(t["score"] for t in deductions)
    feedback = (submission_dir(batch["out"], "forge_frames") /
                "feedback.md").read_text()
    quoted = [line.strip() for line in feedback.splitlines()
              if line.strip().startswith("- line ")]
    assert set(quoted) == {"- line 1: `import ctypes`"}, quoted
