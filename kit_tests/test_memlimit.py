"""Memory limits that fit the container: a worker gets at most what the
memory cgroup has left beside the parent (autograder/sandbox/memlimit.py),
and a worker the kernel's OOM killer takes within its own limit is the
grader's failure (no score), never the student's memory or a crash. The
end-to-end tests run ``check`` on the catalogue's memory hog in a 768 MB
memory cgroup (Gradescope's container), as root where one can be made;
they skip elsewhere, saying why."""
from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from autograder.sandbox import memlimit
from kit import variants
from kit_tests.worker_death import death

ROOT = Path(__file__).resolve().parents[1]
MIB = 1024 * 1024
CONTAINER_BYTES = 768 * 1000 * 1000   # Gradescope's "768 MB"


def _fake_proc(tmp_path: Path, cgroup: str, mountinfo: str) -> Path:
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "cgroup").write_text(cgroup)
    (proc / "mountinfo").write_text(mountinfo)
    return proc


def _v2_tree(tmp_path: Path) -> tuple[Path, Path]:
    mount = tmp_path / "cg2"
    own = mount / "job" / "grader"
    own.mkdir(parents=True)
    (mount / "job" / "memory.max").write_text(f"{768 * MIB}\n")
    (mount / "job" / "memory.current").write_text(f"{300 * MIB}\n")
    (mount / "job" / "memory.events").write_text("low 0\noom_kill 2\n")
    (own / "memory.max").write_text("max\n")
    (own / "memory.current").write_text(f"{200 * MIB}\n")
    (own / "memory.events").write_text("oom 1\noom_kill 1\n")
    proc = _fake_proc(tmp_path, "0::/job/grader\n",
                      f"41 31 0:38 / {mount} rw - cgroup2 cgroup2 rw\n")
    return proc, own


def test_v2_limit_of_an_ancestor_bounds_the_worker(tmp_path):
    proc, own = _v2_tree(tmp_path)
    folders = memlimit.cgroup_folders(proc)
    assert folders == [own, own.parent, own.parent.parent]
    assert memlimit.headroom_bytes(folders) == 468 * MIB
    assert memlimit.worker_allowance_mb(1024, folders) == \
        468 - memlimit.PARENT_RESERVE_MB
    assert memlimit.worker_allowance_mb(100, folders) == 100
    assert memlimit.oom_kills(folders) == 3


