"""The student requirements resolve on every platform students have.

``uv pip compile --python-platform`` resolves ``kit/student/requirements.txt``
for another platform without installing it, with that platform's markers
and wheel tags (pip's ``--platform`` evaluates markers for the running
machine instead, so torch's CUDA packages would leak into every platform).
macOS's version is uv's ``MACOSX_DEPLOYMENT_TARGET``. The resolved torch
must lie in the requirements' range and be the one the student README's
table names for the platform. Needs uv (``$UV`` or on PATH) and PyPI:
skipped, saying which, where either is missing.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from kit import install_deps

ROOT = Path(__file__).resolve().parents[1]
REQUIREMENTS = ROOT / "kit" / "student" / "requirements.txt"
README = ROOT / "kit" / "student" / "README.md"
PYTHON = "3.12"   # the README's Python; the Intel Mac's torch stops there

# README table row -> (uv's platform, macOS version)
PLATFORMS = {
    "macOS on Intel": ("x86_64-apple-darwin", "13.0"),
    "macOS 13, Apple silicon": ("aarch64-apple-darwin", "13.0"),
    "macOS 14 or newer, Apple silicon": ("aarch64-apple-darwin", "14.0"),
    "Windows x64": ("x86_64-pc-windows-msvc", None),
    "Linux x86-64 or aarch64 (WSL too)": ("x86_64-manylinux_2_28", None),
    "Linux aarch64": ("aarch64-manylinux_2_28", None),
}


def _uv() -> str:
    uv = os.environ.get("UV") or shutil.which("uv")
    if not uv:
        pytest.skip("uv is not installed (pip install uv; or UV=/path/to/uv)")
    return uv


def _compile(platform: str, macos: str | None,
             python: str = PYTHON) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("UV_", "MACOSX_"))}
    if macos:
        env["MACOSX_DEPLOYMENT_TARGET"] = macos
    done = subprocess.run(
        [_uv(), "pip", "compile", "--quiet", "--no-header", "--no-annotate",
         "--no-config", "--python-platform", platform, "--python-version",
         python, str(REQUIREMENTS)],
        capture_output=True, text=True, env=env, timeout=300)
    if done.returncode and re.search(r"(?i)failed to fetch|connect|dns|"
                                     r"network|timed out", done.stderr):
        pytest.skip(f"PyPI unreachable for uv: {done.stderr.strip()[:200]}")
    return done


def _pins(text: str) -> dict[str, str]:
    return dict(re.findall(r"^([\w.-]+)==(\S+)", text, re.M))


def _table() -> dict[str, str]:
    """The README's platform table: row -> torch (or "none")."""
    return dict(re.findall(r"^\| ([^|]+?) \| ([\d.]+|none) \|",
                           README.read_text(), re.M))


def test_the_readme_names_the_range_of_the_requirements():
    torch = install_deps.torch_pin(REQUIREMENTS.read_text())
    low, high = re.match(r"torch>=([\d.]+),<=([\d.]+)$", torch).groups()
    assert f"from\n{low} to {high}" in README.read_text() or (
        f"from {low} to {high}" in README.read_text())
    newest = install_deps.INTEL_MAC_TORCH[0]
    assert _table()["macOS on Intel"] == newest
    assert install_deps.allows(torch, newest)
    for platform, version in _table().items():
        assert version == "none" or install_deps.allows(torch, version), (
            platform, version)


@pytest.mark.e2e   # resolves against PyPI (make test-all)
@pytest.mark.parametrize("row", sorted(PLATFORMS))
def test_requirements_resolve_with_each_platforms_own_markers(row):
    platform, macos = PLATFORMS[row]
    done = _compile(platform, macos)
    assert done.returncode == 0, done.stderr
    pins = _pins(done.stdout)
    torch = install_deps.torch_pin(REQUIREMENTS.read_text())
    assert install_deps.allows(torch, pins["torch"])
    expected = _table().get(row, _table()["Linux x86-64 or aarch64 (WSL "
                                          "too)"])
    assert pins["torch"] == expected, (row, pins["torch"])
    # the platform's own markers, not this machine's: numpy 1 for the
    # Intel Mac's torch; pytest's colorama on Windows only; PyPI's CUDA
    # packages for Linux's torch only (make install takes the CPU build)
    intel_mac = platform == "x86_64-apple-darwin"
    assert pins["numpy"].startswith("1.") == intel_mac
    assert ("colorama" in pins) == platform.endswith("windows-msvc")
    assert any(n.startswith("nvidia-") for n in pins) == (
        "manylinux" in platform)
    assert "otter-grader" not in pins   # staff-only


@pytest.mark.e2e
def test_windows_on_arm_and_a_too_new_python_on_an_intel_mac_have_none():
    # The README's "none" row, and the Intel Mac's Python 3.13: what
    # install_deps then says (no_torch_advice) is the table's path.
    arm = _compile("aarch64-pc-windows-msvc", None)
    assert arm.returncode != 0 and "torch" in arm.stderr
    assert _table()["Windows on ARM"] == "none"
    intel = _compile("x86_64-apple-darwin", "13.0", "3.13")
    assert intel.returncode != 0 and "torch" in intel.stderr
