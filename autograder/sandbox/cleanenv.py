"""Start the grader from a process that never held its secrets.

Workers are forks of the fork server, itself a fork of the command's
process: whatever that process's memory held (the environment's strings,
the command line with every submission's path) a worker could read back
with ctypes, even after ``os.environ.clear()``. So ``python -m autograder``
re-executes itself at once with a minimal environment and no arguments; the
real ones travel in an anonymous memory file that the new process reads only
after its fork server has started.
"""
from __future__ import annotations

import json
import os
import sys

HANDOFF = "AUTOGRADER_HANDOFF_FD"
# Harmless settings the worker side needs; nothing else is kept.
# HOMEWORK (the profile's folder) is read while the command imports,
# before the handoff restores the rest.
KEEP = ("PATH", "PYTHONPATH", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR",
        "AUTOGRADER_WORKER_USER", "AUTOGRADER_NO_NAMESPACES", "HOMEWORK")
MAX_HANDOFF_BYTES = 64 * 1024 * 1024


def available() -> bool:
    """Whether this platform can re-execute with a handoff."""
    return sys.platform == "linux" and hasattr(os, "memfd_create") and \
        bool(sys.executable)


def reexec_clean(argv: list[str]) -> None:
    """Replace this process by ``python -m autograder`` with only KEEP in
    its environment; ``argv`` and the full environment wait in a memfd.
    Returns only if re-executing is impossible."""
    if not available():
        return
    data = json.dumps({"argv": argv, "env": dict(os.environ)}).encode()
    fd = os.memfd_create("autograder-handoff", 0)   # inherited by exec
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    os.lseek(fd, 0, os.SEEK_SET)
    env = {key: os.environ[key] for key in KEEP if key in os.environ}
    env[HANDOFF] = str(fd)
    try:
        os.execve(sys.executable, [sys.executable, "-m", "autograder"], env)
    except OSError:
        os.close(fd)


def pending() -> bool:
    """Whether this process was re-executed and holds a handoff."""
    return HANDOFF in os.environ


def take_handoff() -> list[str]:
    """Read the handoff: restore the environment, return the arguments."""
    fd = int(os.environ.pop(HANDOFF))
    chunks = []
    total = 0
    while total < MAX_HANDOFF_BYTES:
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    os.close(fd)
    data = json.loads(b"".join(chunks))
    os.environ.update(data["env"])
    return list(data["argv"])


__all__ = ["available", "pending", "reexec_clean", "take_handoff"]
