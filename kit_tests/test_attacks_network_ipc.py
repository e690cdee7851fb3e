"""No network and no shared memory from a worker, in every mode: hostile
submissions (``kit_tests/attacks_network.py``) graded in one batch beside
an honest one, locally as root and as a user, with and without namespaces,
and through Gradescope's harness with and without namespaces (its Docker
refuses them: Landlock, seccomp and a uid drop only).

The test listens on 127.0.0.1 and ::1 (TCP and UDP) and shares a SysV
segment, a SysV message queue and a POSIX shared-memory object holding a
canary, readable by anyone. In every mode no byte reaches a listener, no
canary is read and nothing is left behind. The controls: the same attacks
run without the jail send and read, and the honest submission beside them
keeps full marks.
"""
from __future__ import annotations

import ctypes
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from autograder.report.layout import submission_dir
from autograder.rubric import load_rubric
from kit_tests import attacks, attacks_network
from kit_tests.reference_source import FULL_REFERENCE
from kit_tests.test_attacks import as_test_user
from kit_tests.test_attacks_jail import MODES, _skip_reason, is_root

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[1]
_LIBC = ctypes.CDLL(None, use_errno=True)
_LIBC.shmat.restype = ctypes.c_void_p
IPC_CREAT, IPC_RMID, IPC_NOWAIT = 0o1000, 0, 0o4000


def _listeners() -> tuple[list[socket.socket], int, int]:
    """TCP and UDP sockets on 127.0.0.1 and ::1, one port for each kind."""
    socks, ports = [], {}
    for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
        four = socket.socket(socket.AF_INET, kind)
        four.bind(("127.0.0.1", 0))
        ports[kind] = four.getsockname()[1]
        socks.append(four)
        try:
            six = socket.socket(socket.AF_INET6, kind)
            six.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            six.bind(("::1", ports[kind]))
            socks.append(six)
        except OSError:
            pass   # no IPv6 here: the IPv4 listeners decide
    for sock in socks:
        if sock.type == socket.SOCK_STREAM:
            sock.listen(16)
        sock.setblocking(False)
    return socks, ports[socket.SOCK_STREAM], ports[socket.SOCK_DGRAM]


def _received(socks: list[socket.socket]) -> list[bytes]:
    """What reached the listeners (connections pending, datagrams)."""
    got = []
    for sock in socks:
        while True:
            try:
                if sock.type == socket.SOCK_STREAM:
                    conn, _ = sock.accept()
                    conn.settimeout(1)
                    got.append(b"connect:" + conn.recv(100))
                    conn.close()
                else:
                    got.append(sock.recv(100))
            except (BlockingIOError, socket.timeout):
                break
    return got


def _share(key: int, text: bytes) -> tuple[int, int]:
    """A SysV segment and message queue under ``key`` holding ``text``."""
    shm = _LIBC.shmget(ctypes.c_int(key), ctypes.c_size_t(4096),
                       IPC_CREAT | 0o666)
    assert shm >= 0, os.strerror(ctypes.get_errno())
    at = _LIBC.shmat(shm, None, 0)
    ctypes.memmove(at, text, len(text))
    _LIBC.shmdt(ctypes.c_void_p(at))
    queue = _LIBC.msgget(ctypes.c_int(key), IPC_CREAT | 0o666)
    assert queue >= 0, os.strerror(ctypes.get_errno())
    return shm, queue


def _put_message(queue: int, text: bytes) -> None:
    message = ctypes.c_long(1).value.to_bytes(8, "little") + text
    assert _LIBC.msgsnd(queue, message, ctypes.c_size_t(len(text)),
                        IPC_NOWAIT) == 0


@pytest.fixture(scope="module")
def canaries():
    """Listeners, shared memory and their canaries, unique to the run."""
    mark = secrets.token_hex(6)
    socks, tcp, udp = _listeners()
    key = 0x5E000000 + secrets.randbelow(0xFFFFFF)
    text = f"SHM-CANARY-{mark}".encode()
    shm, queue = _share(key, text)
    # One message per reader that may take it: the control, and each mode.
    for _ in range(16):
        _put_message(queue, text)
    posix = f"canary-{mark}"
    path = Path("/dev/shm") / posix
    path.write_bytes(text)
    path.chmod(0o644)
    yield {"mark": mark, "text": text.decode(), "socks": socks,
           "targets": {"tcp": tcp, "udp": udp, "sysv": key, "shm": posix}}
    for sock in socks:
        sock.close()
    _LIBC.shmctl(shm, IPC_RMID, None)
    _LIBC.msgctl(queue, IPC_RMID, None)
    path.unlink()
    _remove_left(mark)


def test_the_network_attack_is_real(canaries):
    found = attacks_network.run_unjailed("network", canaries["targets"],
                                         canaries["mark"])
    assert "AF_INET/SOCK_STREAM" in found["sent"], found
    assert "AF_INET/SOCK_DGRAM" in found["sent"], found
    got = _received(canaries["socks"])
    assert f"connect:LEAK-{canaries['mark']}".encode() in got, got


