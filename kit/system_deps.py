"""What the kit needs from the operating system, checked by name.

The one list of Debian/Ubuntu packages is the first ``apt-get install`` line
of the README (the quick start a new user runs); ``.ci/run`` installs that
line (``--packages`` prints it) and ``make install`` runs ``--check``, which
names every package whose commands or modules are missing here. The table
below says what proves each package present and what fails without it;
``kit_tests/test_system_deps.py`` keeps it and the README line equal.

Runs on any Python 3 (``make install`` calls it before the version check),
so the table is Python data, not TOML: tomllib needs 3.11.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys

README = os.path.join(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))), "README.md")

# package: (commands it puts on PATH, Python modules, needed by, what
# breaks without it). "install" packages stop `make install`; "tests"
# packages are only warned about (the suite fails or skips without them).
PACKAGES = {
    "python3": (["python3"], [], "install",
                "the kit is Python (>= 3.11; Debian 12, Ubuntu 24.04)"),
    "python3-venv": ([], ["ensurepip", "venv"], "install",
                     "`make install` creates .venv with `python3 -m venv`"),
    "make": (["make"], [], "install", "every entry point is a make target"),
    "git": (["git"], [], "tests",
            "cloning the kit; `make test-fresh` copies the tracked files"),
}
# Not in the README's line (Ubuntu has no chromium deb, only a snap):
# `apt-get install chromium` on Debian; checked and warned about only.
OPTIONAL = {
    "chromium": (["chromium"], [], "optional",
                 "the class report's and the notebook's browser tests "
                 "skip without it (Debian: apt-get install chromium)"),
}
# Commands of Essential packages (coreutils, util-linux, passwd), present
# on every Debian and Ubuntu, checked so that a stripped image is named too.
ESSENTIAL = ["bash", "cksum", "nproc", "timeout", "unshare", "setpriv",
             "runuser", "useradd"]
SBIN = "/usr/local/sbin:/usr/sbin:/sbin"
APT_LINE = re.compile(r"apt-get\s+install\b([^\n`&|;#]*)")


def readme_packages(text):
    """The packages of the first ``apt-get install`` line of ``text``."""
    found = APT_LINE.search(text)
    if not found:
        raise ValueError("no `apt-get install` line in the README")
    return [word for word in found.group(1).split()
            if not word.startswith("-")]


def _module_missing(python, module):
    done = subprocess.run([python, "-c", "import " + module],
                          stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL)
    return done.returncode != 0


def missing(packages, python=sys.executable, which=shutil.which,
            module_missing=_module_missing):
    """``{package: [what is absent]}`` for the packages not fully here."""
    absent = {}
    for package in list(packages) + sorted(OPTIONAL):
        commands, modules, _, _ = {**PACKAGES, **OPTIONAL}[package]
        lost = [c for c in commands if which(c) is None]
        lost += ["python module " + m for m in modules
                 if module_missing(python, m)]
        if lost:
            absent[package] = lost
    # useradd and runuser live in sbin, off a normal user's PATH
    essential = [c for c in ESSENTIAL if which(c) is None
                 and which(c, path=SBIN) is None]
    if essential:
        absent["(essential)"] = essential
    return absent


def report(absent, packages):
    """Lines naming what is missing, and the exit status (1: install)."""
    lines, status = [], 0
    for package, lost in sorted(absent.items()):
        if package == "(essential)":
            lines.append("system_deps: missing commands of Debian's essential"
                         " packages (coreutils, util-linux, passwd): "
                         + ", ".join(lost))
            status = 1
            continue
        _, _, needed_by, why = {**PACKAGES, **OPTIONAL}[package]
        level = "error" if needed_by == "install" else "warning"
        status = status or (needed_by == "install")
        lines.append("system_deps: {}: package {} is missing ({}): {}".format(
            level, package, ", ".join(lost), why))
    if any(p in absent for p in packages):
        lines.append("system_deps: on Debian or Ubuntu, as root: apt-get "
                     "install -y " + " ".join(packages))
    return lines, int(status)


def main(argv=None):
    """``--packages`` prints the README's line; ``--check`` checks it."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--packages", action="store_true",
                        help="print the README's apt packages, one line")
    parser.add_argument("--check", action="store_true",
                        help="name the packages missing here")
    parser.add_argument("--python", default=sys.executable,
                        help="the Python whose venv module is checked")
    args = parser.parse_args(argv)
    with open(README) as handle:
        packages = readme_packages(handle.read())
    unknown = [p for p in packages if p not in PACKAGES]
    if unknown:
        print("system_deps: the README installs {} but kit/system_deps.py "
              "does not know what they are for".format(", ".join(unknown)),
              file=sys.stderr)
        return 2
    if args.packages:
        print(" ".join(packages))
    if args.check:
        lines, status = report(missing(packages, args.python), packages)
        for line in lines:
            print(line, file=sys.stderr)
        return status
    return 0


if __name__ == "__main__":
    sys.exit(main())
