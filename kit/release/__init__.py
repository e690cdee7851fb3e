"""What leaves the kit: the student release, the Gradescope zip, the leak
scan they both pass, and the demo that builds and grades both."""
from __future__ import annotations

from pathlib import Path

from autograder import homework


def dist(hw: homework.Homework | None = None) -> Path:
    """Where a homework's releases go by default, in the folder the command
    runs in (the checkout, for the Makefile): ``dist/`` for the checkout's
    own homework (its paths as the README and CI name them), ``dist/NAME/``
    for any other (one homework's release never overwrites another's)."""
    hw = hw or homework.current()
    base = Path.cwd() / "dist"
    return base if hw.root == homework.DEFAULT_ROOT.resolve() \
        else base / hw.name
