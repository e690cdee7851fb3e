"""A new edition of the hidden cases: new seeds and sizes, the same edges.

``make new-edition EDITION=2025`` (``python -m kit.generate.edition``)
writes the edition file (``edition.toml`` beside the profile's cases:
``kit/generate/edition.toml`` here) and regenerates the frozen values.
The edition is a source of the values like the cases themselves
(kit/generate/sources.py hashes it), so ``make test-values`` rebuilds the
same edition byte for byte and ``make test`` refuses values older than
it. Without the file the cases are exactly ``CASES`` (the shipped
values, which reproduce the 2022 course's).

What an edition redraws, per hidden case (:func:`apply`):

- the seed (so every drawn weight and input), from the edition's seed and
  the case's own, so cases that share a seed (a causal pair) still share
  their weights and input;
- every size other than 1 (a one-token, one-head or head-size-1 case keeps
  its edge), never below its base size (a long case stays long), with the
  structure kept (heads times head size, a context longer than the
  sequence, an identity input as wide as it is long, the dropout probe's
  values ``[I; I]``, a fused case the concatenation of its source's heads)
  and no two sizes equal by coincidence; where no such draw is found the
  sizes stay;
- the description's numbers, rewritten to the new sizes.

Names stay: they name the edge a case probes (published feedback shows
them) and the kit's tests and corpus refer to them. Public cases stay
unless ``--public`` (then their seeds move, except the course's and the
book's own examples).

The command compares every hidden tensor with the previous values and
reports those still equal, each with why (an identity input or weight, a
bias of zeros, the attention of one token, a mistake's NaN output):
tensors the cases fix by construction, not by seed.
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import math
import os
import random
import re
import subprocess
import sys
import time
import tomllib
from pathlib import Path

from autograder import homework
from kit.generate.cases import Case

ROOT = Path(__file__).resolve().parents[2]
FILENAME = "edition.toml"
# The sizes an edition draws for a base size n >= 2: n to n + GROWTH * n
# (at least 2 more), never less: an edge that is a lower bound (33
# tokens, larger sizes) stays one.
GROWTH = 0.5
ATTEMPTS = 500          # draws of one case's sizes before its own stay


@dataclasses.dataclass(frozen=True)
class Edition:
    """One edition: its name (a year, say) and the seed it draws from."""

    name: str
    seed: int
    public: bool = False    # the public cases' seeds move too

    def case_seed(self, seed: int) -> int:
        """The edition's seed for a case of base seed ``seed`` (cases
        sharing a seed keep sharing it)."""
        digest = hashlib.sha256(f"{self.seed}:{seed}".encode()).digest()
        return int.from_bytes(digest[:4], "big") % (2 ** 31 - 1) + 1


def edition_path(cases: Path | None = None) -> Path:
    """The edition file of the homework in use: beside its cases."""
    return (cases or homework.staff().cases).with_name(FILENAME)


def load(path: Path | None = None) -> Edition | None:
    """The edition recorded in ``path`` (default :func:`edition_path`), or
    None when there is none (the base cases). SystemExit naming the file
    and the fix when it is not a valid edition."""
    path = path or edition_path()
    if not path.is_file():
        return None
    try:
        data = tomllib.loads(path.read_text())["edition"]
        edition = Edition(str(data["name"]), int(data["seed"]),
                          bool(data.get("public", False)))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SystemExit(f"{path}: not an edition ({exc}): run `make "
                         f"new-edition EDITION=<name>` again, or delete "
                         f"the file for the base cases") from None
    return edition


def seed_of(name: str) -> int:
    """The seed an edition called ``name`` draws from (stable)."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "big")


def text(edition: Edition) -> str:
    """The edition file's text."""
    return (f"# Written by `make new-edition`: the hidden cases' edition\n"
            f"# (kit/generate/edition.py). Delete it for the base cases.\n"
            f"[edition]\nname = {edition.name!r}\nseed = {edition.seed}\n"
            f"public = {str(edition.public).lower()}\n").replace("'", '"')


# --------------------------------------------------------------------------
# The cases of an edition

def apply(cases: list[Case], edition: Edition | None,
          stacked: tuple[str, ...] = ()) -> list[Case]:
    """``cases`` as ``edition`` draws them (unchanged when None).
    ``stacked``: the classes whose width argument is one head's, not the
    output's (the cases module's ``STACKED_HEADS``)."""
    if edition is None:
        return list(cases)
    done: dict[str, Case] = {}
    for case in cases:
        if case.set == "hidden":
            done[case.name] = _redrawn(case, edition, stacked, done)
        elif edition.public and not case.same_sizes and \
                not case.sizes_only and not case.weights.startswith("concat:"):
            done[case.name] = dataclasses.replace(
                case, seed=edition.case_seed(case.seed))
        else:
            done[case.name] = case
    return list(done.values())


