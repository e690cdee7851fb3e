"""A new edition of the hidden cases: new seeds and sizes, the same edges.

``make new-edition EDITION=2025`` (``python -m kit.generate.new_edition``)
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
  and no two sizes equal by coincidence; where no such draw is found, or
  the case has a size argument whose structure the draw does not know
  (one its ``arguments`` give no role: :data:`DRAWN_ROLES`), the sizes
  stay;
- the description's numbers, rewritten to the new sizes.

Names stay: they name the edge a case probes (published feedback shows
them) and the kit's tests and corpus refer to them. Public cases stay
unless ``--public`` (then their seeds move, except the course's and the
book's own examples).

This module is a source of the values (what it draws decides their
bytes); the command and its report are kit/generate/new_edition.py.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import random
import re
import tomllib
from pathlib import Path

from autograder import homework
from kit.generate.case_definition import Case

ROOT = Path(__file__).resolve().parents[2]
FILENAME = "edition.toml"
# The sizes an edition draws for a base size n >= 2: n to n + GROWTH * n
# (at least 2 more), never less: an edge that is a lower bound (33
# tokens, larger sizes) stays one.
GROWTH = 0.5
ATTEMPTS = 500          # draws of one case's sizes before its own stay
# The roles (a case's ``arguments``, kit/generate/case_definition.py)
# whose structure a draw knows (widths, heads, context): a case with an
# integer argument of no such role (a class's own, say a number of
# key/value heads that must divide the heads) keeps its sizes.
DRAWN_ROLES = ("input", "width", "heads", "context")


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
            f"[edition]\nname = {json.dumps(edition.name)}\n"
            f"seed = {edition.seed}\n"
            f"public = {str(edition.public).lower()}\n")


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
        init = {**case.init, **source.init}
        init[case.arguments["width"]] = \
            source.size("width") * source.size("heads")
        new = dataclasses.replace(case, init=init, batch=source.batch,
                                  seq=source.seq, seed=source.seed)
        return _described(case, new, case.cls in stacked)
    rng = random.Random(seed)
    drawn = {_argument(case, role) for role in DRAWN_ROLES}
    unknown = [k for k, v in case.init.items()
               if _is_size(v) and k not in drawn]
    for _ in range(0 if unknown else ATTEMPTS):
        new = _draw_sizes(case, rng, case.cls in stacked)
        if new is not None and not coincidences(new, case.cls in stacked):
            return _described(case, dataclasses.replace(new, seed=seed),
                              case.cls in stacked)
    return dataclasses.replace(case, seed=seed)


def _size(rng: random.Random, base: int) -> int:
    if base == 1:
        return 1
    return rng.randint(base, base + max(2, math.ceil(base * GROWTH)))


def _argument(case: Case, role: str) -> str | None:
    """The constructor argument of ``case`` that holds ``role`` (its
    ``arguments``), None when it declares none or does not pass it."""
    name = case.arguments.get(role)
    return name if name in case.init else None


def _widths(case: Case) -> tuple[str | None, str | None]:
    """The names of the input width and the width the heads split."""
    return _argument(case, "input"), _argument(case, "width")


def _draw_sizes(case: Case, rng: random.Random, stacked: bool
                ) -> Case | None:
    """One draw of ``case``'s sizes with its structure kept (None: the
    draw breaks it; draw again)."""
    if case.sizes_only or case.inputs == "book":
        return None
    init = {k: (_size(rng, v) if _is_size(v) else v)
            for k, v in case.init.items()}
    batch, seq = _size(rng, case.batch), _size(rng, case.seq)
    width_in, width = _widths(case)
    if case.inputs == "identity":
        seq = init[width_in]
    heads_name, context_name = _argument(case, "heads"), \
        _argument(case, "context")
    heads = init.get(heads_name) if heads_name else None
    if heads is not None and width and not stacked:
        head = case.init[width] // case.init[heads_name]
        head = 2 * init[width_in] if case.weights == "dropout_probe" \
            else _size(rng, head)
        init[width] = heads * head
    elif case.weights == "dropout_probe" and width:
        init[width] = 2 * init[width_in] * (heads or 1)
    context = case.init.get(context_name) if context_name else None
    if context is not None and (context > case.seq) != \
            (init[context_name] > seq):
        return None
    return dataclasses.replace(case, init=init, batch=batch, seq=seq)


def _is_size(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _heads(case: Case, stacked: bool) -> tuple[str, str]:
    """The names (in :func:`sizes`) of a head's size and of the width the
    heads split (a stacked class's width argument is one head's)."""
    _, width = _widths(case)
    return (width, "output") if stacked else ("head", width)


def sizes(case: Case, stacked: bool = False) -> dict[str, int]:
    """The named sizes of ``case`` (batch, seq, every integer constructor
    argument and, where there are heads, the head size or, for a stacked
    class, the output width), as kit_tests/test_case_table.py reads them
    from the manifest."""
    found = {"batch": case.batch, "seq": case.seq}
    found.update({k: v for k, v in case.init.items() if _is_size(v)})
    _, width = _widths(case)
    heads = _argument(case, "heads")
    if heads and width:
        head, split = _heads(case, stacked)
        if stacked:
            found[split] = case.init[heads] * case.init[head]
        else:
            found[head] = case.init[split] // case.init[heads]
    return found


def coincidences(case: Case, stacked: bool = False) -> list[str]:
    """Pairs of sizes (other than 1) equal by coincidence, not by the
    case's structure (one head: the head is the width; head size 1: the
    heads are the width; identity input: as long as it is wide)."""
    found = sizes(case, stacked)
    width_in, _ = _widths(case)
    head, split = _heads(case, stacked)
    implied = [{head, split}, {_argument(case, "heads"), split}]
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
