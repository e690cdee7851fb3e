"""Which public frozen cases each test runs on (pytest parameters)."""
from __future__ import annotations

import pytest

from transformer_lm.test_values import PublicCase, load_public_cases

PUBLIC_CASES = load_public_cases()


def cases(cls: str, *, causal: bool | None = None,
          mode: str | None = None) -> list:
    """The public cases of class ``cls`` (optionally only causal or not,
    only "eval" or "train" mode), as pytest parameters named by case."""
    chosen = [case for case in PUBLIC_CASES
              if case.record["class"] == cls
              and (causal is None or case.record["init"].get("causal")
                   == causal)
              and (mode is None or case.record["mode"] == mode)]
    assert chosen, f"no public {cls} case with causal={causal}, mode={mode}"
    return [pytest.param(case, id=case.name) for case in chosen]
