"""Hostile submissions, as data: each attack is the body of a function run
inside ``SelfAttention.forward``; what it returns is reported back through
the exception message ``ATTACK {json}``, so the test reads what the attack
saw in the grader's own feedback. ``submission(name)`` builds the module.

Tokens in the bodies: ``@TARGETS@`` (a JSON list of paths the test wants
protected), ``@MARK@`` (a token unique to the run, used for leftovers).
"""
from __future__ import annotations

import json
import os
import re
import signal
import stat
import sys
from pathlib import Path

HARNESS = '''\
import ctypes
import json
import os
import signal
import sys
import time

import torch
import torch.nn as nn

TARGETS = json.loads(@TARGETS@)
MARK = @MARK@


def attack():
@BODY@


class SelfAttention(nn.Module):
    def __init__(self, input_size, hidden):
        super().__init__()
        self.q = nn.Linear(input_size, hidden)
        self.k = nn.Linear(input_size, hidden)
        self.v = nn.Linear(input_size, hidden)

    def forward(self, x):
        found = attack()
        if isinstance(found, torch.Tensor):
            return found
        raise RuntimeError("ATTACK " + json.dumps(found))
'''

ATTACKS: dict[str, str] = {
    # Staff files: the solution, the hidden values, the git objects, the
    # grader's own modules (found through the preloaded grader).
    "read_staff": '''
    import autograder
    seen = []
    roots = [*TARGETS, os.path.dirname(os.path.dirname(autograder.__file__))]
    for root in roots:
        for folder, _, files in os.walk(root):
            for name in files:
                try:
                    with open(os.path.join(folder, name), "rb") as f:
                        f.read(16)
                    seen.append(os.path.join(folder, name))
                except OSError:
                    pass
    return {"read": seen[:20]}
''',
    # Replays frozen values found anywhere it can read: points it did not
    # compute.
    "replay_values": '''
    from safetensors.torch import load_file
    import autograder
    for root in [*TARGETS,
                 os.path.dirname(os.path.dirname(autograder.__file__))]:
        for folder, _, files in os.walk(root):
            for name in files:
                if not name.endswith(".safetensors"):
                    continue
                try:
                    tensors = load_file(os.path.join(folder, name))
                except Exception:
                    continue
                for key, value in tensors.items():
                    if key.endswith("/x") and value.shape == X.shape and \\
                            torch.equal(value, X):
                        return tensors[key[:-1] + "output"]
    return {"found": False}
''',
    # Other submissions, through the command line, /proc and shared /tmp.
    "spy_on_others": '''
    seen = []
    try:
        for pid in os.listdir("/proc"):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    seen.append(f.read().decode(errors="replace"))
            except OSError:
                pass
    except OSError:
        pass
    hits = [c for c in seen if "victim" in c]
    for root in ["/tmp", "/var/tmp", "/dev/shm", *TARGETS]:
        for folder, _, files in os.walk(root):
            for name in files:
                try:
                    with open(os.path.join(folder, name), "rb") as f:
                        if b"VICTIM-MARKER" in f.read(1 << 20):
                            hits.append(os.path.join(folder, name))
                except OSError:
                    pass
    return {"hits": hits[:10], "argv": " ".join(sys.argv)[:200]}
''',
    # Outlive the submission: a setsid'd, double-forked process.
    "leave_process": '''
    try:
        child = os.fork()
    except PermissionError:     # the jail refuses a new process
        return {"refused": True}
    if child == 0:
        os.setsid()
        if os.fork() == 0:
            try:
                os.execv("/bin/sleep", ["sleep", MARK])
            finally:
                os._exit(0)
        os._exit(0)
    time.sleep(0.3)
    return {"spawned": True}
''',
    # Outrun the keeper's sweep (without a PID namespace, a subreaper
    # killing its children in a loop): chains of shells that each start
    # the next and exit (the live one changes pid every millisecond), and a
    # thread forking setsid'd double forks until the worker exits.
    "leave_runners": '''
    global SPAWNED
    if globals().get("SPAWNED"):
        return {"spawned": True}
    SPAWNED = True
    import threading

    def spawn():
        while True:
            if os.fork() == 0:
                os.setsid()
                if os.fork() == 0:
                    os.execv("/bin/sleep", ["sleep", MARK])
                os._exit(0)
            time.sleep(0.002)
    threading.Thread(target=spawn, daemon=True).start()
    chain = ('n=$1; if [ $n -gt 0 ]; then sh -c "$0" "$0" $((n-1)) & '
             'else exec sleep ' + MARK + '; fi')
    for _ in range(8):
        try:
            child = os.fork()
        except PermissionError:     # the jail refuses a new process
            return {"refused": True}
        if child == 0:
            os.setsid()
            os.execv("/bin/sh", ["sh", "-c", chain, chain, "3000"])
    time.sleep(0.3)
    return {"spawned": True}
''',
    # Kill everything it may signal: the grader, other workers.
    "kill_everyone": '''
    killed = []
    for target in (-1, os.getppid(), 1):
        try:
            os.kill(target, signal.SIGKILL)
            killed.append(target)
        except OSError:
            pass
    return {"killed": killed}
''',
    # Fill every shared temporary folder (bounded by the worker's limits).
    "fill_tmp": '''
    wrote = {}
    for folder in ("/tmp", "/var/tmp", "/dev/shm", "."):
        total = 0
        try:
            for i in range(16):
                with open(os.path.join(folder, f"fill-{MARK}-{i}"), "wb") as f:
                    for _ in range(64):
                        f.write(b"\\0" * (1 << 20))
                        total += 1
        except OSError:
            pass
        wrote[folder] = total
    return {"wrote_mb": wrote}
''',
    # Collusion: leave a file for a later submission, and look for one.
    "leave_and_find_note": '''
    left, found = [], []
    for folder in ("/tmp", "/var/tmp", "/dev/shm"):
        try:
            with open(os.path.join(folder, f"note-{MARK}"), "w") as f:
                f.write("solution")
            left.append(folder)
        except OSError:
            pass
        try:
            found += [n for n in os.listdir(folder) if n.startswith("note-")]
        except OSError:
            pass
    return {"left": left, "found": found}
''',
    # The grader's environment, read back from this process's memory:
    # write(2) from it to a file, so that an unmapped page is EFAULT, not
    # a crash (a forked copy would only wait to be killed: the jail parks
    # every process the submission forks).
    "memory_secrets": '''
    import tempfile
    libc = ctypes.CDLL(None)
    addr = ctypes.c_void_p.in_dll(libc, "program_invocation_name").value
    with tempfile.TemporaryFile() as f:
        for i in range(0, 1 << 20, 256):
            libc.write(f.fileno(), ctypes.c_void_p(addr + i), 256)
        f.seek(0)
        data = f.read()
    return {"secret": b"hunter2-" in data, "victim": b"victim" in data,
            "read": len(data) > 0}
''',
    # Write where the grader would later read or import.
    "tamper_grader": '''
    import autograder
    changed = []
    for path in [autograder.__file__, *TARGETS]:
        for folder, _, files in os.walk(path) if os.path.isdir(path) \\
                else [(os.path.dirname(path), [], [os.path.basename(path)])]:
            for name in files:
                try:
                    with open(os.path.join(folder, name), "a") as f:
                        f.write("\\n# tampered\\n")
                    changed.append(os.path.join(folder, name))
                except OSError:
                    pass
    return {"changed": changed[:10]}
''',
    # Forge result frames on every descriptor it has: a frame whose
    # header would expand into millions of Python objects.
    "forge_frames": '''
    import struct
    header = json.dumps({"kind": "result", "id": "x", "status": "ok",
                         "shapes": {"1": [[[1]] * 2_000_000]},
                         "n_outputs": 0}).encode()
    payload = struct.pack(">I", len(header)) + header
    frame = struct.pack(">Q", len(payload)) + payload
    for fd in range(3, 64):
        try:
            os.write(fd, frame)
        except OSError:
            pass
    return {"forged": True}
''',
}

