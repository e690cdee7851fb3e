"""Run a command with a canary key in its keyrings, then remove the key.

``python kit_tests/keyring_canary.py DESCRIPTION PAYLOAD -- COMMAND...``
joins a new session keyring (the caller's stays untouched), adds a
``user`` key DESCRIPTION=PAYLOAD to it and to the user keyring (where an
unprivileged grader's uid keeps it for every process of that uid), runs
COMMAND, unlinks the user keyring's key and exits with COMMAND's status.
Standalone (raw syscalls, stdlib only): it runs as the test user too.
"""
from __future__ import annotations

import ctypes
import os
import platform
import subprocess
import sys

KEYCTL_JOIN_SESSION_KEYRING, KEYCTL_UNLINK = 1, 9
SESSION, USER = -3, -4
_NUMBERS = {"x86_64": (248, 250), "aarch64": (217, 219)}


def _syscall(number: int, *args) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    out = libc.syscall(ctypes.c_long(number), *[
        ctypes.c_long(a) if isinstance(a, int) else a for a in args])
    if out < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return out


def plant(description: str, payload: str) -> int:
    """Join a new session keyring and add the key to it and to the user
    keyring; the user keyring's key id (to unlink)."""
    add_key, keyctl = _NUMBERS[platform.machine()]
    _syscall(keyctl, KEYCTL_JOIN_SESSION_KEYRING, b"attack-canary")
    data = payload.encode()
    _syscall(add_key, b"user", description.encode(), data, len(data),
             SESSION)
    return _syscall(add_key, b"user", description.encode(), data,
                    len(data), USER)


def main(argv: list[str]) -> int:
    description, payload, sep, *command = argv
    assert sep == "--" and command, __doc__
    key = plant(description, payload)
    try:
        return subprocess.call(command)
    finally:
        _syscall(_NUMBERS[platform.machine()][1], KEYCTL_UNLINK, key, USER)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
