"""Whether the frozen test values are in step with what generates them,
without importing torch: ``python -m kit.values_fresh`` (what ``make check``
and ``make grade`` ask first; ``python -m kit.generate.values --check``
asks the same after importing the generator, about 1 s of torch).

The sources and the check are ``kit/generate/values.py``'s, which cannot
import them from here without changing its own hash, and with it the
committed manifest; ``kit_tests/test_perf_bench.py`` proves the two lists
and verdicts equal.
"""
from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "solutions" / "transformer_lm" / "modeling_attention.py"
OUT = ROOT / "test_values"
SOURCES = (REFERENCE, ROOT / "kit" / "generate" / "cases.py",
           ROOT / "kit" / "variants" / "mistakes.toml",
           ROOT / "kit" / "variants.py",
           ROOT / "kit" / "corpus" / "examples.py",
           ROOT / "kit" / "generate" / "draws.py",
           ROOT / "kit" / "generate" / "exact.py",
           ROOT / "kit" / "generate" / "steps.py",
           ROOT / "kit" / "generate" / "values.py")


def stale_sources(values: Path = OUT,
                  reference_path: Path = REFERENCE) -> list[str] | None:
    """The sources changed since the values were generated ([] when in
    step), or None when the manifest cannot be read."""
    try:
        recorded = json.loads((values / "manifest.json").read_text()
                              ).get("sources", {})
    except (OSError, ValueError, AttributeError):
        return None
    paths = [reference_path.resolve(), *SOURCES[1:]]
    changed = []
    for path in paths:
        try:
            name = str(path.relative_to(ROOT))
        except ValueError:
            name = str(path)
        if recorded.get(name) != hashlib.sha256(path.read_bytes()
                                                ).hexdigest():
            changed.append(name)
    return changed


def main() -> int:
    """Exit 1 with make_test_values's message when the values are stale."""
    changed = stale_sources()
    if changed is None:
        print(f"error: {OUT}/manifest.json cannot be read: run "
              f"`make test-values`", file=sys.stderr)
        return 1
    if changed:
        print(f"error: {OUT}/ is stale: {', '.join(changed)} changed since "
              f"it was generated: run `make test-values` (then `make "
              f"test`)", file=sys.stderr)
        return 1
    print(f"{OUT}/ is up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
