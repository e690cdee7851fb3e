"""Write a new homework's folder from the kit's template (`python -m kit
new-homework DIR`, `make new-homework DIR=...`, or `homework-kit
new-homework DIR` once installed).

The template (kit/templates/classifier/) is a complete homework of
another shape than attention's: layer normalisation with its own
``self.weight`` and ``self.bias`` (parameters without a layer around them)
and a softmax classifier that returns log-probabilities (the inputs of a
cross-entropy: the values need the exact ``log`` of kit/generate/
exact.py), its own shape-comment names (``num_classes``), rubric, cases,
mistakes and notebook. The folder may be anywhere (a course's own
repository). What it writes is the template with the homework's name put
in, the kit's own ``python_features.toml`` and ``imports.toml`` (the
grader's environment), and the generated files empty: then
``make generate HOMEWORK=DIR`` (or ``--generate`` here) fills them, and
the homework releases and grades with no kit code touched.
"""
from __future__ import annotations

import argparse
import re
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = ROOT / "kit" / "templates" / "classifier"
# The grader's environment, the same for every homework: the kit's own.
KIT_DATA = (ROOT / "autograder" / "python_features.toml",
            ROOT / "autograder" / "imports.toml")
# What `make generate` writes: empty until it runs (the profile checks
# that every file it names exists).
GENERATED = ("classifier/modeling_classifier.py",
             "assignment/classifier.ipynb", "autograder/mistakes.toml",
             "autograder/questions.toml")
PLACEHOLDER = "__NAME__"
_NAME = re.compile(r"[a-z][a-z0-9_-]{0,40}")


class NewHomeworkError(ValueError):
    """The folder or the name cannot be used; the message says the fix."""


def write(folder: Path, name: str | None = None) -> Path:
    """Write the template into the new (or empty) ``folder`` as homework
    ``name`` (default: the folder's name); return the folder."""
    folder = folder.resolve()
    name = name or folder.name
    if not _NAME.fullmatch(name):
        raise NewHomeworkError(
            f"homework name {name!r}: use lower-case letters, digits, '_' "
            f"and '-', starting with a letter (--name NAME)")
    if folder.exists() and any(folder.iterdir()):
        raise NewHomeworkError(f"{folder} is not empty: name a new folder")
    for source in sorted(TEMPLATE.rglob("*")):
        if source.is_dir() or "__pycache__" in source.parts:
            continue
        target = folder / source.relative_to(TEMPLATE)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(source.read_text().replace(PLACEHOLDER, name))
    for source in KIT_DATA:
        shutil.copy2(source, folder / "autograder" / source.name)
    for path in GENERATED:
        (folder / path).touch()
    (folder / "test_values").mkdir(exist_ok=True)
    return folder


def main(argv: list[str] | None = None) -> int:
    """Write the folder; exit 2 with the reason if it cannot."""
    parser = argparse.ArgumentParser(
        prog="python -m kit new-homework",
        description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path,
                        help="the new homework's folder (new or empty)")
    parser.add_argument("--name", help="its short id (default: the "
                        "folder's name)")
    parser.add_argument("--generate", action="store_true",
                        help="then generate its skeleton, notebook, "
                             "mistakes and values (make generate)")
    args = parser.parse_args(argv)
    try:
        folder = write(args.folder, args.name)
    except NewHomeworkError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {folder}: a layer-norm and softmax-classifier homework; "
          f"next: make generate HOMEWORK={folder} in the kit's checkout, "
          f"or `homework-kit --homework {folder} generate` where it is "
          f"installed")
    if args.generate:
        import subprocess
        return subprocess.run(
            [sys.executable, "-m", "kit", "--homework", str(folder),
             "generate"], check=False).returncode
    return 0


if __name__ == "__main__":
    sys.exit(main())
