"""The one-submission figures of ``make bench`` (kit/machine/bench_startup.py):
medians compared with the bare import torch of the same run."""
from __future__ import annotations

import pytest

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


def test_the_light_freshness_check_agrees_with_the_generator(tmp_path):
    # make check asks kit.values_fresh (no torch) what make_test_values
    # --check would say: same sources, same verdicts.
    import json
    import shutil

    from kit.generate import values as make_test_values

    from kit import values_fresh
    assert values_fresh.SOURCES == make_test_values.SOURCES
    assert values_fresh.stale_sources() == []
    make_test_values.check_fresh()
    shutil.copy(make_test_values.OUT / "manifest.json", tmp_path)
    data = json.loads((tmp_path / "manifest.json").read_text())
    data["sources"]["kit/generate/cases.py"] = "0" * 64
    (tmp_path / "manifest.json").write_text(json.dumps(data))
    assert values_fresh.stale_sources(tmp_path) == ["kit/generate/cases.py"]
    with pytest.raises(make_test_values.StaleValues,
                       match="kit/generate/cases.py"):
        make_test_values.check_fresh(tmp_path)
