"""autograder/sandbox/cpython_internals.py: what the sandbox takes from
CPython's private multiprocessing code is still what it was written against."""
from __future__ import annotations

import hashlib
import inspect
import multiprocessing.forkserver
import os
import sys

import pytest

from autograder.sandbox import cpython_internals as ci


def test_cpython_internals_are_as_verified():
    found = ci.problems()
    assert not found, (
        "CPython's multiprocessing internals changed under the sandbox:\n  "
        + "\n  ".join(found))


def test_a_changed_digest_is_named(monkeypatch):
    name = "multiprocessing.popen_forkserver.Popen._launch"
    monkeypatch.setitem(ci.DIGESTS, name, "0" * 64)
    assert [p for p in ci.problems() if p.startswith(name + " changed")]


def test_a_missing_attribute_is_named(monkeypatch):
    monkeypatch.delattr(multiprocessing.forkserver, "read_signed")
    assert "multiprocessing.forkserver.read_signed is gone" in ci.problems()
    monkeypatch.setattr(ci, "SERVER_ATTRIBUTES",
                        ci.SERVER_ATTRIBUTES + ("_no_such",))
    assert "ForkServer._no_such is gone" in ci.problems()


def test_an_unverified_python_is_named(monkeypatch):
    monkeypatch.setattr(ci, "VERIFIED", ())
    version = "%d.%d" % sys.version_info[:2]
    assert any(p.startswith(f"Python {version} is not in VERIFIED")
               for p in ci.problems())


def test_the_copy_is_the_original_plus_two_lines():
    """The copied _launch is the stdlib's, verbatim, plus the two lines
    that keep the parent's __main__ out of the worker."""
    from multiprocessing import popen_forkserver
    original = inspect.getsource(popen_forkserver.Popen._launch)
    copy = inspect.getsource(ci._Popen._launch).splitlines(True)
    added = [line for line in copy if "prep_data.pop(" in line]
    assert len(added) == 2
    assert "".join(line for line in copy if line not in added) == original
    assert hashlib.sha256(original.encode()).hexdigest() == \
        ci.DIGESTS["multiprocessing.popen_forkserver.Popen._launch"]


@pytest.mark.parametrize("name", sorted(ci.DIGESTS))
def test_every_digest_names_real_code(name):
    assert inspect.getsource(ci._resolve(name))


def test_the_fork_servers_socket_fits_under_a_long_tmpdir(tmp_path):
    # TMPDIR deep enough that multiprocessing's socket path would not fit
    # sockaddr_un ("AF_UNIX path too long", a traceback before any grade).
    import subprocess
    import sys
    deep = tmp_path / ("d" * 100)
    deep.mkdir()
    code = ("from autograder.sandbox import cpython_internals as c\n"
            "import os\nprint(c._socket_address())")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True,
                          text=True, env={**__import__("os").environ,
                                          "TMPDIR": str(deep)}, timeout=120)
    assert done.returncode == 0, done.stderr
    address = done.stdout.strip()
    assert len(address.encode()) <= 100
    # The folder made for it is gone once the process has ended.
    assert not os.path.exists(os.path.dirname(address))
