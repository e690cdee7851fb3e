"""Is every generated file in step with what generates it?

The skeleton, the notebook, the documents' facts blocks and the frozen
values are built from the reference, the rubric, the cases and the
catalogue. After an instructor changes one of those, this is the first
thing that fails (``kit_tests/conftest.py`` runs it before any test), and
it names what to run instead of letting dozens of tests fail on stale
files.
"""
from __future__ import annotations

import sys
from pathlib import Path

from autograder.rubric import load_rubric


def stale(reference_path: Path | None = None) -> list[str]:
    """One line per generated file that is stale, saying what to run;
    ``reference_path`` stands in for the reference (tests)."""
    from kit import facts, notebook, skeleton
    from kit.make_test_values import StaleValues, check_fresh
    rubric = load_rubric()
    found = []
    reference_path = reference_path or skeleton.REFERENCE
    reference = reference_path.read_text()
    if skeleton.sync_points(reference, rubric) != reference or \
            not skeleton.SKELETON.exists() or \
            skeleton.SKELETON.read_text() != \
            skeleton.generate_skeleton(reference):
        found.append(f"{skeleton.SKELETON.relative_to(facts.ROOT)} (or the "
                     f"reference's task headers): run `make skeleton`")
    try:
        built = notebook.render(notebook.MASTER, None)
    except notebook.MasterError as exc:
        found.append(f"{exc}: fix {notebook.MASTER.name}, then run "
                     f"`make build-notebook`")
    else:
        if not notebook.OUT.exists() or notebook.OUT.read_text() != built:
            found.append(f"{notebook.OUT.relative_to(facts.ROOT)}: run "
                         f"`make build-notebook`")
    found += [f"{doc}: run `make facts`" for doc in facts.stale(rubric=rubric)]
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
