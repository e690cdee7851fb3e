"""Gradescope's /autograder as its harness lays it out, for the tests that
run a built autograder zip: one helper, so they lay it out alike."""
from __future__ import annotations

import shutil
import zipfile
from pathlib import Path


def unzip_autograder(archive: Path, root: Path) -> Path:
    """``root`` made a fake /autograder: the zip in source/ (modes kept),
    its run_autograder at the top, empty submission/ and results/."""
    for name in ("source", "submission", "results"):
        (root / name).mkdir(parents=True)
    with zipfile.ZipFile(archive) as zf:
        zf.extractall(root / "source")
        for info in zf.infolist():   # zipfile drops the mode bits
            mode = info.external_attr >> 16
            if mode:
                (root / "source" / info.filename).chmod(mode & 0o777)
    shutil.copy2(root / "source" / "run_autograder", root / "run_autograder")
    return root