# The same module under the name the grader expects, with a marker the spy
# looks for.
VICTIM_MARKER = "# VICTIM-MARKER: this submission's source is private\n"


def submission(name: str, targets: list[str], mark: str) -> str:
    """The hostile module for attack ``name``."""
    body = ATTACKS[name].strip("\n")
    source = HARNESS.replace("@BODY@", body)
    source = source.replace("@TARGETS@", repr(json.dumps(targets)))
    source = source.replace("@MARK@", repr(mark))
    # The replay attack compares with the probe's input.
    return source.replace("found = attack()",
                          "global X\n        X = x\n        found = attack()")


def processes_matching(text: str) -> list[int]:
    """Pids whose command line contains ``text`` (``pgrep -f``, from /proc:
    a minimal Debian has no procps)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                line = handle.read().replace(b"\0", b" ").decode(
                    errors="replace")
        except OSError:
            continue
        if text in line:
            found.append(int(entry))
    return found


def kill_matching(text: str) -> None:
    """SIGKILL every process ``processes_matching(text)``."""
    for pid in processes_matching(text):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


_BECOME = ("import os, sys; u, g = int(sys.argv[1]), int(sys.argv[2]); "
           "os.setgroups([]); os.setgid(g); os.setuid(u); "
           "os.execvp(sys.argv[3], sys.argv[3:])")


def as_uid(uid: int, gid: int, command: list[str]) -> list[str]:
    """``command`` run as uid/gid with no supplementary group (what
    ``setpriv --reuid --regid --clear-groups`` does, without needing it)."""
    return [sys.executable, "-c", _BECOME, str(uid), str(gid), *command]


def closed_to(uid: int, gid: int, path: str) -> str | None:
    """The first folder from ``path``'s top-level folder down to ``path``
    itself, skipping the folders above it that a private tmpfs can open
    (see test_attacks._as_user), that ``uid`` cannot enter: the path
    itself closed (a checkout at mode 700), or a folder inside the
    blocked one. None when it could enter them all."""
    from autograder.sandbox.jail import readable_by
    stop = readable_by(uid, gid, path)
    if stop is None:
        return None
    current = Path(path)
    depth = len(Path(stop).parts)
    for folder in [*reversed(current.parents), current]:
        if len(folder.parts) <= depth:
            continue
        info = folder.stat()
        need = stat.S_IXOTH
        if info.st_uid == uid:
            need <<= 6
        elif info.st_gid == gid:
            need <<= 3
        if not info.st_mode & need:
            return str(folder)
    return None


def report(text: str) -> dict | None:
    """The attack's findings quoted in the grader's feedback, if any."""
    # The feedback escapes student text for markdown: undo the backslash
    # escapes to read the JSON back.
    text = re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", text)
    start = text.find("ATTACK {")
    if start < 0:
        return None
    decoder = json.JSONDecoder()
    try:
        found, _ = decoder.raw_decode(text[start + len("ATTACK "):])
    except ValueError:
        return None
    return found
