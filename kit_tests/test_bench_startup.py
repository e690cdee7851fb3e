"""The one-submission figures of ``make bench`` (kit/machine/bench_startup.py):
medians compared with the bare import torch of the same run."""
from __future__ import annotations

from kit.machine.bench_startup import TARGET_RATIO, one_submission_lines


def test_ratios_are_medians_against_the_same_runs_import():
    lines = one_submission_lines({"import torch": [2.0, 1.0, 9.0],
                                  "check": [2.8, 1.5, 3.0],
                                  "gradescope": [3.2, 3.1, 3.4]})
    text = "\n".join(lines)
    assert "median of 3" in text
    assert "import torch': 2.00 s" in text
    check = next(line for line in lines if "check" in line)
    gradescope = next(line for line in lines if "gradescope" in line)
    assert "2.80 s = 1.40x" in check and "met)" in check
    assert "NOT met" not in check
    assert "3.20 s = 1.60x" in gradescope and "NOT met" in gradescope
    assert f"<= {TARGET_RATIO}x" in gradescope
