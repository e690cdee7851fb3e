"""The generators, in one list: every file built from the reference, the
rubric, the cases and the catalogue, what it is built from, whether it is
stale, and how to write it again.

``make generate`` (``python -m kit.generate``) writes them all in list
order; ``python -m kit.generate NAME...`` writes some (each make target,
``make skeleton`` ..., is that). ``python -m kit.generate --check`` lists
every stale output with the command that refreshes it (``kit_tests/
conftest.py`` asks before any test; ``make fresh-values`` asks about the
values and the shipped mistakes, which need no torch).

Every generator answers the same two questions: ``stale(reference)`` (one
line per stale output, naming the command; ``reference`` stands in for
the reference, for tests) and ``write()`` (the exit status of its run).
This module imports no generator until one is asked.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Generator:
    """One generator: the make target that runs it alone, what it reads,
    what it writes (paths, read from its module), ``stale`` and
    ``write``."""
    name: str
    reads: str
    writes: Callable[[], tuple[Path, ...]]
    stale: Callable[[Path | None], list[str]]
    write: Callable[[], int]


def _skeleton_writes() -> tuple[Path, ...]:
    from autograder import homework
    return (homework.current().module, homework.staff().reference)


def _skeleton_stale(reference: Path | None) -> list[str]:
    from kit.generate import skeleton
    line = skeleton.stale(reference)
    return [line] if line else []


def _skeleton_write() -> int:
    from kit.generate import skeleton
    return skeleton.write()


def _notebook_writes() -> tuple[Path, ...]:
    from autograder import homework
    return (homework.staff().notebook, homework.staff().questions)


def _notebook_stale(reference: Path | None) -> list[str]:
    from autograder import homework
    from kit.generate import notebook
    try:
        line = notebook.stale()
    except notebook.MasterError as exc:
        return [f"{exc}: fix {homework.staff().notebook_source.name}, then "
                f"run "
                f"`make build-notebook`"]
    return [line] if line else []


def _notebook_write() -> int:
    from kit.generate import notebook
    return notebook.write()


def _facts_writes() -> tuple[Path, ...]:
    from kit.generate import facts
    return tuple(facts.home() / doc for doc in facts.documents())


def _facts_stale(reference: Path | None) -> list[str]:
    from autograder.rubric import load_rubric
    from kit.generate import facts
    return [f"{doc}: run `make facts`" for doc in facts.stale(load_rubric())]


def _facts_write() -> int:
    from kit.generate import facts
    return facts.write()


def _mistakes_writes() -> tuple[Path, ...]:
    from autograder import homework
    return (homework.staff().mistakes,)


def _mistakes_stale(reference: Path | None) -> list[str]:
    from kit import variants
    from kit.generate import mistakes
    try:
        line = mistakes.stale()
    except variants.VariantError as exc:
        return [f"{exc}: fix the catalogue, then run `make mistakes`"]
    return [line] if line else []


def _mistakes_write() -> int:
    from kit.generate import mistakes
    return mistakes.write()


def _values_writes() -> tuple[Path, ...]:
    from autograder import homework
    return (homework.staff().test_values,)


def _values_stale(reference: Path | None) -> list[str]:
    # No torch: the manifest's hashes of the sources (kit/generate/sources.py).
    from kit.generate import sources
    try:
        sources.check_fresh(reference_path=reference)
    except sources.StaleValues as exc:
        return [str(exc)]
    return []


def _values_write() -> int:
    from kit.generate import values
    return values.write()


# In the order they run: the skeleton syncs the reference's task headers
# (which the values hash) before the values are frozen.
GENERATORS: tuple[Generator, ...] = (
    Generator("skeleton", "the reference; the rubric's points",
              _skeleton_writes, _skeleton_stale, _skeleton_write),
    Generator("build-notebook", "the notebook's source; the rubric",
              _notebook_writes, _notebook_stale, _notebook_write),
    Generator("facts", "the rubric", _facts_writes, _facts_stale,
              _facts_write),
    Generator("mistakes", "the catalogue's mistakes.toml", _mistakes_writes,
              _mistakes_stale, _mistakes_write),
    Generator("test-values", "kit/generate/sources.py's SOURCES (the "
              "reference, the cases, the catalogue, the generator)",
              _values_writes, _values_stale, _values_write),
)


class UnknownGenerator(KeyError):
    """A name that is not a generator's."""


def select(names: list[str] | None = None) -> list[Generator]:
    """The generators called ``names`` in list order (all if None)."""
    known = {g.name: g for g in GENERATORS}
    unknown = [n for n in names or [] if n not in known]
    if unknown:
        raise UnknownGenerator(f"no generator {', '.join(unknown)} (known: "
                               f"{', '.join(known)})")
    return [g for g in GENERATORS if names is None or g.name in names]


def stale(names: list[str] | None = None,
          reference_path: Path | None = None) -> list[str]:
    """One line per stale output of the generators ``names`` (all if
    None), each naming the command that refreshes it; [] when in step."""
    return [line for g in select(names) for line in g.stale(reference_path)]
