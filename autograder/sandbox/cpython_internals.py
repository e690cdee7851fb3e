"""Everything the sandbox takes from CPython's private multiprocessing code.

Three things have no public API:

- ``WorkerProcess``: a forkserver process that does not re-run the parent's
  ``__main__`` in the worker (multiprocessing would re-execute the grader's
  main script, e.g. ``python -m kit.machine.bench``, in every child: slow, and
  broken for scripts without a main guard). It copies
  ``popen_forkserver.Popen._launch`` with two lines added.
- ``fork_server_from_here``: the steps of ``ForkServer.ensure_running``
  with ``os.fork()`` instead of exec, so the server shares this process's
  torch pages; it reads and sets ``ForkServer``'s private attributes.
- ``stop_fork_server``: ``ForkServer._stop``.

``wire.Receiver`` relies on ``Connection._recv_bytes`` checking a frame's
length before reading it. ``problems()`` compares all of it with the
digests below, taken from the CPython versions in ``VERIFIED``; the kit's
test fails with its list when a new Python changes any of it.
"""
from __future__ import annotations

import hashlib
import inspect
import io
import multiprocessing
import multiprocessing.connection
import multiprocessing.forkserver
import multiprocessing.popen_forkserver
import os
import socket
import sys
from multiprocessing import (forkserver, reduction, resource_tracker, spawn,
                             util)
from multiprocessing.context import ForkServerProcess, set_spawning_popen
from typing import Any

# Python minor versions whose sources were compared with these digests.
VERIFIED = ((3, 8), (3, 9), (3, 10), (3, 11), (3, 12), (3, 13))
# sha256 of inspect.getsource(...) of what is copied or relied upon
# (Popen.__init__ sets the _fds that _launch reads).
DIGESTS = {
    "multiprocessing.popen_forkserver.Popen.__init__":
        "cd0ee2335da5b609ef24383ca872ffc6d242542581301f0aec018035ac32335d",
    "multiprocessing.popen_forkserver.Popen._launch":
        "214844899bd3407f72082111e993b40f7c271620be27195b878ea1e44a5f3837",
    "multiprocessing.forkserver.ForkServer.ensure_running":
        "4e37aa6dc9493a5d40334b322fdeb8e76e8c212479b19e7c8eba8107b8d62757",
    "multiprocessing.connection.Connection._recv_bytes":
        "851736ee530a6c3450ebeb929e421f12330a6472c80ad2e9a1e5ebb2c86192e1",
    "multiprocessing.connection.Connection._recv":
        "c670d15883ec9d7a24a0b5cdbd30a99213cd1da54275eb198b072105a699c8b5",
}
# Private attributes and module names used here.
SERVER_ATTRIBUTES = ("_lock", "_forkserver_pid", "_forkserver_alive_fd",
                     "_forkserver_address", "_preload_modules", "_stop")
NAMES = ("multiprocessing.forkserver._forkserver",   # the singleton
         "multiprocessing.forkserver.main",
         "multiprocessing.forkserver.connect_to_new_process",
         "multiprocessing.forkserver.read_signed",
         "multiprocessing.spawn.get_preparation_data",
         "multiprocessing.context.set_spawning_popen",
         "multiprocessing.reduction.dump",
         "multiprocessing.util.Finalize",
         "multiprocessing.util.close_fds",
         "multiprocessing.connection.arbitrary_address",
         "multiprocessing.resource_tracker.ensure_running")
MAIN_PARAMETERS = ["listener_fd", "alive_r", "preload", "main_path",
                   "sys_path"]


def _resolve(dotted: str) -> Any:
    module, _, rest = dotted.partition(".")
    obj: Any = __import__(module)
    for part in (module + "." + rest).split(".")[1:]:
        obj = getattr(obj, part)
    return obj


def problems() -> list[str]:
    """What no longer matches the CPython internals this module was written
    against (empty when all is as verified), each naming what to review."""
    found = []
    version = sys.version_info[:2]
    if version not in VERIFIED:
        found.append(f"Python {version[0]}.{version[1]} is not in VERIFIED: "
                     "review autograder/sandbox/cpython_internals.py "
                     "against its multiprocessing and add it")
    for dotted, digest in DIGESTS.items():
        try:
            source = inspect.getsource(_resolve(dotted))
        except (AttributeError, OSError, TypeError) as exc:
            found.append(f"{dotted} is gone ({type(exc).__name__})")
            continue
        if hashlib.sha256(source.encode()).hexdigest() != digest:
            found.append(f"{dotted} changed: compare it with the copy or "
                         "use in autograder/sandbox/cpython_internals.py (or "
                         "wire.Receiver), then update DIGESTS")
    for dotted in NAMES:
        try:
            _resolve(dotted)
        except AttributeError:
            found.append(f"{dotted} is gone")
    server = forkserver.ForkServer()
    found += [f"ForkServer.{name} is gone" for name in SERVER_ATTRIBUTES
              if not hasattr(server, name)]
    try:
        params = list(inspect.signature(forkserver.main).parameters)
    except (AttributeError, ValueError):
        params = []
    if params != MAIN_PARAMETERS:
        found.append(f"multiprocessing.forkserver.main takes {params}, "
                     f"not {MAIN_PARAMETERS}")
    return found


