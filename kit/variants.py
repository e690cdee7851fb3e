"""The catalogue of submission variants: each an edit of the live reference.

Correct styles, common mistakes, hostile code and the submissions that once
fooled the grader are all kept as edits of
``solutions/transformer_lm/modeling_attention.py`` in ``kit/variants/*.toml``
(one file per group), never as copies: a variant follows the reference when
it changes, and an edit that no longer applies is an error naming the entry
and what to update.

Every entry is a TOML table::

    [name]
    about = "what it is (and what the grader once got wrong)"
    edits = [["exact text in the reference", "its replacement"], ...]

Further keys are the group's own (what the entry must score, what its
feedback must say); :class:`Variant` keeps them in ``fields``.
"""
from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kit.examples import ExampleError, apply_edits

ROOT = Path(__file__).resolve().parents[1]
CATALOGUE = ROOT / "kit" / "variants"
REFERENCE = ROOT / "solutions" / "transformer_lm" / "modeling_attention.py"


class VariantError(ExampleError):
    """A variant's edit does not apply to the reference, or an entry is
    malformed; the message names the entry and what to update."""


@dataclass(frozen=True)
class Variant:
    """One entry of the catalogue."""

    name: str
    group: str
    about: str
    edits: tuple[tuple[str, str], ...]
    fields: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"kit/variants/{self.group}.toml [{self.name}]"

    def source(self, reference: str | None = None) -> str:
        """The reference (``reference`` text, else the live file) with this
        variant's edits applied."""
        base = REFERENCE.read_text() if reference is None else reference
        try:
            return apply_edits(base, self.edits, self.label)
        except ExampleError as exc:
            raise VariantError(
                f"{exc}; if the reference changed on purpose, edit "
                f"{self.label} to match it") from None


def load(group: str, catalogue: Path = CATALOGUE) -> dict[str, Variant]:
    """name -> :class:`Variant` of ``catalogue/<group>.toml``, in file
    order."""
    path = catalogue / f"{group}.toml"
    try:
        table = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise VariantError(f"kit/variants/{group}.toml: {exc}") from None
    variants = {}
    for name, entry in table.items():
        label = f"kit/variants/{group}.toml [{name}]"
        if not isinstance(entry, dict) or "edits" not in entry:
            raise VariantError(f"{label}: an entry needs `edits`")
        edits = entry["edits"]
        if not all(isinstance(e, list) and len(e) == 2
                   and all(isinstance(s, str) for s in e) for e in edits):
            raise VariantError(f"{label}: `edits` must be a list of "
                               f"[old, new] string pairs")
        rest = {k: v for k, v in entry.items() if k not in ("about", "edits")}
        variants[name] = Variant(name, group, entry.get("about", ""),
                                 tuple((old, new) for old, new in edits),
                                 rest)
    return variants


def groups(catalogue: Path = CATALOGUE) -> list[str]:
    """The catalogue's groups (its file names), sorted."""
    return sorted(p.stem for p in catalogue.glob("*.toml"))
