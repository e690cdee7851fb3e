"""``check`` applies the grader's time limits and says so: the time the
calls took against the limits, a limit that was hit and what it cost, and
past half the total limit that the grade's hidden cases run within the
same total (a correct but slow module once got full marks from ``check``
with no word on time, and lost points in the grade)."""
from __future__ import annotations

import pytest

from autograder import batch
from autograder.report.results import check_text
from kit_tests.reference_source import FULL_REFERENCE

pytestmark = pytest.mark.e2e   # a sandbox and a 1 s limit hit (~1 min)

SLOW = FULL_REFERENCE.replace(
    '            softmax(q k^T / sqrt(hidden)) v.\n        """\n',
    '            softmax(q k^T / sqrt(hidden)) v.\n        """\n'
    '        import time\n        time.sleep(1.5)\n', 1)


def _check(box, tmp_path, source: str, timeout: float | None = None) -> str:
    path = tmp_path / "modeling_attention.py"
    path.write_text(source)
    return check_text(batch.check_file(path, box, timeout=timeout))


def test_check_says_the_time_and_the_limits(box, tmp_path):
    text = _check(box, tmp_path, FULL_REFERENCE)
    assert "time: your code's" in text and "s per call" in text
    assert "for all the calls of a submission" in text
    assert "time limit hit" not in text and "warning:" not in text


def test_a_call_past_the_limit_is_told_with_its_cost(box, tmp_path):
    assert SLOW != FULL_REFERENCE
    text = _check(box, tmp_path, SLOW, timeout=1.0)
    assert "time limit hit:" in text, text
    assert "will in the grade" in text
    assert "[FAIL] 1.2" in text, text
    # Its control: the same module under a limit well above its sleep
    # passes (the reference under the 1 s limit was a wall-clock verdict:
    # on a loaded machine a correct call can take a second).
    control = _check(box, tmp_path, SLOW, timeout=30.0)
    assert "[ok  ] 1.2" in control, control