def test_v1_memory_controller_and_no_limit(tmp_path):
    mount = tmp_path / "memory"
    own = mount / "docker" / "abc"
    own.mkdir(parents=True)
    (own / "memory.limit_in_bytes").write_text(f"{512 * MIB}\n")
    (own / "memory.usage_in_bytes").write_text(f"{500 * MIB}\n")
    (own / "memory.oom_control").write_text(
        "oom_kill_disable 0\nunder_oom 0\noom_kill 4\n")
    (mount / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    proc = _fake_proc(
        tmp_path, "5:cpu:/\n4:memory:/docker/abc\n0::/\n",
        f"32 31 0:29 / {tmp_path}/cpu rw - cgroup cgroup rw,cpu\n"
        f"35 31 0:32 / {mount} rw - cgroup cgroup rw,memory\n")
    folders = memlimit.cgroup_folders(proc)
    assert folders[0] == own
    # 12 MiB left: the worker still gets the floor it needs to start.
    assert memlimit.worker_allowance_mb(1024, folders) == \
        memlimit.MIN_WORKER_MB
    assert memlimit.oom_kills(folders) == 4
    (own / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    assert memlimit.headroom_bytes(folders) is None
    assert memlimit.worker_allowance_mb(1024, folders) == 1024


def test_no_cgroup_leaves_the_request(tmp_path):
    assert memlimit.cgroup_folders(tmp_path / "nothing") == []
    assert memlimit.worker_allowance_mb(1024, []) == 1024
    assert memlimit.oom_kills([]) == 0


# --------------------------------------------------------------------------
# End to end, in a real 768 MB memory cgroup

def _make_cgroup() -> Path:
    """A fresh 768 MB memory cgroup (v2 under the root, else v1), or skip
    with the reason."""
    if os.geteuid() != 0:
        pytest.skip("making a memory cgroup needs root")
    name = f"autograder-test-{uuid.uuid4().hex[:8]}"
    v2 = Path("/sys/fs/cgroup")
    candidates = []
    if "memory" in _read(v2 / "cgroup.subtree_control").split():
        candidates.append((v2 / name, "memory.max", ["memory.swap.max"]))
    candidates.append((v2 / "memory" / name, "memory.limit_in_bytes",
                       ["memory.memsw.limit_in_bytes"]))
    for folder, limit, swap in candidates:
        try:
            folder.mkdir()
        except OSError:
            continue
        try:
            (folder / limit).write_text(str(CONTAINER_BYTES))
            for name in swap:
                if (folder / name).exists():
                    (folder / name).write_text(
                        "0" if name.endswith("swap.max")
                        else str(CONTAINER_BYTES))
        except OSError:
            _remove(folder)
            continue
        return folder
    pytest.skip("no writable memory cgroup here (neither a v2 root with the "
                "memory controller nor a v1 memory hierarchy)")


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _remove(folder: Path) -> None:
    for _ in range(50):   # its last processes may still be exiting
        try:
            folder.rmdir()
            return
        except OSError:
            time.sleep(0.1)


@pytest.fixture(scope="module")
def container():
    folder = _make_cgroup()
    yield folder
    _remove(folder)


def _check_in(container: Path, source: Path, prelude: str = "",
              status: int = 0) -> str:
    code = (f"{prelude}\nimport sys\nfrom autograder.cli import main\n"
            f"sys.exit(main(['check', {str(source)!r}]))")
    join = f"echo $$ > {container}/cgroup.procs && exec \"$@\""
    run = subprocess.run(["sh", "-c", join, "sh", sys.executable, "-c",
                          code], capture_output=True, text=True,
                         timeout=600, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert run.returncode == status, run.stderr[-2000:]
    return run.stdout + run.stderr


def _hog(tmp_path: Path) -> Path:
    path = tmp_path / "modeling_attention.py"
    path.write_text(variants.find("hostile/memory_hog").source())
    return path


def _item(text: str, item: str) -> str:
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if f"] {item} " in line)
    end = next((i for i in range(start + 1, len(lines))
                if lines[i].lstrip().startswith("[")), len(lines))
    return "\n".join(lines[start:end])


@pytest.mark.e2e   # the check CLI in its own process, in a cgroup
def test_a_memory_hog_in_a_768_mb_container_is_told_memory(container,
                                                           tmp_path):
    text = _check_in(container, _hog(tmp_path))
    item = _item(text, "1.2")
    assert "[FAIL]" in item and "used too much memory" in item, text
    assert "exited" not in text and "crash" not in item.lower()
    assert "] 2.1 " in text and "[ok  ] 2.1 " in text   # the rest graded


@pytest.mark.e2e   # the check CLI in its own process, in a cgroup
def test_a_worker_the_oom_killer_takes_is_the_graders_failure(container,
                                                              tmp_path):
    # As before the limit fitted the container: the worker may outgrow the
    # container within its own limit, so the kernel's OOM killer acts
    # first. The limit was the grader's to fit: no score, never the
    # student's "used too much memory" nor a crash.
    before = memlimit.oom_kills([container])
    text = _check_in(container, _hog(tmp_path),
                     "from autograder.sandbox import memlimit\n"
                     "memlimit.PARENT_RESERVE_MB = -4096", status=2)
    assert memlimit.oom_kills([container]) > before, "no OOM kill happened"
    # check (the student's preview): no preview, the cause, no staff remedy
    assert "out-of-memory killer" in text and "no score was written" in text
    assert "not your code's fault" in text and "free memory" in text
    assert "--jobs" not in text
    assert "used too much memory" not in text
    assert "exited" not in text


def test_another_workers_oom_kill_is_not_this_ones_memory(tmp_path,
                                                          monkeypatch):
    """The cgroup's OOM count with --jobs: the count is the
    whole container's, so while one submission's worker is OOM-killed,
    another that exits or segfaults is a crash, not "use less memory"
    (and the OOM-killed one is the grader's failure, no score)."""
    import signal
    from autograder.sandbox.protocol import CRASH, ENVIRONMENT, MEMORY
    exited = death(tmp_path, monkeypatch, 3)
    assert exited.status == CRASH and "exited (code 3)" in exited.message
    segv = death(tmp_path, monkeypatch, -signal.SIGSEGV)
    assert segv.status == CRASH and "SIGSEGV" in segv.message
    killed = death(tmp_path, monkeypatch, -signal.SIGKILL)
    assert killed.status == ENVIRONMENT and "out-of-memory killer" in \
        killed.message
    quiet = death(tmp_path, monkeypatch, -signal.SIGKILL, oom_after=0)
    assert quiet.status == MEMORY and "out-of-memory killer" not in \
        quiet.message


def test_jobs_share_the_containers_memory(monkeypatch):
    """The allowance (what the cgroup has left) with --jobs:
    each of the workers that may run at once gets its part, so that
    together they fit beside the parent; otherwise the kernel's OOM
    killer picks the largest process, perhaps the parent or another
    submission's worker."""
    import shutil
    from types import SimpleNamespace

    from autograder.sandbox.pool import Sandbox
    room = 1000 - memlimit.PARENT_RESERVE_MB
    monkeypatch.setattr(memlimit, "headroom_bytes",
                        lambda folders=None: 1000 * 2 ** 20)
    assert memlimit.worker_allowance_mb(1024) == room
    assert memlimit.worker_allowance_mb(1024, share=4) == \
        max(memlimit.MIN_WORKER_MB, room // 4)
    fake = SimpleNamespace(user=None, memory_mb=1024, output_limit=1000,
                           readable=[], namespaces=False, landlock=False,
                           jobs=4)
    settings = Sandbox._settings(fake, [], None, None, None)
    shutil.rmtree(settings.workdir)
    assert settings.memory_mb == room // 4
