"""Fixtures every fault scenario may take: ``subs`` (the three
submissions), ``clean`` (their clean run, once per test file) and
``tmpfs`` (a small filesystem to fill or mount read-only; root only)."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from kit_tests.faults import harness as h


@pytest.fixture(scope="module")
def subs(tmp_path_factory) -> Path:
    """A folder with the reference, the skeleton and one mistake."""
    return h.write_submissions(tmp_path_factory.mktemp("subs"))


@pytest.fixture(scope="module")
def clean(tmp_path_factory, subs) -> h.Clean:
    """``subs`` graded with no fault: what every scenario is judged by."""
    return h.clean_run(tmp_path_factory.mktemp("clean") / "out", subs)


@pytest.fixture
def tmpfs(tmp_path):
    """``tmpfs(size, *options)`` mounts a tmpfs and returns where;
    unmounted afterwards. Skips, saying why, where it cannot (not root,
    no mount permission)."""
    if not h.is_root():
        pytest.skip("needs root to mount a small tmpfs (a full disk, a "
                    "read-only folder)")
    mounted: list[Path] = []

    def mount(size: str, *options: str) -> Path:
        point = tmp_path / f"mnt{len(mounted)}"
        point.mkdir()
        opts = ",".join([f"size={size}", *options])
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs",
                               str(point)], capture_output=True, text=True)
        if done.returncode:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
        mounted.append(point)
        return point

    yield mount
    for point in mounted:
        subprocess.run(["umount", "-l", str(point)], check=False)
