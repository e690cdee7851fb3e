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

Before creating the venv it checks that this Python has the ``venv`` and
``ensurepip`` modules (Debian and Ubuntu split them into ``python3.X-venv``)
and names the package for this Python. An existing venv is reused only if
its Python runs and has pip; a half-made one (``python -m venv`` stopped
before pip) is removed and made again, saying so. If torch had to come from
the default index and that is PyPI's Linux CUDA build, it says so, with the
size, before pip adds the NVIDIA libraries; the last line gives the venv's
size.

Runs on any Python 3 far enough to print why it refuses: the version check
comes first, and nothing before it needs a recent Python.
"""
import argparse
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import time

MIN_PYTHON = (3, 11)   # the grader reads its rubric with tomllib (3.11)
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
# Fail fast on an unreachable CPU index: pip's defaults (5 retries, 15 s
# timeout) would wait a long time before the fallback.
FAST = ["--retries", "0", "--timeout", "5"]
PIP = ["-m", "pip", "install", "--disable-pip-version-check"]


def os_release(path="/etc/os-release"):
    """``(ID, VERSION_ID)`` of this Linux distribution, or ("", "")."""
    fields = {}
    try:
        with open(path) as handle:
            for line in handle:
                key, _, value = line.strip().partition("=")
                fields[key] = value.strip('"')
    except OSError:
        pass
    return fields.get("ID", ""), fields.get("VERSION_ID", "")


def python_advice(platform, release):
    """How to get a Python >= 3.11 here: advice that works where it names.

    ``release`` is ``os_release()``. Debian 11 and Ubuntu 20.04 have no
    Python 3.11 package at all; Ubuntu 22.04 has python3.11 in universe;
    minimal images have no sudo, so the commands are given as root.
    """
    distro, version = release
    try:
        number = float(version)
    except ValueError:
        number = 0.0
    if platform == "darwin":
        return ("`brew install python@3.11` (or the python.org installer), "
                "then `make install PYTHON=python3.11`")
    if distro == "ubuntu" and number >= 22.04 and number < 24.04:
        return ("as root (or with sudo): `apt-get install python3.11 "
                "python3.11-venv`, then `make install PYTHON=python3.11`")
    if distro in ("debian", "ubuntu"):
        newest = "Debian 12" if distro == "debian" else "Ubuntu 24.04"
        return ("{} {} has no Python 3.11 package: use {} or newer (its "
                "python3 is >= 3.11), or the `python:3.11` container image "
                "(`docker run -it -v $PWD:/kit -w /kit python:3.11 bash`), "
                "or a Python >= 3.11 built elsewhere (python.org, pyenv, "
                "uv) passed as `make install PYTHON=/path/to/python3.11`"
                .format(distro.capitalize(), version or "(this version)",
                        newest))
    return ("install Python 3.11 or newer (your distribution's package, "
            "python.org, pyenv or uv), then `make install "
            "PYTHON=/path/to/python3.11`")


def version_problem(version, executable, platform=None, release=None):
    """The message refusing ``version`` (a version_info), or None."""
    if tuple(version[:2]) >= MIN_PYTHON:
        return None
    platform = sys.platform if platform is None else platform
    release = os_release() if release is None else release
    return ("install_deps: Python {}.{} or newer is needed (the grader reads "
            "its rubric with tomllib), but {} is Python {}. To get one: {}. "
            "Or pass PY=/path/to/python3.11 to use an environment that has "
            "the packages.".format(MIN_PYTHON[0], MIN_PYTHON[1], executable,
                                   ".".join(str(n) for n in version[:3]),
                                   python_advice(platform, release)))


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


def venv_package(version=None):
    """Debian's and Ubuntu's package holding ``ensurepip`` for ``version``
    (a version_info; default this Python's): ``python3.11-venv``."""
    version = sys.version_info if version is None else version
    return "python3.{}-venv".format(version[1])


def venv_module_problem(find_spec=importlib.util.find_spec,
                        executable=None, version=None, release=None):
    """Why this Python cannot make a venv with pip, or None.

    ``python -m venv`` needs the ``venv`` module and, to put pip in the
    venv, ``ensurepip``: Debian and Ubuntu ship ``ensurepip`` apart, in
    ``python3.X-venv``; without it ``venv`` leaves a venv with no pip.
    """
    missing = [name for name in ("venv", "ensurepip")
               if find_spec(name) is None]
    if not missing:
        return None
    executable = sys.executable if executable is None else executable
    version = sys.version_info if version is None else version
    distro, _ = os_release() if release is None else release
    package = venv_package(version)
    if distro in ("debian", "ubuntu") and executable.startswith("/usr/"):
        fix = ("install its package as root (or with sudo): `apt-get "
               "install {}`, then run the same command again (a half-made "
               "venv is made again by itself)".format(package))
    elif distro in ("debian", "ubuntu"):
        fix = ("this Python is not Debian's: reinstall it with its venv "
               "module, or use the system one (`apt-get install python3 "
               "{}`, then `make install PYTHON=/usr/bin/python3.{}`)"
               .format(package, version[1]))
    else:
        fix = ("install your system's package for Python's venv module "
               "(Fedora's python3 has it), or use another Python >= 3.11 "
               "with `make install PYTHON=/path/to/python3`")
    return ("install_deps: {} has no {} module, so it cannot create a "
            "virtual environment with pip in it: {}.".format(
                executable, " and no ".join(missing), fix))


def _has_pip(python):
    """Whether ``python`` runs and can run pip."""
    try:
        return subprocess.call([python, "-m", "pip", "--version"],
                               stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL) == 0
    except OSError:
        return False


def remove_venv(venv, why):
    """Delete a half-made venv, saying why; refuse a folder that is not a
    venv (no ``pyvenv.cfg``): ``VENV=`` may name anything."""
    if not os.path.isfile(os.path.join(venv, "pyvenv.cfg")):
        raise SystemExit(
            "install_deps: {} exists but is not a virtual environment (no "
            "pyvenv.cfg): move it away or pass another VENV=.".format(venv))
    print("install_deps: {} is half-made ({}): removing it and making it "
          "again".format(venv, why))
    shutil.rmtree(venv)


def create_venv(venv):
    """``python -m venv venv`` with this interpreter; its python.

    Stops with the cause if this Python lacks the venv module or the venv
    comes out without pip (which is then removed, not left to be reused).
    """
    problem = venv_module_problem()
    if problem:
        raise SystemExit(problem)
    print("install_deps: creating {} with {}".format(venv, sys.executable))
    status = subprocess.call([sys.executable, "-m", "venv", venv])
    python = venv_python(venv)
    if status != 0 or python is None or not _has_pip(python):
        if os.path.isdir(venv):
            shutil.rmtree(venv)
        raise SystemExit(
            "install_deps: `{} -m venv {}` did not make a venv with pip "
            "(exit {}); removed it. On Debian and Ubuntu install {} as root "
            "(`apt-get install {}`) and run the same command again."
            .format(sys.executable, venv, status, venv_package(),
                    venv_package()))
    return python


def ensure_venv(venv):
    """Create ``venv`` with this interpreter, or reuse it; its python.

    A venv is reused only if its Python runs and has pip; a half-made one
    is made again. An existing venv made by an older Python is refused
    with the message.
    """
    python = venv_python(venv)
    if python is None:
        if os.path.exists(venv) and os.listdir(venv):   # empty: fill it
            remove_venv(venv, "no Python in it")
        return create_venv(venv)
    try:
        found = subprocess.run(
            [python, "-c", "import sys; print(*sys.version_info[:3])"],
            stdout=subprocess.PIPE, universal_newlines=True)
        version = tuple(int(n) for n in found.stdout.split() or (0, 0, 0))
    except (OSError, ValueError):
        version = None
    if version is None or version == (0, 0, 0):
        remove_venv(venv, "its Python does not run")
        return create_venv(venv)
    problem = version_problem(version, python)
    if problem:
        raise SystemExit(problem + " Remove {} first.".format(venv))
    if not _has_pip(python):
        remove_venv(venv, "no pip in it")
        return create_venv(venv)
    return python


# PyPI's Linux x86-64 torch (the CUDA build), measured on Debian 13: the
# venv grew to 5.3 GB in 281 s, against 1.6 GB with the CPU build.
CUDA_NOTE = ("install_deps: this torch is PyPI's CUDA build (it needs {} "
             "NVIDIA packages): pip now adds them, about 3.7 GB more (the "
             "venv measured 5.3 GB, against 1.6 GB with the CPU build). The "
             "homework runs on the CPU either way. To get the CPU build "
             "instead, stop now (Ctrl-C), make {} reachable (or pass "
             "TORCH_INDEX= a mirror of it), remove the venv and install "
             "again.")


def cuda_requirements(python):
    """The NVIDIA packages the torch installed in ``python`` requires (its
    metadata, markers aside): non-empty for PyPI's Linux CUDA build."""
    code = ("import importlib.metadata as m\n"
            "print('\\n'.join(m.requires('torch') or []))")
    try:
        found = subprocess.run([python, "-c", code], stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL,
                               universal_newlines=True)
    except OSError:
        return []
    return sorted({line.split()[0].split(";")[0] for line in
                   found.stdout.splitlines()
                   if line.strip().lower().startswith("nvidia-")})


def run_plan(steps, echo=print, torch_index=CPU_INDEX):
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
            echo("install_deps: the PyTorch CPU index ({}) did not serve "
                 "torch ({:.1f} s): taking it from the default index "
                 "instead (pip's reason is above)".format(
                     torch_index, time.monotonic() - start))
        elif status != 0:
            return status
        elif purpose == "fallback-torch":
            nvidia = cuda_requirements(argv[0])
            if nvidia:
                echo(CUDA_NOTE.format(len(nvidia), torch_index))
    return 0


def folder_size(path):
    """Bytes of the files under ``path`` (links not followed)."""
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_size
            except OSError:
                pass
    return total


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
    if hasattr(sys.stdout, "reconfigure"):   # our lines in order with pip's
        sys.stdout.reconfigure(line_buffering=True)
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
    start = time.monotonic()
    status = run_plan(steps, torch_index=args.torch_index)
    if status == 0:   # the figures come from the run, not from a README
        print("install_deps: {} ready in {:.0f} s ({:.1f} GB)".format(
            args.venv, time.monotonic() - start,
            folder_size(args.venv) / 1e9))
    return status


if __name__ == "__main__":
    sys.exit(main())
