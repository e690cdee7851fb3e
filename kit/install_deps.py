"""Install pinned requirements into a venv, torch from the PyTorch CPU index.

One install rule for the kit's Makefile, the student's Makefile (this file
ships at the release's root) and the Gradescope ``setup.sh`` (at the zip's
root)::

    python3 install_deps.py --venv .venv -r requirements.txt
    python3 install_deps.py --check        # exit 1 unless Python >= 3.11

On Linux, PyPI's torch wheel is the multi-GB CUDA build, so torch alone
(``torch==X`` as pinned in the requirements, without its dependencies) is
first taken from the PyTorch CPU index (``--torch-index``, default
``$TORCH_INDEX`` or https://download.pytorch.org/whl/cpu; empty: skip it)
with no retries and a 5 s timeout. If that index cannot serve it
(unreachable, offline mirror, ...), torch comes from the default index
instead, with a warning. Then everything, torch's dependencies included,
comes from the default index (pip's own configuration applies throughout).
On macOS and Windows PyPI's wheels are the CPU builds: one plain install.

Runs on any Python 3 far enough to print why it refuses: the version check
comes first, and nothing before it needs a recent Python.
"""
import argparse
import os
import re
import subprocess
import sys
import time

MIN_PYTHON = (3, 11)   # the grader reads its rubric with tomllib (3.11)
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
# Fail fast on an unreachable CPU index: pip's defaults (5 retries, 15 s
# timeout) would wait a long time before the fallback.
FAST = ["--retries", "0", "--timeout", "5"]
PIP = ["-m", "pip", "install", "--disable-pip-version-check"]


def version_problem(version, executable):
    """The message refusing ``version`` (a version_info), or None."""
    if tuple(version[:2]) >= MIN_PYTHON:
        return None
    return ("install_deps: Python {}.{} or newer is needed (the grader reads "
            "its rubric with tomllib), but {} is Python {}. Install a newer "
            "Python (e.g. `sudo apt install python3.11 python3.11-venv`), "
            "then `make install PYTHON=python3.11`, or pass "
            "PY=/path/to/python3.11 to use an environment that has the "
            "packages.".format(MIN_PYTHON[0], MIN_PYTHON[1], executable,
                               ".".join(str(n) for n in version[:3])))


def torch_pin(requirements):
    """The ``torch==X`` line of a requirements file's text, or None."""
    found = re.search(r"^\s*torch\s*==\s*([^\s;#]+)", requirements,
                      re.MULTILINE)
    return "torch==" + found.group(1) if found else None


def plan(python, requirements_file, torch_index, platform):
    """The pip commands to run, as (purpose, argv) pairs, in order.

    ``purpose`` is "cpu-torch" (may fail: then run the "fallback-torch"
    command), "fallback-torch" (only after a failed "cpu-torch") or
    "requirements".
    """
    with open(requirements_file) as handle:
        pin = torch_pin(handle.read())
    steps = []
    if platform.startswith("linux") and torch_index and pin:
        steps.append(("cpu-torch", [python] + PIP + FAST + [
            "--no-deps", "--index-url", torch_index, pin]))
        steps.append(("fallback-torch", [python] + PIP + ["--no-deps", pin]))
    steps.append(("requirements", [python] + PIP + ["-r", requirements_file]))
    return steps


def venv_python(venv):
    """The interpreter inside ``venv`` (POSIX or Windows layout)."""
    for relative in (("bin", "python"), ("Scripts", "python.exe")):
        path = os.path.join(venv, *relative)
        if os.path.exists(path):
            return path
    return None


def ensure_venv(venv):
    """Create ``venv`` with this interpreter unless it exists; its python.

    An existing venv made by an older Python is refused with the message.
    """
    python = venv_python(venv)
    if python is None:
        print("install_deps: creating {} with {}".format(venv,
                                                         sys.executable))
        if subprocess.call([sys.executable, "-m", "venv", venv]) != 0:
            raise SystemExit(
                "install_deps: `{} -m venv {}` failed (on Debian and Ubuntu "
                "install the python3.X-venv package)".format(sys.executable,
                                                             venv))
        return venv_python(venv)
    found = subprocess.run(
        [python, "-c", "import sys; print(*sys.version_info[:3])"],
        stdout=subprocess.PIPE, universal_newlines=True)
    version = tuple(int(n) for n in found.stdout.split() or (0, 0, 0))
    problem = version_problem(version, python)
    if problem:
        raise SystemExit(problem + " Remove {} first.".format(venv))
    return python


def run_plan(steps, echo=print):
    """Run the steps; the fallback only if the CPU index failed.

    Returns the exit status of the first step that failed for good.
    """
    cpu_failed = False
    for purpose, argv in steps:
        if purpose == "fallback-torch" and not cpu_failed:
            continue
        echo("install_deps: " + " ".join(argv))
        start = time.monotonic()
        status = subprocess.call(argv)
        if purpose == "cpu-torch" and status != 0:
            cpu_failed = True
            echo("install_deps: the PyTorch CPU index did not serve torch "
                 "({:.1f} s): taking it from the default index instead (on "
                 "Linux, PyPI's wheel is the large CUDA build)".format(
                     time.monotonic() - start))
        elif status != 0:
            return status
    return 0


def main(argv=None):
    """Check the Python version, then install (see the module doc)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="only check this Python's version")
    parser.add_argument("--venv", help="create or reuse this venv")
    parser.add_argument("-r", dest="requirements", help="requirements file")
    parser.add_argument("--torch-index",
                        default=os.environ.get("TORCH_INDEX", CPU_INDEX),
                        help="index serving the CPU torch (empty: none)")
    parser.add_argument("--dry-run", action="store_true",
                        help="print the pip commands, run nothing")
    args = parser.parse_args(argv)
    problem = version_problem(sys.version_info, sys.executable)
    if problem:
        print(problem, file=sys.stderr)
        return 1
    if args.check:
        return 0
    if not (args.venv and args.requirements):
        parser.error("--venv and -r are needed to install")
    if args.dry_run:
        python = venv_python(args.venv) or os.path.join(args.venv, "bin",
                                                        "python")
    else:
        python = ensure_venv(args.venv)
    steps = plan(python, args.requirements, args.torch_index, sys.platform)
    if args.dry_run:
        for purpose, command in steps:
            print("{}: {}".format(purpose, " ".join(command)))
        return 0
    return run_plan(steps)


if __name__ == "__main__":
    sys.exit(main())
