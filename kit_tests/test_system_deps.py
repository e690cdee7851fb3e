"""System packages: one list (the README's first apt-get line), read alike by
``.ci/run``, ``kit/system_deps.py`` (``make install``) and ``make
test-fresh``; what is missing is named with what needs it."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

from kit.machine import fresh_machine

from kit import system_deps

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def test_ci_installs_exactly_the_readme_line():
    shell = subprocess.run(["bash", str(ROOT / ".ci" / "run"),
                            "--apt-packages"], capture_output=True,
                           text=True, check=True).stdout.split()
    assert shell == system_deps.readme_packages(README)
    assert {"python3", "python3-venv", "make"} <= set(shell)


def test_every_package_has_a_reason_and_every_reason_a_package():
    # a package added to the README without a check (or the reverse) fails
    assert sorted(system_deps.readme_packages(README)) \
        == sorted(system_deps.PACKAGES)
    assert not set(system_deps.OPTIONAL) & set(system_deps.PACKAGES)


def test_the_quick_start_runs_the_first_apt_line():
    lines = fresh_machine.quick_start(README)
    apt = [line for line in lines if "apt-get" in line]
    assert len(apt) == 1 and lines[0] == apt[0]
    assert system_deps.readme_packages(apt[0]) \
        == system_deps.readme_packages(README)
    assert any(fresh_machine.is_suite(line) for line in lines)
    assert any(line.startswith("make demo") for line in lines)


def test_readme_packages_ignores_options_and_shell():
    text = ("x\n```\nsudo apt-get update && apt-get install -y "
            "--no-install-recommends a b-c  # why\n```\napt-get install z\n")
    assert system_deps.readme_packages(text) == ["a", "b-c"]


def test_missing_names_the_package_command_and_need():
    absent = system_deps.missing(
        ["python3", "python3-venv", "git"], python="py",
        which=lambda c, path=None: None if c in ("git", "chromium")
        or (c == "useradd" and path is None) else "/bin/" + c,
        module_missing=lambda py, m: m == "ensurepip")
    assert absent == {"python3-venv": ["python module ensurepip"],
                      "git": ["git"], "chromium": ["chromium"]}
    lines, status = system_deps.report(absent, ["python3", "python3-venv",
                                                "git"])
    assert status == 1   # python3-venv is needed to install
    text = "\n".join(lines)
    assert "error: package python3-venv is missing" in text
    assert "warning: package git is missing (git)" in text
    assert "test-fresh" in text
    assert text.endswith("apt-get install -y python3 python3-venv git")


def test_tests_only_packages_only_warn():
    lines, status = system_deps.report({"git": ["git"]}, ["git"])
    assert status == 0 and "warning" in lines[0]
    lines, status = system_deps.report({"(essential)": ["unshare"]}, [])
    assert status == 1 and "unshare" in lines[0]


def test_make_install_checks_the_system_first(tmp_path):
    env = {k: v for k, v in os.environ.items()
           if k not in ("MAKEFLAGS", "MFLAGS", "PY")}
    plan = subprocess.run(["make", "--no-print-directory", "-n", "-C",
                           str(ROOT), "install", f"VENV={tmp_path}/venv"],
                          env=env, capture_output=True, text=True,
                          check=True).stdout.splitlines()
    checks = [i for i, line in enumerate(plan)
              if "system_deps.py --check" in line]
    installs = [i for i, line in enumerate(plan) if "install_deps.py" in line]
    assert checks and installs and checks[0] < installs[0]


def test_debian_mirror_is_read_from_both_source_formats(tmp_path):
    (tmp_path / "sources.list.d").mkdir()
    assert fresh_machine.debian_mirror(tmp_path) \
        == "http://deb.debian.org/debian"
    (tmp_path / "sources.list.d" / "x.list").write_text(
        "deb [arch=amd64] http://mirror.example/debian bookworm main\n")
    assert fresh_machine.debian_mirror(tmp_path) \
        == "http://mirror.example/debian"
    (tmp_path / "sources.list.d" / "a.sources").write_text(
        "Types: deb\nURIs: http://local.example/debian/\nSuites: bookworm\n")
    assert fresh_machine.debian_mirror(tmp_path) \
        == "http://local.example/debian/"


def test_pip_configuration_is_carried_with_what_it_names(tmp_path,
                                                         monkeypatch):
    index, wheels = tmp_path / "idx", tmp_path / "wheels"
    (index / "simple").mkdir(parents=True)
    wheels.mkdir()
    conf = tmp_path / "pip.conf"
    conf.write_text(f"[global]\nextra-index-url = file://{index}/simple\n"
                    f"find-links = {wheels}\nconstraint = /nonexistent/c\n")
    fake = tmp_path / "python"
    fake.write_text(f"#!/bin/sh\nprintf 'global:\\n  {conf}, exists: True\\n"
                    f"  /nonexistent/pip.conf, exists: False\\n'\n")
    fake.chmod(0o755)
    for key in [k for k in os.environ if k.startswith("PIP_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("PIP_CERT", str(conf))
    files, env, paths = fresh_machine.pip_carry(str(fake))
    assert files == [conf] and env == {"PIP_CERT": str(conf)}
    # an index's parent (its pages link beside "simple"); no missing path
    assert set(paths) == {index, wheels, conf}


def test_fresh_machine_runs_both_quick_starts_before_the_suites():
    lines = fresh_machine.quick_start(README)
    plan = fresh_machine.steps(lines)
    apt = [line for line in lines if "apt-get" in line]
    assert plan[0] == ("root", "/", apt[0])
    users = [(user, cwd) for user, cwd, _ in plan[1:]]
    runs = len(lines) - 1
    assert users == ([("root", "/root/kit")] * (runs - 1)
                     + [("student", "~/kit")] * (runs - 1)
                     + [("root", "/root/kit"), ("student", "~/kit")])
    assert [fresh_machine.is_suite(line) for _, _, line in plan[-2:]] \
        == [True, True]
    short = fresh_machine.steps(lines, quick_start_only=True)
    assert short == plan[:-2]