class _Popen(multiprocessing.popen_forkserver.Popen):
    """The forkserver Popen without re-running the parent's ``__main__``
    in the worker: ``popen_forkserver.Popen._launch`` verbatim (the same
    names imported above), plus the two ``pop`` lines."""

    def _launch(self, process_obj):
        prep_data = spawn.get_preparation_data(process_obj._name)
        prep_data.pop("init_main_from_path", None)
        prep_data.pop("init_main_from_name", None)
        buf = io.BytesIO()
        set_spawning_popen(self)
        try:
            reduction.dump(prep_data, buf)
            reduction.dump(process_obj, buf)
        finally:
            set_spawning_popen(None)

        self.sentinel, w = forkserver.connect_to_new_process(self._fds)
        # Keep a duplicate of the data pipe's write end as a sentinel of the
        # parent process used by the child process.
        _parent_w = os.dup(w)
        self.finalizer = util.Finalize(self, util.close_fds,
                                       (_parent_w, self.sentinel))
        with open(w, 'wb', closefd=True) as f:
            f.write(buf.getbuffer())
        self.pid = forkserver.read_signed(self.sentinel)


class WorkerProcess(ForkServerProcess):
    """A forkserver process started with ``_Popen``."""

    @staticmethod
    def _Popen(process_obj: Any) -> _Popen:
        return _Popen(process_obj)


# A socket path longer than this does not fit sockaddr_un (108 bytes).
MAX_SOCKET_PATH = 100


def _socket_address() -> str:
    """multiprocessing's address for the fork server's socket, in its
    private temporary folder; where TMPDIR makes that path too long for a
    socket, a private folder of its own under /tmp."""
    address = multiprocessing.connection.arbitrary_address("AF_UNIX")
    if len(os.fsencode(address)) <= MAX_SOCKET_PATH:
        return address
    import atexit
    import shutil
    import tempfile
    folder = tempfile.mkdtemp(prefix="ag-", dir="/tmp")   # mode 700
    # multiprocessing removes its own folder at exit; this one is ours
    # (a fork server, forked, leaves by os._exit and runs none of it)
    atexit.register(shutil.rmtree, folder, True)
    return os.path.join(folder, os.path.basename(address)[-40:])


def fork_server_from_here() -> None:
    """Start multiprocessing's fork server as a fork of this process.

    The same steps as ``ForkServer.ensure_running`` (a listening socket and
    an "alive" pipe the server watches), but the server is ``os.fork()``-ed
    rather than exec-ed, so it inherits this process's imported modules
    instead of importing torch again. Does nothing if a server runs.
    """
    server = multiprocessing.forkserver._forkserver
    with server._lock:
        resource_tracker.ensure_running()
        if server._forkserver_pid is not None:
            pid, _ = os.waitpid(server._forkserver_pid, os.WNOHANG)
            if not pid:
                return
            os.close(server._forkserver_alive_fd)
            server._forkserver_address = None
            server._forkserver_alive_fd = server._forkserver_pid = None
        with socket.socket(socket.AF_UNIX) as listener:
            address = _socket_address()
            listener.bind(address)
            os.chmod(address, 0o600)
            listener.listen()
            alive_r, alive_w = os.pipe()
            pid = os.fork()
            if pid == 0:   # the server
                try:
                    # Keep only what the server needs: the parent's other
                    # descriptors (the alive pipe's write end above all)
                    # would keep it running after the parent is gone.
                    keep = {0, 1, 2, listener.fileno(), alive_r}
                    for fd in map(int, os.listdir("/proc/self/fd")):
                        if fd not in keep:
                            try:
                                os.close(fd)
                            except OSError:
                                pass
                    forkserver.main(listener.fileno(), alive_r,
                                    server._preload_modules)
                finally:
                    os._exit(0)
            os.close(alive_r)
        server._forkserver_address = address
        server._forkserver_alive_fd = alive_w
        server._forkserver_pid = pid


def stop_fork_server() -> None:
    """Stop the fork server, if one runs (a later start makes a new one)."""
    stop = getattr(multiprocessing.forkserver._forkserver, "_stop", None)
    if stop is not None:
        stop()
