"""The example submissions: the reference with one typical mistake each.

They are the group ``examples`` of the variant catalogue
(``kit/variants/examples.toml``, read by kit/variants.py): exact edits of
the reference, with what each must score.
``python -m kit.corpus.examples [--out DIR]`` writes them as
``DIR/<name>.py`` (default ``build/examples/``).
Generating them keeps them in step with the reference: an edit that no
longer matches it is an error naming the entry, not a stale example.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kit.variants import VariantError, load

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "build" / "examples"
GROUP = "examples"
ExampleError = VariantError   # the name callers catch
__all__ = ["ExampleError", "build_examples", "example_sources"]


def example_sources(catalogue: Path | None = None) -> dict[str, str]:
    """name -> source of every example, in file order, each headed by
    what the student got wrong."""
    return {name: f"# Example submission: {variant.about}.\n"
            + variant.source()
            for name, variant in load(GROUP, catalogue).items()}


def build_examples(out: Path = OUT) -> list[Path]:
    """Write every example to ``out/<name>.py``; return the paths."""
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, source in example_sources().items():
        path = out / f"{name}.py"
        path.write_text(source)
        paths.append(path)
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kit.corpus.examples",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT,
                        help="folder to write to (default: build/examples)")
    args = parser.parse_args(argv)
    try:
        paths = build_examples(args.out)
    except VariantError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {len(paths)} examples to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
