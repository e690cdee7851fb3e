"""The example submissions: the reference with one typical mistake each.

``examples/examples.toml`` lists each example as exact edits of the
reference; ``python -m kit.examples [--out DIR]`` writes them as
``DIR/<name>.py`` (default ``build/examples/``). Generating them keeps them
in step with the reference: an edit that no longer matches it is an error,
not a stale example.
"""
from __future__ import annotations

import argparse
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "examples" / "examples.toml"
REFERENCE = ROOT / "solutions" / "transformer_lm" / "modeling_attention.py"
OUT = ROOT / "build" / "examples"


class ExampleError(ValueError):
    """An example's edit does not apply to the reference."""


def apply_edits(source: str, edits: list, label: str,
                where: str = REFERENCE.name) -> str:
    """``source`` with each ``(old, new)`` edit applied; every ``old`` must
    appear exactly once (else ExampleError naming ``label``)."""
    for old, new in edits:
        count = source.count(old)
        if count != 1:
            raise ExampleError(
                f"{label}: {old.strip()!r} appears {count} times in {where} "
                f"(expected once): update the edit to the reference")
        source = source.replace(old, new)
    return source


def example_sources(spec: Path = SPEC,
                    reference: Path = REFERENCE) -> dict[str, str]:
    """name -> source of every example, in file order."""
    examples = tomllib.loads(spec.read_text())
    base = reference.read_text()
    sources = {}
    for name, example in examples.items():
        source = apply_edits(base, example["edits"], f"{spec.name} [{name}]",
                             reference.name)
        header = f"# Example submission: {example['description']}.\n"
        sources[name] = header + source
    return sources


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
    parser = argparse.ArgumentParser(prog="python -m kit.examples",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT,
                        help="folder to write to (default: build/examples)")
    args = parser.parse_args(argv)
    try:
        paths = build_examples(args.out)
    except ExampleError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {len(paths)} examples to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
