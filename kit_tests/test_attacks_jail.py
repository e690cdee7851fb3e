"""The jail's layers under attack: hostile submissions
(kit_tests/attacks_jail.py) graded in one batch through the real command
line, beside an honest one and a class that loops forever, in every mode
this machine allows, with and without namespaces, as root and as a user:

- ``root`` / ``user``: the grader as root (a TA's container, Gradescope's
  layout) or as an unprivileged user (a TA's laptop; as root the suite
  runs the grader as a test user);
- ``root-no-namespaces`` / ``user-no-namespaces``: the same with
  ``AUTOGRADER_NO_NAMESPACES=1`` (a container where namespaces are off).

The test plants canaries first: named and abstract unix sockets listening
(beside the fork server's own address, which the attack finds in its own
memory), a key in the grader's session and user keyrings, a Kerberos cache
in /tmp. In every mode no attack connects to any socket or reads any key or
credential, and what the grader's own worker prints never reaches a
student. The attacks are shown to be real: run without the jail, they
connect and read the key.
"""
from __future__ import annotations

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

from autograder.sandbox.jail import landlock_abi
from autograder.report.layout import submission_dir
from autograder.rubric import load_rubric
from kit_tests import attacks, attacks_jail
from kit_tests.jail_modes import refusal_without_namespaces
from kit_tests.reference_source import FULL_REFERENCE
from kit_tests.test_attacks import as_test_user

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[1]
PLANTER = Path(__file__).resolve().parent / "keyring_canary.py"
is_root = os.geteuid() == 0
MODES = ("root", "user", "root-no-namespaces", "user-no-namespaces")
# A class that never returns: the supervisor kills it at its time limit.
LOOPING = FULL_REFERENCE.replace(
    "        q, k, v = self.q(x), self.k(x), self.v(x)  # [bs, seq, hidden]\n",
    "        while True:\n            pass\n", 1)
LEAKS = ("keeper_main", "worker_jail", "Traceback", "Errno 22",
         "autograder/", "Process autograder-worker")


def _skip_reason(mode: str) -> str | None:
    if mode.startswith("root") and not is_root:
        return "the grader is not running as root"
    if mode.endswith("no-namespaces"):
        if landlock_abi() < 6:
            return ("without namespaces the jail needs Landlock ABI 6 "
                    "(Linux 6.12), which this kernel lacks")
        refusal = refusal_without_namespaces()
        if refusal is not None and mode.startswith("root"):
            return (f"without namespaces the grader refuses to grade "
                    f"here, rightly ({refusal})")
    return None


def _listen(path: str | None = None, abstract: str | None = None
            ) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(path if path else "\0" + abstract)
    if path:
        os.chmod(path, 0o777)
    sock.listen(8)
    return sock


@pytest.fixture(scope="module")
def canaries():
    """Listening sockets and a key description/payload, unique to the run."""
    base = Path(tempfile.mkdtemp(prefix="attack2-"))
    base.chmod(0o755)
    mark = secrets.token_hex(6)
    named = str(base / f"listener-canary-{mark}")
    abstract = f"autograder-canary-{mark}"
    socks = [_listen(path=named), _listen(abstract=abstract)]
    krb = Path(f"/tmp/krb5cc_attack_{mark}")
    krb.write_text(f"KRB-CANARY-{mark}")
    krb.chmod(0o644)
    yield {"base": base, "mark": mark, "key": f"canary-{mark}",
           "payload": f"KEY-CANARY-{mark}", "krb": f"KRB-CANARY-{mark}",
           "targets": {"sockets": [named], "abstract": [abstract],
                       "key": f"canary-{mark}"}}
    for sock in socks:
        sock.close()
    krb.unlink()
    shutil.rmtree(base, ignore_errors=True)


def _planted(canaries, command: list[str]) -> list[str]:
    return [sys.executable, str(PLANTER), canaries["key"],
            canaries["payload"], "--", *command]


def test_the_socket_attack_is_real(canaries):
    found = attacks_jail.run_unjailed("fork_server", canaries["targets"])
    assert {canaries["targets"]["sockets"][0],
            "@" + canaries["targets"]["abstract"][0]} <= \
        set(found["connected"]), found


