"""kit/machine/fresh_machine.py's report of a failed step: CI prints only
part of the output, so the excerpt must carry pytest's tracebacks, not only
the summary that names the failed test."""
from __future__ import annotations

from kit.machine.fresh_machine import failure_excerpt


def _suite_log(traceback_lines: int) -> str:
    body = [f"line {i}\n" for i in range(200)]
    failures = ["=================== FAILURES ===================\n",
                "____ test_twenty ____\n"] + \
        [f"E   why {i}\n" for i in range(traceback_lines)]
    summary = [f"    {i}.0  kit_tests/test_{i}.py\n" for i in range(30)] + \
        ["FAILED kit_tests/test_sandbox.py::test_twenty\n",
         "==== 1 failed, 9 passed in 100.00s ====\n"]
    return "".join(body + failures + summary)


def test_a_failed_suite_shows_its_traceback_and_its_summary():
    text = failure_excerpt(_suite_log(5))
    assert "____ test_twenty ____" in text and "E   why 4" in text
    assert text.rstrip().endswith("1 failed, 9 passed in 100.00s ====")
    assert "line 199" not in text   # the progress before the failures


def test_a_long_traceback_is_cut_and_says_how_much():
    text = failure_excerpt(_suite_log(500), head=50, tail=10)
    assert "E   why 47" in text and "E   why 48" not in text
    assert "lines]" in text and "FAILED kit_tests/test_sandbox.py" in text
    assert len(text.splitlines()) == 50 + 1 + 10


def test_a_log_without_pytest_failures_shows_its_end():
    log = "".join(f"step {i}\n" for i in range(500))
    text = failure_excerpt(log, head=10, tail=5)
    assert text.splitlines() == [f"step {i}" for i in range(485, 500)]
