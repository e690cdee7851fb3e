"""Simulate a student's macOS or Windows for the grader's own modules, on
Linux (``kit_tests/test_check_platforms.py``).

``install("darwin")`` (or ``"win32"``) makes every module of the
``autograder`` package, imported afterwards, see through its own
``__builtins__``:

- ``sys.platform`` reading the simulated platform;
- ``os`` without what that platform's ``os`` lacks (for macOS glibc's
  ``ST_*`` mount flags, ``O_PATH``, ``memfd_create``...; for Windows
  ``fork``, ``setsid``, ``killpg``, ``getuid``, ``pread``, ``O_NOFOLLOW``,
  ``statvfs``...), and ``/proc`` absent from its file functions and from
  ``open``; on Windows these also refuse a path of ``MAX_PATH`` (260)
  characters or more, made absolute, as Windows does without long paths
  (FileNotFoundError);
- for Windows, no ``resource``, ``pwd``, ``fcntl`` or ``grp`` module, a
  ``signal`` without ``SIGKILL``, ``SIGXCPU``, ``SIGXFSZ``, ``SIGCHLD``,
  and a ``multiprocessing`` whose only start method is ``spawn``.

The rest of the interpreter (the standard library, torch) is the real
Linux one, which is what a simulation cannot change: ``os.path`` stays
POSIX, pipes and sockets are Linux's, ``ctypes.CDLL(None)`` still opens
glibc (the grader's own modules decide by ``sys.platform`` whether to).

Child processes inherit the simulation through ``AUTOGRADER_SIMULATE``
and ``kit_tests/simulated_site/sitecustomize.py`` (put that folder first
on PYTHONPATH): a spawned child or a fresh fork server is simulated from
its first import on. Run it in a subprocess only: it cannot be undone.
"""
from __future__ import annotations

import builtins
import importlib.abc
import importlib.machinery
import os
import signal
import sys
import types
from pathlib import Path
from typing import Any

ENV = "AUTOGRADER_SIMULATE"
SITE = Path(__file__).resolve().parent / "simulated_site"
PACKAGE = "autograder"

# What each platform's os module lacks that Linux's has (the names the
# grader might touch; not every difference of the two modules).
_OS_MISSING = {
    "darwin": {"memfd_create", "O_PATH", "O_TMPFILE", "O_DIRECT",
               "ST_NODEV", "ST_NOEXEC", "ST_NOATIME", "ST_NODIRATIME",
               "ST_RELATIME", "ST_SYNCHRONOUS", "ST_MANDLOCK", "ST_WRITE",
               "ST_APPEND", "pidfd_open", "pipe2", "sched_getaffinity",
               "sched_setaffinity", "getrandom", "eventfd", "splice",
               "copy_file_range", "posix_fallocate", "unshare", "setns"},
}
_OS_MISSING["win32"] = _OS_MISSING["darwin"] | {
    "fork", "forkpty", "setsid", "getsid", "killpg", "getpgid", "setpgid",
    "getpgrp", "getuid", "geteuid", "getgid", "getegid", "setuid", "setgid",
    "setgroups", "getgroups", "uname", "statvfs", "fstatvfs", "pread",
    "pwrite", "WNOHANG", "WIFSIGNALED", "WTERMSIG", "WIFEXITED",
    "WEXITSTATUS", "O_NOFOLLOW", "O_NONBLOCK", "O_CLOEXEC", "sysconf",
    "nice", "chown", "lchown", "fchown", "mkfifo", "getloadavg", "wait",
    "wait3", "wait4", "register_at_fork", "ST_RDONLY", "ST_NOSUID",
    "sched_yield", "getpriority", "setpriority"}
_MODULES_MISSING = {"darwin": set(),
                    "win32": {"resource", "pwd", "grp", "fcntl", "termios",
                              "posix"}}
_SIGNALS_MISSING = {"darwin": set(),
                    "win32": {"SIGKILL", "SIGXCPU", "SIGXFSZ", "SIGCHLD",
                              "SIGALRM", "SIGSTOP", "SIGHUP", "SIGQUIT",
                              "SIGUSR1", "SIGUSR2", "SIGPIPE", "setitimer",
                              "alarm", "pthread_kill", "siginterrupt"}}
_FILE_FUNCTIONS = ("listdir", "scandir", "stat", "lstat", "open", "access",
                   "readlink")


def _hidden(path: Any) -> bool:
    """Whether ``path`` is under /proc (which neither platform has)."""
    try:
        text = os.fsdecode(path) if not isinstance(path, int) else ""
    except TypeError:
        return False
    return text == "/proc" or text.startswith("/proc/")


# Windows' limit on a path without long-path support, its NUL included.
MAX_PATH = 260


def _too_long(path: Any) -> bool:
    """Whether ``path``, made absolute, is past Windows' MAX_PATH."""
    if isinstance(path, int):
        return False
    try:
        return len(os.path.abspath(os.fsdecode(path))) >= MAX_PATH
    except TypeError:
        return False


def _no_proc(function: Any, max_path: bool = False) -> Any:
    def wrapper(path: Any = ".", *args: Any, **kwargs: Any) -> Any:
        if _hidden(path):
            raise FileNotFoundError(2, "No such file or directory", path)
        if max_path and _too_long(path):
            raise FileNotFoundError(2, "No such file or directory "
                                    "(path too long, simulated Windows)",
                                    path)
        return function(path, *args, **kwargs)
    wrapper.__name__ = getattr(function, "__name__", "wrapper")
    return wrapper


