"""What leaves the kit: the student release, the Gradescope zip, the leak
scan they both pass, and the demo that builds and grades both."""
from __future__ import annotations

from pathlib import Path

from autograder import homework

# What the checkout's own homework writes in ``dist/`` (kit.release.student
# and kit.release.gradescope): another homework's folder ``dist/NAME/`` must
# not be one of them.
OUTPUTS = frozenset({"student", "student.partial", "student.zip",
                     "autograder", "autograder.zip"})


def dist(hw: homework.Homework | None = None) -> Path:
    """Where a homework's releases go by default, in the folder the command
    runs in (the checkout, for the Makefile): ``dist/`` for the checkout's
    own homework (its paths as the README and CI name them), ``dist/NAME/``
    for any other (one homework's release never overwrites another's).
    HomeworkError if NAME is one of the checkout's own outputs."""
    hw = hw or homework.current()
    base = Path.cwd() / "dist"
    if hw.root == homework.DEFAULT_ROOT.resolve():
        return base
    if hw.name in OUTPUTS:
        raise homework.HomeworkError(
            f"{hw.root / homework.PROFILE}: [homework] name = {hw.name!r} "
            f"would put its releases in dist/{hw.name}, which the "
            f"checkout's own release writes: rename it in "
            f"{homework.PROFILE} (or pass --out)")
    return base / hw.name
