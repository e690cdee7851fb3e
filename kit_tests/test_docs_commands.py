"""What the README and docs/ tell a user to run or open is there: every
`make TARGET` is a target of the checkout's or the student release's
Makefile, every `python -m autograder...`/`kit...` module exists, and every
path into the checkout's folders exists. A doc left behind by a move or a
rename fails here, naming the document and what to update."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ["README.md", *sorted(p.relative_to(ROOT).as_posix()
                             for p in (ROOT / "docs").glob("*.md")),
        "kit/student/README.md", "homeworks/ffn/README.md"]
# Folders of the checkout whose paths a doc may name.
TOPS = ("autograder/", "kit/", "kit_tests/", "docs/", "assignment/",
        "solutions/", "transformer_lm/", "homeworks/", "test_values/",
        ".ci/")
# Paths a walkthrough names before they exist: the files it has you add.
# A placeholder (NAME, PKG, x/y.py, test_y.py, test_<module>.py) is upper
# case, one letter or in angle brackets.
TO_BE_ADDED = {"autograder/checks/norms.py",
               "kit/generate/edition.toml"}   # `make new-edition` writes it
FENCE = re.compile(r"^ *```[^\n]*\n(.*?)^ *```", re.M | re.S)
# `make` at the start of a command (not a package in an apt-get line)
MAKE = re.compile(r"(?:^|[;&|(]\s*)make ([a-z][\w-]*)")
MODULE = re.compile(r"python3? -m ((?:autograder|kit|kit_tests)[\w.]*)")
PATH = re.compile(r"(?<![\w/.-])((?:%s)[\w./*<>-]*)"
                  % "|".join(map(re.escape, TOPS)))


def spans(text: str) -> list[str]:
    """The lines of the fenced blocks, then every inline code span."""
    lines = [line.strip() for block in FENCE.findall(text)
             for line in block.splitlines()]
    inline = re.findall(r"`([^`]+)`", FENCE.sub("", text))
    return lines + [s.replace("\n", " ").strip() for s in inline]


def targets(makefile: Path) -> set[str]:
    return set(re.findall(r"^([a-z][\w-]*):", makefile.read_text(), re.M))


KNOWN_TARGETS = targets(ROOT / "Makefile") | targets(
    ROOT / "kit" / "student" / "Makefile")


def _module_exists(module: str) -> bool:
    path = ROOT.joinpath(*module.split("."))
    return (path.with_suffix(".py").is_file()
            or (path / "__main__.py").is_file())


def _placeholder(path: str) -> bool:
    return "<" in path or bool(
        re.search(r"(^|/|_)([A-Z][A-Z_]*|[a-z])(/|\.|$)", path))


def _path_exists(path: str) -> bool:
    """In the checkout, or in a homework of its own under homeworks/ (a
    doc on that homework names its files as they sit in it)."""
    pattern = path.rstrip("/")
    return any(any(base.glob(pattern)) for base in
               [ROOT, *(ROOT / "homeworks").glob("*/")])


def drift(text: str) -> list[str]:
    """What ``text`` names that is not there: make targets, modules and
    paths, each as ``kind: name``."""
    found = []
    for span in spans(text):
        found += [f"make target: {t}" for t in MAKE.findall(span)
                  if t not in KNOWN_TARGETS]
        found += [f"module: {m}" for m in MODULE.findall(span)
                  if not _module_exists(m)]
        found += [f"path: {p}" for p in
                  (p.rstrip(".,:;") for p in PATH.findall(span))
                  if not _placeholder(p) and p not in TO_BE_ADDED
                  and not _path_exists(p)]
    return found


@pytest.mark.parametrize("doc", DOCS)
def test_what_a_doc_names_exists(doc):
    assert drift((ROOT / doc).read_text()) == [], (
        f"{doc} names what does not exist: update the doc (moved or "
        "renamed?), add the make target, or list a file a walkthrough adds "
        "in TO_BE_ADDED")


def test_drift_is_found_inline_and_in_indented_blocks():
    text = ("Run `make grade` then `make gradebook`, `python -m kit.nothing`"
            " and open `kit/generate/cases.py` or `kit/nowhere.py`.\n"
            "1. a step\n   ```bash\n   cd x && make tests\n"
            "   python -m autograder.nope  # `autograder/gone.py`\n   ```\n"
            "`sudo apt-get install make unzip`, `autograder/x/y.py`, "
            "`homeworks/NAME/homework.toml`, `kit_tests/test_<m>.py`, "
            "`assignment/ffn.md` and `python -m autograder check`.\n")
    assert drift(text) == [
        "make target: tests", "module: autograder.nope",
        "path: autograder/gone.py", "make target: gradebook",
        "module: kit.nothing", "path: kit/nowhere.py"]