class _Proxy(types.ModuleType):
    """A module as the simulated platform has it: missing names raise
    AttributeError, ``overrides`` replace some, the rest is the real
    module's (assignments go to the real module)."""

    def __init__(self, real: types.ModuleType, missing: set[str],
                 overrides: dict[str, Any]):
        super().__init__(real.__name__, real.__doc__)
        object.__setattr__(self, "_real", real)
        object.__setattr__(self, "_missing", missing)
        object.__setattr__(self, "_overrides", overrides)

    def __getattribute__(self, name: str) -> Any:
        if name.startswith("__") or name in ("_real", "_missing",
                                             "_overrides"):
            return object.__getattribute__(self, name)
        if name in object.__getattribute__(self, "_missing"):
            raise AttributeError(f"module {self.__name__!r} has no "
                                 f"attribute {name!r} (simulated)")
        overrides = object.__getattribute__(self, "_overrides")
        if name in overrides:
            return overrides[name]
        return getattr(object.__getattribute__(self, "_real"), name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(object.__getattribute__(self, "_real"), name, value)

    def __dir__(self) -> list[str]:
        real = object.__getattribute__(self, "_real")
        return [n for n in dir(real) if n not in self._missing]


def _proxies(platform: str) -> dict[str, Any]:
    import multiprocessing

    os_proxy = _Proxy(os, _OS_MISSING[platform],
                      {name: _no_proc(getattr(os, name), platform == "win32")
                       for name in _FILE_FUNCTIONS})
    sys_proxy = _Proxy(sys, set(), {"platform": platform})
    found = {"os": os_proxy, "sys": sys_proxy,
             "signal": _Proxy(signal, _SIGNALS_MISSING[platform], {})}
    if platform == "win32":
        def get_context(method: str | None = None) -> Any:
            if method not in (None, "spawn"):
                raise ValueError(f"cannot find context for {method!r} "
                                 f"(simulated Windows)")
            return multiprocessing.get_context("spawn")
        found["multiprocessing"] = _Proxy(multiprocessing, set(), {
            "get_all_start_methods": lambda: ["spawn"],
            "get_context": get_context})
    return found


def _builtins(platform: str) -> dict[str, Any]:
    """``__builtins__`` of the package's modules on ``platform``."""
    proxies = _proxies(platform)
    missing = _MODULES_MISSING[platform]
    real_import = builtins.__import__

    def sim_import(name: str, globals: Any = None, locals: Any = None,
                   fromlist: Any = (), level: int = 0) -> Any:
        if level == 0 and name.split(".")[0] in missing:
            raise ModuleNotFoundError(f"No module named {name!r} "
                                      f"(simulated {platform})", name=name)
        module = real_import(name, globals, locals, fromlist, level)
        if level == 0 and not fromlist:   # import a.b binds a
            return proxies.get(name.partition(".")[0], module)
        if level == 0 and name in proxies:   # from os import x
            return proxies[name]
        return module

    return _Builtins(__import__=sim_import,
                     open=_no_proc(builtins.open, platform == "win32"))


class _Builtins(dict):
    """The simulated builtins: the overridden names, and the real builtins
    module's for the rest, looked up live (the worker adds names to
    ``builtins`` after the package imported: the shape recorder)."""

    def __missing__(self, key: str) -> Any:
        return builtins.__dict__[key]


class _Loader(importlib.abc.Loader):
    """Runs a module of the package with the simulated builtins."""

    def __init__(self, inner: Any, space: dict[str, Any]):
        self.inner, self.space = inner, space

    def create_module(self, spec: Any) -> Any:
        return self.inner.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        module.__builtins__ = self.space
        self.inner.exec_module(module)
        if module.__name__ == f"{PACKAGE}.sandbox.memlimit":
            # Path("/proc/self") reads go through pathlib, not the proxies.
            module.cgroup_folders.__defaults__ = (Path("/simulated/none"),)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(self, space: dict[str, Any]):
        self.space = space

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != PACKAGE and not name.startswith(PACKAGE + "."):
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader, self.space)
        return spec


def install(platform: str) -> None:
    """Simulate ``platform`` ("darwin" or "win32") for the package's
    modules imported from now on, in this process and its children."""
    if platform not in _OS_MISSING:
        raise ValueError(f"unknown platform {platform!r}")
    if any(m == PACKAGE or m.startswith(PACKAGE + ".") for m in sys.modules):
        raise RuntimeError("install() must run before autograder is "
                           "imported")
    os.environ[ENV] = platform
    path = os.environ.get("PYTHONPATH", "")
    if str(SITE) not in path.split(os.pathsep):
        os.environ["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(SITE), path) if p)
    sys.meta_path.insert(0, _Finder(_builtins(platform)))


def main(argv: list[str]) -> int:
    """``python kit_tests/simulated_platform.py PLATFORM check FILE``:
    the student's ``check`` on the simulated platform."""
    install(argv[0])
    from autograder.cli import main as cli_main
    status = cli_main(argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    return status


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    os._exit(main(sys.argv[1:]))