def _redrawn(case: Case, edition: Edition, stacked: tuple[str, ...],
             done: dict[str, Case]) -> Case:
    seed = edition.case_seed(case.seed)
    if case.weights.startswith("concat:"):
        # The fused heads of a case drawn before it, with its seed.
        source = done[case.weights.split(":", 1)[1]]
        init = {**case.init, **source.init, "d_out":
                source.init["d_out"] * source.init["num_heads"]}
        new = dataclasses.replace(case, init=init, batch=source.batch,
                                  seq=source.seq, seed=source.seed)
        return _described(case, new, case.cls in stacked)
    rng = random.Random(seed)
    for _ in range(ATTEMPTS):
        new = _draw_sizes(case, rng, case.cls in stacked)
        if new is not None and not coincidences(new, case.cls in stacked):
            return _described(case, dataclasses.replace(new, seed=seed),
                              case.cls in stacked)
    return dataclasses.replace(case, seed=seed)


def _size(rng: random.Random, base: int) -> int:
    if base == 1:
        return 1
    return rng.randint(base, base + max(2, math.ceil(base * GROWTH)))


def _widths(init: dict) -> tuple[str | None, str | None]:
    """The names of the input width and the width the heads split."""
    width_in = next((k for k in ("input_size", "d_in") if k in init), None)
    width = next((k for k in ("hidden", "d_out") if k in init), None)
    return width_in, width


def _draw_sizes(case: Case, rng: random.Random, stacked: bool
                ) -> Case | None:
    """One draw of ``case``'s sizes with its structure kept (None: the
    draw breaks it; draw again)."""
    if case.sizes_only or case.inputs == "book":
        return None
    init = {k: (_size(rng, v) if _is_size(v) else v)
            for k, v in case.init.items()}
    batch, seq = _size(rng, case.batch), _size(rng, case.seq)
    width_in, width = _widths(init)
    if case.inputs == "identity":
        seq = init[width_in]
    heads = init.get("num_heads")
    if heads is not None and width and not stacked:
        head = case.init[width] // case.init["num_heads"]
        head = 2 * init[width_in] if case.weights == "dropout_probe" \
            else _size(rng, head)
        init[width] = heads * head
    elif case.weights == "dropout_probe" and width:
        init[width] = 2 * init[width_in] * (heads or 1)
    context = case.init.get("context_length")
    if context is not None and (context > case.seq) != \
            (init["context_length"] > seq):
        return None
    return dataclasses.replace(case, init=init, batch=batch, seq=seq)


def _is_size(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _heads(case: Case, stacked: bool) -> tuple[str, str]:
    """The names (in :func:`sizes`) of a head's size and of the width the
    heads split (a stacked class's width argument is one head's)."""
    _, width = _widths(case.init)
    return ("d_out", "output") if stacked else ("head", width)


def sizes(case: Case, stacked: bool = False) -> dict[str, int]:
    """The named sizes of ``case`` (batch, seq, every integer constructor
    argument and, where there are heads, the head size or, for a stacked
    class, the output width), as kit_tests/test_case_table.py reads them
    from the manifest."""
    found = {"batch": case.batch, "seq": case.seq}
    found.update({k: v for k, v in case.init.items() if _is_size(v)})
    _, width = _widths(case.init)
    if "num_heads" in case.init and width:
        head, split = _heads(case, stacked)
        if stacked:
            found[split] = case.init["num_heads"] * case.init[head]
        else:
            found[head] = case.init[split] // case.init["num_heads"]
    return found


def coincidences(case: Case, stacked: bool = False) -> list[str]:
    """Pairs of sizes (other than 1) equal by coincidence, not by the
    case's structure (one head: the head is the width; head size 1: the
    heads are the width; identity input: as long as it is wide)."""
    found = sizes(case, stacked)
    width_in, _ = _widths(case.init)
    head, split = _heads(case, stacked)
    implied = [{head, split}, {"num_heads", split}]
    if case.inputs == "identity":
        implied.append({"seq", width_in})
    names = list(found)
    return [f"{a} = {b}" for i, a in enumerate(names) for b in names[i + 1:]
            if found[a] == found[b] != 1 and {a, b} not in implied]


_WORDS = ("zero one two three four five six seven eight nine ten eleven "
          "twelve").split()


def _described(base: Case, new: Case, stacked: bool = False) -> Case:
    """``new`` with the base description's numbers (digits, and number
    words before "heads") rewritten to its sizes."""
    old, now = sizes(base, stacked), sizes(new, stacked)
    mapping = {old[k]: now[k] for k in old if old[k] != 1 and k in now}

    def number(match: re.Match) -> str:
        value = int(match.group(0))
        return str(mapping.get(value, value))

    def word(match: re.Match) -> str:
        value = _WORDS.index(match.group(1))
        found = mapping.get(value, value)
        spelled = _WORDS[found] if found < len(_WORDS) else str(found)
        return f"{spelled} {match.group(2)}"

    described = re.sub(r"(?<![\d.])\d+(?![\d.])", number, base.description)
    described = re.sub(rf"\b({'|'.join(_WORDS)}) (heads|query heads)\b",
                       word, described)
    return dataclasses.replace(new, description=described)


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
    if public is not None and not edition.public and \
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
        prog="python -m kit.generate.edition",
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
          f"{time.monotonic() - start:.1f} s; then `make generate` (the "
          f"facts), `make test`, and grade as usual")
    return 0 if all(item.reason for item in found) else 1


if __name__ == "__main__":
    sys.exit(main())
