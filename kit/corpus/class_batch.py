"""A generated class of at least 50 submissions for the staff tools (class
report, similarity): the variant catalogue (kit/variants/: correct
styles, mistakes, hostile code, the examples), and near-copies (local names
renamed, comments reworded, statements reordered) of independent
solutions, some with notebooks whose inline answers are copied too.

    python -m kit.corpus.class_batch build/class_batch
    python -m autograder grade --out build/class_grades build/class_batch/*

The near-copies are named ``copy*_of_<original>`` so a reader can check the
similarity ranking against the truth.
"""
from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import nbformat

from autograder import homework
from kit.corpus import near_copies as C
from kit import variants

ROOT = Path(__file__).resolve().parents[2]
# Correct styles that rewrite whole methods: independent solutions.
INDEPENDENT = ("reference", "einsum", "loop_heads", "nanogpt_style")
DISGUISES = {"copy1": lambda s: C.recomment(C.rename(s)),
             "copy2": lambda s: C.reorder(C.rename(s)),
             "copy3": lambda s: C.reorder(C.recomment(s))}
# Independent answers: every student words Q1 differently (one opening,
# one reason, one consequence of several); the deliberate copy rewords
# only case and punctuation.
_OPEN = ("We scale because", "Dividing by sqrt(d) matters since",
         "The factor is there as", "My understanding is that",
         "Scaling helps:")
_REASON = ("dot products grow with the key size",
           "the variance of q.k is d for unit inputs",
           "large logits make the softmax peaky",
           "without it one key takes all the weight",
           "the score magnitude depends on the dimension")
_THEN = ("and the gradients vanish.", "so training becomes unstable.",
         "which saturates the softmax.", "so we normalise it back to one.",
         "hence the attention is nearly one-hot.", "and learning stalls.")


# The reference's own wording, which no ``answer(i)`` gives: with more
# entries than the combinations, another student's words equalled it and
# tied with the one deliberate copy.
REFERENCE_ANSWER = ("Without the scale the scores grow with the key size, "
                    "and the softmax puts almost all weight on one key.")


def answer(i: int) -> str:
    """Student ``i``'s own wording of Q1."""
    return (f"{_OPEN[i % len(_OPEN)]} {_REASON[(i // 5) % len(_REASON)]}"
            f" {_THEN[(i // 3) % len(_THEN)]}")


def _notebook(path: Path, text: str) -> None:
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_markdown_cell(f"**Answer Q1:** {text}")
    cell.metadata["kit"] = {"question": "Q1"}
    nb.cells.append(cell)
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, str(path))


def _folder(dest: Path, name: str, source: str,
            text: str | None = None) -> None:
    folder = dest / name
    hw = homework.staff()
    (folder / hw.module_file).parent.mkdir(parents=True)
    (folder / hw.module_file).write_text(source)
    if text is not None:
        _notebook(folder / hw.notebook.relative_to(hw.root), text)


def build(dest: Path) -> list[Path]:
    """Write the class into ``dest`` (replaced); returns the submissions."""
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    # Folder names: the entry's name, with its group's for a name taken.
    corpus: dict[str, str] = {}
    for key, variant in variants.load_all().items():
        name = variant.name if variant.name not in corpus else \
            key.replace("/", "_")
        corpus[name] = variant.source()
    for i, (name, source) in enumerate(corpus.items()):
        own = REFERENCE_ANSWER if name == "reference" else \
            answer(i) if i % 2 == 0 else None
        _folder(dest, name, source, own)
    for original in INDEPENDENT:
        for label, disguise in DISGUISES.items():
            # the first copy also copies the reference's answer, reworded
            copied = (REFERENCE_ANSWER.upper().replace(" ", "  ") + "!"
                      if original == "reference" and label == "copy1"
                      else None)
            _folder(dest, f"{label}_of_{original}",
                    disguise(corpus[original]), copied)
    return sorted(dest.iterdir())


def main(argv: list[str] | None = None) -> int:
    """Write the class and say how many submissions it holds."""
    parser = argparse.ArgumentParser(
        prog="python -m kit.corpus.class_batch",
        description=__doc__.split("\n\n")[0])
    parser.add_argument("dest", nargs="?", type=Path,
                        default=ROOT / "build" / "class_batch")
    args = parser.parse_args(argv)
    written = build(args.dest)
    print(f"wrote {len(written)} submissions to {args.dest}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
