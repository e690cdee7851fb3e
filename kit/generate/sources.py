"""What the frozen test values are built from, and whether they are in
step with it, without importing torch (``make fresh-values``, which
``make check``, ``make grade`` and the releases run first, pays no torch).

``kit/generate/values.py`` (the generator, which imports torch) records
these sources' hashes in ``test_values/manifest.json``; a change to any of
them makes the committed values stale.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from autograder import homework

ROOT = Path(__file__).resolve().parents[2]


def sources(hw: homework.Homework | None = None) -> tuple[Path, ...]:
    """Everything the bytes of ``hw``'s values (default: the homework in
    use) depend on, besides torch, the reference first. The mistakes are
    the reference edited by the catalogue's mistakes.toml, read by
    kit/variants.py, applied by kit/corpus/examples.py (apply_edits); the
    cases and steps are the profile's (homework.toml's [data])."""
    hw = hw or homework.staff()
    return (hw.reference, hw.cases, hw.catalogue / "mistakes.toml",
            ROOT / "kit" / "variants.py",
            ROOT / "kit" / "corpus" / "examples.py",
            ROOT / "kit" / "generate" / "draws.py",
            ROOT / "kit" / "generate" / "exact.py",
            hw.steps,
            ROOT / "kit" / "generate" / "values.py",
            ROOT / "kit" / "generate" / "case_definition.py",
            ROOT / "kit" / "generate" / "edition.py",
            # The edition (`make new-edition`; absent: the cases as
            # written).
            hw.cases.with_name("edition.toml"))


class StaleValues(Exception):
    """The frozen values no longer match what generates them."""


def _relative(path: Path) -> str:
    """The manifest's name for a source: relative to the homework's folder
    for the homework's own files, to the kit for the kit's (the same names
    wherever either lives: a homework moved to another folder, or the kit
    installed with pip, keeps its values fresh)."""
    path = path.resolve()
    for base in (homework.staff().root, ROOT):
        if path.is_relative_to(base):
            return path.relative_to(base).as_posix()
    return str(path)


def source_hashes(reference_path: Path | None = None,
                  hw: homework.Homework | None = None) -> dict[str, str]:
    """Path (relative to the kit) -> sha256 of each source of ``hw``'s
    values (default: the homework in use; its reference unless
    ``reference_path``)."""
    found = sources(hw)
    paths = [(reference_path or found[0]).resolve(), *found[1:]]
    return {_relative(p): hashlib.sha256(p.read_bytes()).hexdigest()
            if p.exists() else "absent" for p in paths}


def check_fresh(values: Path | None = None,
                reference_path: Path | None = None,
                hw: homework.Homework | None = None) -> None:
    """Raise StaleValues naming what changed since ``make test-values``
    in ``hw``'s values (default: the homework in use; its values folder
    unless ``values``)."""
    values = values or (hw or homework.staff()).test_values
    try:
        recorded = json.loads((values / "manifest.json").read_text()
                              ).get("sources", {})
    except (OSError, ValueError, AttributeError) as exc:
        raise StaleValues(f"{values}/manifest.json: {exc}: run "
                          f"`make test-values`") from None
    changed = [path for path, digest in
               source_hashes(reference_path, hw).items()
               if recorded.get(path) != digest]
    if changed:
        raise StaleValues(f"{values}/ is stale: {', '.join(changed)} "
                          f"changed since it was generated: run "
                          f"`make test-values` (then `make test`)")
