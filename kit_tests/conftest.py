"""Before any test: every generated file must be in step with what
generates it (kit/generate/__init__.py), else one message says what to run. A
clean answer is remembered while nothing it reads changes
(kit_tests/fresh_stamp.py), so that one test file runs in seconds.

Tests that run a deployed thing end to end (the CLI in its own process,
the student release as unzipped, the Gradescope image as setup.sh builds
it, the attack suite, the notebook in a real kernel, the class report in
a browser, the installer) are marked ``e2e``: ``make test`` (the quick
loop) leaves them out, ``make test-all`` (CI) runs everything.

After the run, the slowest test files (their tests' setup, call and
teardown summed, fixtures included) are listed beside pytest's total, so
that a file that grew slow is seen in every run, CI's included; the
times are kept so that the next parallel run starts the slowest files
first (kit_tests/file_seconds.py).
"""
from __future__ import annotations

import functools
import sys
import threading
from pathlib import Path

import pytest

from kit_tests import file_seconds
from kit_tests.fresh_stamp import stale_unless_unchanged

E2E = {"test_attacks", "test_checker_parity", "test_class_report",
       "test_cli", "test_gradescope", "test_gradescope_export",
       "test_gradescope_image", "test_install", "test_isolation_disk_search",
       "test_notebook", "test_preflight", "test_regrade", "test_release",
       "test_student_tests", "test_submission_zip"}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "e2e: runs a deployed thing end to end (make test-all)")


def pytest_collection_modifyitems(config: pytest.Config,
                                  items: list[pytest.Item]) -> None:
    for item in items:
        if Path(str(item.fspath)).stem in E2E:
            item.add_marker(pytest.mark.e2e)
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:    # every worker orders alike: one record
        file_seconds.slowest_first(items,
                                   workerinput.get("file_seconds", {}))


@functools.lru_cache(maxsize=None)
def _last_seconds(marks: str) -> dict[str, float]:
    return file_seconds.recorded(marks)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    """xdist's parent, per worker: the files' last times (the record read
    once for all the workers)."""
    node.workerinput["file_seconds"] = _last_seconds(
        node.config.getoption("markexpr") or "")


def pytest_collection_finish(session: pytest.Session) -> None:
    # The grader computes with one thread (cli.main, the worker): so do the
    # tests that run its code in this process. More would also spin
    # against the other test processes for the cores.
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)


@pytest.fixture(scope="module")
def box():
    """One grading sandbox per test module (starting one costs seconds of
    CPU); a module that needs another kind defines its own ``box``."""
    from autograder.sandbox.pool import Sandbox
    with Sandbox() as sandbox:
        yield sandbox


_GENERATED: dict = {}     # the generated-files check's thread and answer


def _check_generated() -> None:
    try:
        from kit.generate import stale
        _GENERATED["lines"] = stale_unless_unchanged(stale)
    except BaseException as exc:       # re-raised where the tests wait
        _GENERATED["error"] = exc


def _stop_if_stale() -> None:
    if "error" in _GENERATED:
        raise _GENERATED["error"]
    lines = _GENERATED.get("lines")
    if lines:
        pytest.exit("generated files are stale:\n  " + "\n  ".join(lines)
                    + "\n(`make generate` runs them all, then `make test`)",
                    returncode=1)


def pytest_sessionstart(session: pytest.Session) -> None:
    if hasattr(session.config, "workerinput"):   # an xdist worker
        return
    if session.config.pluginmanager.hasplugin("dsession"):
        # The parallel run's parent collects nothing: the check (its
        # imports are most of its seconds) runs while the workers start
        # and collect; no test is handed out before its answer.
        _GENERATED["thread"] = threading.Thread(
            target=_check_generated, name="generated-files", daemon=True)
        _GENERATED["thread"].start()
        return
    _check_generated()
    _stop_if_stale()


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtestloop(session: pytest.Session):
    thread = _GENERATED.pop("thread", None)
    if thread is not None:
        thread.join()
        _stop_if_stale()
    yield


SLOWEST_FILES = 12
_seconds_per_file: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    path = file_seconds.file_of(report.nodeid)
    _seconds_per_file[path] = _seconds_per_file.get(path, 0.0) + getattr(
        report, "duration", 0.0)


def pytest_terminal_summary(terminalreporter) -> None:
    # Only the parent of a parallel run: it sees every file's reports, and
    # a worker writing its own part of the record would race it.
    if hasattr(terminalreporter.config, "workerinput") or \
            not _seconds_per_file:
        return
    slowest = sorted(_seconds_per_file.items(), key=lambda kv: -kv[1])
    terminalreporter.write_sep("=", f"slowest {SLOWEST_FILES} test files "
                                    "(seconds, setup + call + teardown)")
    for path, seconds in slowest[:SLOWEST_FILES]:
        terminalreporter.write_line(f"{seconds:8.1f}  {path}")
    terminalreporter.write_line(
        f"{sum(_seconds_per_file.values()):8.1f}  all {len(slowest)} files "
        "(summed over the test processes)")
    file_seconds.remember(
        terminalreporter.config.getoption("markexpr") or "",
        _seconds_per_file)
