"""Too old a Python: the advice works where it names, setup.sh says first.

``install_deps.py``'s message names a command that exists on the system it
is shown on (Debian 11 has no python3.11 package; minimal images no sudo);
the Gradescope ``setup.sh`` reads the base image's os-release before any apt
call and stops on one without a Python >= 3.11 package, naming the base
images that work and ``AUTOGRADER_SETUP_PYTHON``.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from kit import install_deps

ROOT = Path(__file__).resolve().parents[1]
SETUP = ROOT / "autograder" / "gradescope" / "setup.sh"
OLD = (3, 9, 2, "final", 0)


def test_debian_11_is_not_told_to_install_a_package_it_lacks():
    message = install_deps.version_problem(OLD, "python3", "linux",
                                           ("debian", "11"))
    assert "Python 3.11 or newer is needed" in message
    assert "apt" not in message and "sudo" not in message
    assert "Debian 12" in message and "PYTHON=" in message


def test_ubuntu_22_04_gets_its_universe_package_as_root():
    message = install_deps.version_problem((3, 10, 12), "python3", "linux",
                                           ("ubuntu", "22.04"))
    assert "`apt-get install python3.11 python3.11-venv`" in message
    assert "as root" in message and "make install PYTHON=python3.11" in message


def test_macos_and_unknown_systems_get_their_own_advice():
    assert "brew install python@3.11" in install_deps.version_problem(
        OLD, "python3", "darwin", ("", ""))
    other = install_deps.version_problem(OLD, "python3", "linux",
                                         ("alpine", "3.18"))
    assert "apt" not in other and "PYTHON=" in other


def test_debian_12_with_an_old_python_is_told_its_own_python3():
    # PYTHON= an older Python (pyenv's 3.10) on Debian 12, whose own
    # python3 is 3.11: the fix is that one, never "use Debian 12".
    message = install_deps.version_problem(
        (3, 10, 14), "/home/me/.pyenv/shims/python3.10", "linux",
        ("debian", "12"), system=(3, 11, 2))
    assert "/usr/bin/python3 is Python 3.11" in message
    assert "leave PYTHON out" in message
    assert "make install PYTHON=/usr/bin/python3" in message
    assert "use Debian 12" not in message
    # Debian 12 with no python3 installed yet: its package, not "use 12"
    bare = install_deps.version_problem((3, 10, 14), "python3.10", "linux",
                                        ("debian", "12"))
    assert "apt-get install python3 python3-venv" in bare
    assert "PYTHON=/usr/bin/python3" in bare and "use Debian" not in bare


def test_the_system_python3_is_asked_for_its_version(tmp_path):
    old = tmp_path / "python3.10"
    old.write_text("#!/bin/sh\necho 3 10 14\n")
    old.chmod(0o755)
    assert install_deps.python_version_of(str(old)) == (3, 10, 14)
    assert install_deps.python_version_of(str(tmp_path / "none")) is None


def test_os_release_is_read(tmp_path):
    release = tmp_path / "os-release"
    release.write_text('PRETTY_NAME="Debian GNU/Linux 11 (bullseye)"\n'
                       'ID=debian\nVERSION_ID="11"\n')
    assert install_deps.os_release(str(release)) == ("debian", "11")
    assert install_deps.os_release(str(tmp_path / "none")) == ("", "")


OS_RELEASES = {
    "debian11": ('PRETTY_NAME="Debian GNU/Linux 11 (bullseye)"\nID=debian\n'
                 'VERSION_ID="11"\n', None),
    "ubuntu2004": ('PRETTY_NAME="Ubuntu 20.04.6 LTS"\nID=ubuntu\n'
                   'VERSION_ID="20.04"\n', None),
    "ubuntu2204": ('PRETTY_NAME="Ubuntu 22.04.4 LTS"\nID=ubuntu\n'
                   'VERSION_ID="22.04"\n', "python3.11 python3.11-venv"),
    "ubuntu2404": ('PRETTY_NAME="Ubuntu 24.04 LTS"\nID=ubuntu\n'
                   'VERSION_ID="24.04"\n', "python3 python3-venv"),
    "debian12": ('PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\n'
                 'VERSION_ID="12"\n', "python3 python3-venv"),
}


def _setup(tmp_path: Path, **env: str) -> tuple[subprocess.CompletedProcess,
                                                str]:
    """setup.sh from a copy laid out as the zip is (the profile beside
    it), with an apt-get that records and then fails."""
    source = tmp_path / "source"
    source.mkdir()
    shutil.copy2(SETUP, source / "setup.sh")
    shutil.copy2(ROOT / "homework.toml", source / "homework.toml")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "apt-calls"
    fake = bin_dir / "apt-get"
    fake.write_text(f'#!/bin/sh\necho "$*" >> {calls}\n'
                    '[ "$1" = update ] || exit 100\n')
    fake.chmod(0o755)
    full = {"PATH": f"{bin_dir}:{os.environ['PATH']}", **env}
    done = subprocess.run(["bash", str(source / "setup.sh")], env=full,
                          capture_output=True, text=True, timeout=60)
    return done, calls.read_text() if calls.exists() else ""


@pytest.mark.parametrize("name", sorted(OS_RELEASES))
def test_setup_checks_the_base_image_before_apt(tmp_path, name):
    text, packages = OS_RELEASES[name]
    release = tmp_path / "os-release"
    release.write_text(text)
    done, calls = _setup(tmp_path, AUTOGRADER_SETUP_OS_RELEASE=str(release))
    assert done.returncode != 0   # the fake apt-get fails every install
    if packages is None:
        assert calls == ""        # refused before apt: no bare apt error
        pretty = text.split('"')[1]
        assert f"this base image ({pretty}) has no Python >= 3.11" \
            in done.stderr
        assert "Ubuntu 22.04 or 24.04" in done.stderr
        assert "AUTOGRADER_SETUP_PYTHON" in done.stderr
    else:
        assert f"install -y --no-install-recommends {packages}" in calls


def test_setup_refuses_an_old_setup_python(tmp_path):
    old = tmp_path / "python3.9"
    old.write_text("#!/bin/sh\nexit 1\n")
    old.chmod(0o755)
    done, calls = _setup(tmp_path, AUTOGRADER_SETUP_PYTHON=str(old))
    assert done.returncode == 1 and calls == ""
    assert f"AUTOGRADER_SETUP_PYTHON={old} is not a Python >= 3.11" \
        in done.stderr
