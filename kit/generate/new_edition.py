"""``make new-edition`` (``python -m kit.generate.new_edition``): write a
new edition of the hidden cases (kit/generate/edition.py draws it),
regenerate the values, and report the hidden tensors still equal to the
previous edition's, each with why (an identity input or weight, a bias of
zeros, the attention of one token, a mistake's NaN output): tensors the
cases fix by construction, not by seed. Any other equal tensor is a
failure (exit 1).
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import subprocess
import sys
import time
from pathlib import Path

from autograder import homework
from kit.generate.edition import (ROOT, Edition, edition_path, load,
                                  seed_of, text)


# --------------------------------------------------------------------------
# What stays equal, and why

def _reason(tensor) -> str | None:
    """Why a tensor equal across editions is fixed by construction (None:
    it is not, and must not have stayed)."""
    import torch
    if not tensor.is_floating_point():
        return None
    if torch.isnan(tensor).all():
        return "all NaN: a mistake's output that fails everywhere"
    values = set(torch.unique(tensor).tolist())
    if values == {1.0}:
        return "all ones: attention over one token"
    if values == {0.0}:
        return "all zeros: a bias fixed by construction"
    if values <= {0.0, 1.0}:
        return "identity: an input or a weight fixed by construction"
    return None


@dataclasses.dataclass(frozen=True)
class Reused:
    """A hidden tensor equal to the previous edition's."""

    key: str
    reason: str | None      # None: not explained: the edition failed


def reused(previous: dict, current: dict) -> list[Reused]:
    """Every tensor of ``current`` equal (shape and bits) to the one of
    the same key in ``previous``, with why."""
    import torch
    found = []
    for key in sorted(current.keys() & previous.keys()):
        a, b = current[key], previous[key]
        if a.shape == b.shape and a.dtype == b.dtype and \
                torch.equal(a.view(-1).view(torch.uint8)
                            if a.is_floating_point() else a,
                            b.view(-1).view(torch.uint8)
                            if b.is_floating_point() else b):
            found.append(Reused(key, _reason(a)))
    return found


def report(found: list[Reused], total: int) -> str:
    """The lines printed after a new edition: how many hidden tensors
    stayed equal, grouped by why."""
    lines = [f"{len(found)} of {total} hidden tensors equal the previous "
             f"edition's:"]
    by_reason: dict[str, list[str]] = {}
    for item in found:
        by_reason.setdefault(item.reason or "NOT EXPLAINED (a seed or size "
                             "the edition did not move)", []).append(item.key)
    for why, keys in sorted(by_reason.items()):
        lines.append(f"  {len(keys):3}  {why}: {', '.join(keys)}")
    return "\n".join(lines)


# --------------------------------------------------------------------------
# The command

def _read(path: Path) -> dict:
    from safetensors.torch import load_file
    return load_file(str(path)) if path.is_file() else {}


def new_edition(edition: Edition, values: Path | None = None,
                edition_file: Path | None = None
                ) -> tuple[list[Reused], int]:
    """Write ``edition`` to its file and regenerate the values (the
    homework's test_values/) with ``make test-values``'s generator in a
    process of its own (it reads the edition when imported; its progress
    is printed); the hidden tensors still equal to the previous values',
    and how many there are. SystemExit when the generator fails (the
    previous edition file is put back) or the public values moved though
    the edition keeps them."""
    values = values or homework.staff().test_values
    edition_file = edition_file or edition_path()
    previous = _read(values / "hidden.safetensors")
    public = _bytes(values / "public.safetensors")
    before = _bytes(edition_file)
    # The public values stay only if neither edition moves them.
    last = load(edition_file)
    moved_before = last is not None and last.public
    edition_file.write_text(text(edition))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "kit.generate",
                           "test-values"], cwd=ROOT, env=env)
    if done.returncode:
        if before is None:
            edition_file.unlink()
        else:
            edition_file.write_bytes(before)
        raise SystemExit(f"the values generator failed (exit "
                         f"{done.returncode}) on edition {edition.name!r}: "
                         f"{edition_file} is as it was; run `make "
                         f"test-values` once the cause above is fixed")
    if public is not None and not (edition.public or moved_before) and \
            _bytes(values / "public.safetensors") != public:
        raise SystemExit("the public values changed though the edition "
                         "keeps them: a public case depends on a hidden "
                         "one (kit/generate/edition.py)")
    current = _read(values / "hidden.safetensors")
    return reused(previous, current), len(current)


def _bytes(path: Path) -> bytes | None:
    return path.read_bytes() if path.is_file() else None


def main(argv: list[str] | None = None) -> int:
    """``make new-edition``: exit 0 when every reused tensor is explained,
    1 otherwise."""
    parser = argparse.ArgumentParser(
        prog="python -m kit.generate.new_edition",
        description="Redraw every hidden case (seeds, sizes), write the "
                    "edition file and regenerate the frozen values; report "
                    "the hidden tensors still equal to the previous ones.")
    chosen = parser.add_mutually_exclusive_group()
    chosen.add_argument("--edition", help="the edition's name (a year): "
                        "its seed is drawn from the name")
    chosen.add_argument("--seed", type=int, help="the edition's seed")
    parser.add_argument("--public", action="store_true",
                        help="move the public cases' seeds too (not the "
                             "course's and the book's examples)")
    args = parser.parse_args(argv)
    if args.edition is None and args.seed is None:
        parser.error("name the edition: `make new-edition EDITION=2025` "
                     "(or SEED=<integer>)")
    name = args.edition if args.edition is not None else f"seed {args.seed}"
    seed = seed_of(args.edition) if args.edition is not None else args.seed
    start = time.monotonic()
    found, total = new_edition(Edition(name, seed, args.public))
    print(report(found, total))
    print(f"edition {name!r} (seed {seed}) written to {edition_path()} in "
          f"{time.monotonic() - start:.1f} s; then `make test`, commit it "
          f"with test_values/, and grade as usual")
    return 0 if all(item.reason for item in found) else 1


if __name__ == "__main__":
    sys.exit(main())