def test_the_shared_memory_attack_is_real(canaries):
    found = attacks_network.run_unjailed(
        "shared_memory", canaries["targets"], canaries["mark"])
    assert found["read"].count(canaries["text"]) == 3, found
    assert found["left"] == ["posix", "sysv"], found
    _remove_left(canaries["mark"])   # what the jailed runs must not leave


def _remove_left(mark: str) -> None:
    for left in Path("/dev/shm").glob(f"left-{mark}*"):
        left.unlink()
    left = _LIBC.shmget(ctypes.c_int(0x5EED0000 + int(mark, 16) % 0xFFFF),
                        ctypes.c_size_t(0), 0)
    if left >= 0:
        _LIBC.shmctl(left, IPC_RMID, None)


@pytest.fixture(scope="module", params=MODES)
def batch(request, canaries):
    """The attacks and an honest submission graded in one batch in the
    mode ``request.param``, and what reached the listeners meanwhile."""
    mode = request.param
    reason = _skip_reason(mode)
    if reason:
        pytest.skip(reason)
    _received(canaries["socks"])    # drop what a control sent
    base = Path(tempfile.mkdtemp(prefix="attack-net-"))
    base.chmod(0o755)
    subs, out = base / "submissions", base / "out"
    subs.mkdir()
    for name in attacks_network.ATTACKS:
        (subs / f"{name}.py").write_text(attacks_network.submission(
            name, canaries["targets"], canaries["mark"]))
    (subs / "honest.py").write_text(FULL_REFERENCE)
    env = {**os.environ, "PYTHONPATH": str(ROOT),
           "PYTHONDONTWRITEBYTECODE": "1"}
    if mode.endswith("no-namespaces"):
        env["AUTOGRADER_NO_NAMESPACES"] = "1"
    command = [sys.executable, "-m", "autograder", "grade", "--jobs", "2",
               "--timeout", "5", "--out", str(out),
               *sorted(str(p) for p in subs.iterdir())]
    if mode.startswith("user") and is_root:
        command = as_test_user(command, base)
    done = subprocess.run(command, env=env, capture_output=True, text=True,
                          timeout=900, cwd=ROOT)
    yield {"mode": mode, "done": done, "out": out,
           "received": _received(canaries["socks"])}
    shutil.rmtree(base, ignore_errors=True)


def _found(out: Path, name: str) -> dict:
    text = (submission_dir(out, name) / "feedback.md").read_text()
    found = attacks.report(text)
    assert found is not None, f"{name}: the attack did not report\n{text}"
    return found


def test_the_batch_completes_and_the_honest_keeps_full_marks(batch):
    assert batch["done"].returncode == 0, batch["done"].stderr[-3000:]
    rubric = load_rubric()
    results = json.loads((submission_dir(batch["out"], "honest") /
                          "results.json").read_text())
    assert results["score"] == rubric.max_score + rubric.max_bonus


def test_no_byte_leaves_the_worker(batch):
    found = _found(batch["out"], "network")
    assert found["sent"] == [], found
    assert batch["received"] == [], batch["received"]


def test_no_shared_memory_is_read_or_left(batch, canaries):
    found = _found(batch["out"], "shared_memory")
    assert found["read"] == [] and found["left"] == [], found
    assert not list(Path("/dev/shm").glob(f"left-{canaries['mark']}*"))


@pytest.mark.parametrize("namespaces", [True, False],
                         ids=["gradescope", "gradescope-no-namespaces"])
@pytest.mark.parametrize("attack", sorted(attacks_network.ATTACKS))
def test_the_gradescope_layout_holds(tmp_path, canaries, attack, namespaces):
    """Gradescope's harness (``gradescope`` in an /autograder layout, as
    root there): the same attacks, the same verdicts."""
    if not namespaces and _skip_reason("root-no-namespaces" if is_root
                                       else "user-no-namespaces"):
        pytest.skip(_skip_reason("root-no-namespaces"))
    _received(canaries["socks"])
    (tmp_path / "submission").mkdir()
    (tmp_path / "results").mkdir()
    (tmp_path / "submission" / "modeling_attention.py").write_text(
        attacks_network.submission(attack, canaries["targets"],
                                   canaries["mark"]))
    env = {**os.environ, "PYTHONPATH": str(ROOT),
           "AUTOGRADER_ROOT": str(tmp_path)}
    if not namespaces:
        env["AUTOGRADER_NO_NAMESPACES"] = "1"
    done = subprocess.run([sys.executable, "-m", "autograder", "gradescope"],
                          env=env, capture_output=True, text=True,
                          timeout=600, cwd=ROOT)
    text = (tmp_path / "results" / "results.json").read_text()
    tests = json.loads(text)["tests"]
    found = attacks.report("".join(t.get("output", "") for t in tests))
    assert found is not None, (done.stderr[-2000:], text[:3000])
    if attack == "network":
        assert found["sent"] == [], found
        assert _received(canaries["socks"]) == []
    else:
        assert found["read"] == [] and found["left"] == [], found
