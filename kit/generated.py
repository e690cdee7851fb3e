"""Is every generated file in step with what generates it?

The skeleton, the notebook, the documents' facts blocks, the shipped
mistake messages and the frozen values are built from the reference, the
rubric, the cases and the catalogue. After an instructor changes one of
those, this is the first thing that fails (``kit_tests/conftest.py`` runs
it before any test), and it names what to run instead of letting dozens of
tests fail on stale files.
"""
from __future__ import annotations

import sys
from pathlib import Path

from autograder.rubric import load_rubric


def stale(reference_path: Path | None = None) -> list[str]:
    """One line per generated file that is stale, saying what to run;
    ``reference_path`` stands in for the reference (tests)."""
    from kit.generate import facts, mistakes, notebook, skeleton
    from kit.generate.values import StaleValues, check_fresh
    rubric = load_rubric()
    reference_path = reference_path or skeleton.REFERENCE
    found = [skeleton.stale(reference_path, rubric=rubric)]
    try:
        found.append(notebook.stale())
    except notebook.MasterError as exc:
        found.append(f"{exc}: fix {notebook.MASTER.name}, then run "
                     f"`make build-notebook`")
    found = [line for line in found if line]
    found += [f"{doc}: run `make facts`" for doc in facts.stale(rubric)]
    found += [line for line in [mistakes.stale()] if line]
    try:
        check_fresh(reference_path=reference_path)
    except StaleValues as exc:
        found.append(str(exc))
    return found


def main() -> int:
    lines = stale()
    for line in lines:
        print(f"stale: {line}", file=sys.stderr)
    if lines:
        print("(`make generate` runs them all)", file=sys.stderr)
    return 1 if lines else 0


if __name__ == "__main__":
    sys.exit(main())
