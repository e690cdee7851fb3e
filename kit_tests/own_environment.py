"""A student's own environment, made of named distributions only.

``own_environment(names, dest)`` builds a venv holding exactly the
distributions ``names`` and what their metadata requires (extras and
other platforms' markers aside), hard-linked (else copied) from the
running environment: no pip, no index, and nothing a package merely
happens to find installed beside it (numpy beside safetensors), so a
command run with it fails as it would in an environment the student made
from the README's list.
"""
from __future__ import annotations

import importlib.metadata as metadata
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from packaging.requirements import Requirement


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def closure(names: list[str] | tuple[str, ...]
            ) -> dict[str, metadata.Distribution]:
    """``names`` and every distribution they require here, by name."""
    found: dict[str, metadata.Distribution] = {}
    todo = list(names)
    while todo:
        name = _canonical(todo.pop())
        if name in found:
            continue
        found[name] = dist = metadata.distribution(name)
        for line in dist.requires or []:
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate(
                    {"extra": ""}):
                todo.append(requirement.name)
    return found


def _link(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def own_environment(names: list[str] | tuple[str, ...], dest: Path) -> Path:
    """A venv at ``dest`` with only ``names`` and their requirements; its
    python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip",
                    str(dest)], check=True)
    python = dest / "bin" / "python"
    site = Path(subprocess.run(
        [str(python), "-c",
         "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True).stdout.strip())
    for dist in closure(names).values():
        for file in dist.files or []:
            if file.parts[0] == "..":   # scripts outside site-packages
                continue
            source = Path(dist.locate_file(file))
            if source.is_file():
                _link(source, site / file)
    return python