def test_the_keyring_attack_is_real(canaries):
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); "
            "from kit_tests import attacks_jail as a; "
            "print(json.dumps(a.run_unjailed('keyrings', "
            "json.loads(sys.argv[2]))))")
    done = subprocess.run(_planted(canaries, [
        sys.executable, "-c", code, str(ROOT),
        json.dumps(canaries["targets"])]), capture_output=True, text=True,
        timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert canaries["payload"] in found["payloads"], found


@pytest.fixture(scope="module", params=MODES)
def batch(request, canaries):
    """The jail attacks, an honest and a looping submission, graded in
    one batch in the mode ``request.param``."""
    mode = request.param
    reason = _skip_reason(mode)
    if reason:
        pytest.skip(reason)
    base = Path(tempfile.mkdtemp(prefix="attack2-batch-"))
    base.chmod(0o755)
    subs, out = base / "submissions", base / "out"
    subs.mkdir()
    for name in attacks_jail.ATTACKS:
        (subs / f"{name}.py").write_text(attacks_jail.submission(
            name, canaries["targets"], canaries["mark"]))
    (subs / "honest.py").write_text(FULL_REFERENCE)
    (subs / "looping.py").write_text(LOOPING)
    env = {**os.environ, "PYTHONPATH": str(ROOT),
           "PYTHONDONTWRITEBYTECODE": "1",
           "SSH_AUTH_SOCK": canaries["targets"]["sockets"][0],
           "KRB5CCNAME": f"FILE:/tmp/krb5cc_attack_{canaries['mark']}"}
    if mode.endswith("no-namespaces"):
        env["AUTOGRADER_NO_NAMESPACES"] = "1"
    command = _planted(canaries, [
        sys.executable, "-m", "autograder", "grade", "--jobs", "2",
        "--timeout", "5", "--out", str(out),
        *sorted(str(p) for p in subs.iterdir())])
    if mode.startswith("user") and is_root:
        command = as_test_user(command, base)
    done = subprocess.run(command, env=env, capture_output=True, text=True,
                          timeout=900, cwd=ROOT)
    yield {"mode": mode, "done": done, "out": out}
    shutil.rmtree(base, ignore_errors=True)


def _text(batch, name: str) -> str:
    folder = submission_dir(batch["out"], name)
    return (folder / "feedback.md").read_text() + \
        (folder / "results.json").read_text()


def _found(batch, name: str) -> dict:
    text = (submission_dir(batch["out"], name) / "feedback.md").read_text()
    found = attacks.report(text)
    assert found is not None, f"{name}: the attack did not report\n{text}"
    return found


def test_batch_completes(batch):
    done = batch["done"]
    assert done.returncode == 0, done.stderr[-3000:]
    assert "seccomp" in done.stderr.split("jail:", 1)[1].splitlines()[0]


def test_honest_submission_keeps_full_marks(batch):
    rubric = load_rubric()
    results = json.loads((submission_dir(batch["out"], "honest") /
                          "results.json").read_text())
    assert results["score"] == rubric.max_score + rubric.max_bonus


def test_no_socket_can_be_reached(batch, canaries):
    found = _found(batch, "fork_server")
    assert canaries["targets"]["sockets"][0] in found["found"]
    # The fork server's own address is in the inmate's memory (its frames):
    # knowing it must not be enough.
    assert any("/pymp-" in f for f in found["found"]), found
    assert found["connected"] == [], found


def test_no_keyring_can_be_read(batch, canaries):
    found = _found(batch, "keyrings")
    assert found["payloads"] == [] and not found["planted"], found
    for name in attacks_jail.ATTACKS:
        assert canaries["payload"] not in _text(batch, name)


def test_no_inherited_credentials(batch, canaries):
    found = _found(batch, "credentials")
    assert found == {"env": {}, "read": []}, found
    assert canaries["krb"] not in _text(batch, "credentials")


def test_a_looping_class_sees_no_grader_output(batch):
    text = _text(batch, "looping")
    assert "time limit" in text
    for leak in LEAKS:
        assert leak not in text, leak
    results = json.loads((submission_dir(batch["out"], "looping") /
                          "results.json").read_text())
    assert not results["extra_data"]["internal_error"]


# The keeper fails (its wait raises, as an attacker's SIGKILL did) for
# every submission but the canary: what does the student see?
_FAILING_KEEPER = '''
import sys
from autograder.sandbox import jail, supervisor, worker_jail

original = worker_jail.keeper_main


def boom(*args):
    raise OSError(22, "Invalid argument")


def keeper_main(source, filename, *args):
    if filename != "canary_submission.py":
        jail.wait_status = worker_jail._watch = boom
    return original(source, filename, *args)


keeper_main.__qualname__ = "keeper_main"
worker_jail.keeper_main = supervisor.keeper_main = keeper_main
from autograder.cli import main
sys.exit(main(sys.argv[1:]))
'''


@pytest.mark.parametrize("namespaces", [True, False],
                         ids=["namespaces", "no-namespaces"])
def test_a_failing_keeper_is_a_grader_failure(tmp_path, namespaces):
    if not namespaces and _skip_reason("root-no-namespaces" if is_root
                                       else "user-no-namespaces"):
        pytest.skip(_skip_reason("root-no-namespaces"))
    sub = tmp_path / "student.py"
    sub.write_text(FULL_REFERENCE)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if not namespaces:
        env["AUTOGRADER_NO_NAMESPACES"] = "1"
    done = subprocess.run(
        [sys.executable, "-c", _FAILING_KEEPER, "grade", "--out",
         str(tmp_path / "out"), str(sub)], env=env, capture_output=True,
        text=True, timeout=600, cwd=ROOT)
    folder = submission_dir(tmp_path / "out", "student")
    results = json.loads((folder / "results.json").read_text())
    shown = (folder / "feedback.md").read_text() + json.dumps(
        [t.get("output", "") for t in results["tests"]] +
        [results.get("output", "")])
    # Staff see the keeper's traceback; the student sees none of it, and
    # the submission is a grader failure (no score charged), not a zero.
    assert "OSError: [Errno 22] Invalid argument" in done.stderr
    assert "staff log" in done.stderr
    for leak in LEAKS:
        assert leak not in shown, leak
    assert results["extra_data"]["internal_error"]


@pytest.mark.parametrize("namespaces", [True, False],
                         ids=["gradescope", "gradescope-no-namespaces"])
@pytest.mark.parametrize("attack", ["fork_server", "keyrings"])
def test_the_gradescope_layout_holds(tmp_path, canaries, attack, namespaces):
    """Gradescope's harness (``gradescope`` in an /autograder layout, as
    root there): the same attacks, the same verdicts."""
    if not namespaces and _skip_reason("root-no-namespaces" if is_root
                                       else "user-no-namespaces"):
        pytest.skip(_skip_reason("root-no-namespaces"))
    (tmp_path / "submission").mkdir()
    (tmp_path / "results").mkdir()
    (tmp_path / "submission" / "modeling_attention.py").write_text(
        attacks_jail.submission(attack, canaries["targets"],
                                canaries["mark"]))
    env = {**os.environ, "PYTHONPATH": str(ROOT),
           "AUTOGRADER_ROOT": str(tmp_path)}
    if not namespaces:
        env["AUTOGRADER_NO_NAMESPACES"] = "1"
    done = subprocess.run(_planted(canaries, [
        sys.executable, "-m", "autograder", "gradescope"]), env=env,
        capture_output=True, text=True, timeout=600, cwd=ROOT)
    text = (tmp_path / "results" / "results.json").read_text()
    assert canaries["payload"] not in text
    found = attacks.report(json.loads(text)["tests"][0]["output"] + "".join(
        t.get("output", "") for t in json.loads(text)["tests"]))
    assert found is not None, (done.stderr[-2000:], text[:3000])
    if attack == "fork_server":
        assert canaries["targets"]["sockets"][0] in found["found"]
        assert found["connected"] == [], found
    else:
        assert found["payloads"] == [] and not found["planted"], found
