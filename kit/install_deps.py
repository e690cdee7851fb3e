"""Install pinned requirements into a venv, torch from the PyTorch CPU index.

One install rule for the kit's Makefile, the student's Makefile (this file
ships at the release's root) and the Gradescope ``setup.sh`` (at the zip's
root)::

    python3 install_deps.py --venv .venv -r requirements.txt
    python3 install_deps.py --check        # exit 1 unless Python >= 3.11

On Linux, PyPI's torch wheel is the multi-GB CUDA build, so torch alone
(the requirements' ``torch==X`` or range, without its dependencies) is
first taken from the PyTorch CPU index (``--torch-index``, default
``$TORCH_INDEX`` or https://download.pytorch.org/whl/cpu; empty: skip it),
that index alone (``pip --isolated``), with no retries and a 5 s timeout.
If that index cannot serve it (unreachable, offline mirror, ...), torch
comes from the default index instead, with a warning: for a range, the
grader's own version (``autograder/imports.toml`` beside the requirements),
not the index's newest (on Linux a CUDA build). Then everything,
torch's dependencies included, comes from the default index (pip's own
configuration applies there).
On macOS and Windows PyPI's wheels are the CPU builds: one plain install.

Before creating the venv it checks that this Python has the ``venv`` and
``ensurepip`` modules (Debian and Ubuntu split them into ``python3.X-venv``)
and names the package for this Python. An existing venv is reused only if
its Python runs and has pip; a half-made one (``python -m venv`` stopped
before pip) is removed and made again, saying so. If torch had to come from
the default index and that is PyPI's Linux CUDA build, it says so, with the
size, before pip adds the NVIDIA libraries; the last line gives the venv's
size. Where pip finds no torch for this platform, one sentence says what
the platform has and the path to take. On Windows a venv too deep for the
260-character path limit is refused first.

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
    if (distro, number >= (12 if distro == "debian" else 24.04)) in (
            ("debian", True), ("ubuntu", True)):
        return ("its python3 is new enough: as root (or with sudo) `apt-get "
                "install python3 python3-venv`, then `make install "
                "PYTHON={}`".format(SYSTEM_PYTHON))
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


SYSTEM_PYTHON = "/usr/bin/python3"


def python_version_of(python):
    """``python``'s version as a tuple, or None if it does not run."""
    try:
        found = subprocess.run(
            [python, "-c", "import sys; print(*sys.version_info[:3])"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            universal_newlines=True, timeout=30)
        return tuple(int(n) for n in found.stdout.split()) or None
    except (OSError, ValueError, subprocess.SubprocessError):
        return None


def version_problem(version, executable, platform=None, release=None,
                    system=None):
    """The message refusing ``version`` (a version_info), or None.

    ``system`` is the version of the system's own ``/usr/bin/python3``
    (default: asked of it on Linux, unless ``release`` simulates another
    system): where it is new enough (an older ``PYTHON=`` picked on
    Debian 12), the fix is to use it.
    """
    if tuple(version[:2]) >= MIN_PYTHON:
        return None
    platform = sys.platform if platform is None else platform
    if system is None and release is None and platform.startswith("linux") \
            and \
            os.path.realpath(executable) != os.path.realpath(SYSTEM_PYTHON):
        system = python_version_of(SYSTEM_PYTHON)
    if system and tuple(system[:2]) >= MIN_PYTHON:
        advice = ("this system's own {} is Python {}: leave PYTHON out "
                  "(`make install`) or pass `make install PYTHON={}` "
                  "(without make: `{} homework.py install`)".format(
                      SYSTEM_PYTHON, ".".join(str(n) for n in system[:2]),
                      SYSTEM_PYTHON, SYSTEM_PYTHON))
    else:
        advice = python_advice(platform, os_release() if release is None
                               else release)
    return ("install_deps: Python {}.{} or newer is needed (the grader reads "
            "its rubric with tomllib), but {} is Python {}. To get one: {}. "
            "Or pass PY=/path/to/python3.11 to use an environment that has "
            "the packages.".format(MIN_PYTHON[0], MIN_PYTHON[1], executable,
                                   ".".join(str(n) for n in version[:3]),
                                   advice))


def torch_pin(requirements):
    """The torch requirement of a requirements file's text, without its
    marker or comment and without spaces (``torch==2.13.0``, or a range:
    ``torch>=2.2.2,<=2.15.0``), or None."""
    found = re.search(r"^\s*torch\s*([=<>!~][^;#\n]*)", requirements,
                      re.MULTILINE)
    return "torch" + re.sub(r"\s", "", found.group(1)) if found else None


def grader_pin(requirements_file):
    """The grader's exact torch (``torch==2.13.0``) from the package list
    beside ``requirements_file`` (``autograder/imports.toml``, which the
    release ships), or None. Read by pattern: this file runs on Pythons
    without ``tomllib``."""
    listing = os.path.join(os.path.dirname(os.path.abspath(
        requirements_file)), "autograder", "imports.toml")
    try:
        with open(listing) as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError):
        return None
    found = re.search(r'^\s*requirement\s*=\s*"(torch==[^"]+)"', text,
                      re.MULTILINE)
    return found.group(1) if found else None


def _release(version):
    """``"2.2.2+cpu"`` -> (2, 2, 2): the numeric release of a version."""
    numbers = re.match(r"\d+(?:\.\d+)*", version.strip())
    return tuple(int(n) for n in numbers.group(0).split(".")) if numbers \
        else ()


def allows(requirement, version):
    """Whether ``requirement`` (``torch>=2.2.2,<=2.15.0``) admits
    ``version`` (releases compared; enough for the kit's own files, read
    on a Python that may have no ``packaging``)."""
    want = _release(version)
    for clause in re.findall(r"(==|!=|>=|<=|>|<|~=)\s*([\w.*+]+)",
                             requirement):
        op, bound = clause[0], _release(clause[1])
        size = max(len(want), len(bound))
        a, b = (want + (0,) * size)[:size], (bound + (0,) * size)[:size]
        if not {"==": a == b, "!=": a != b, ">=": a >= b, "<=": a <= b,
                ">": a > b, "<": a < b, "~=": a >= b}[op]:
            return False
    return True


# Where PyPI's torch stops for a platform (its file list, read with `uv pip
# compile --python-platform`; kit_tests/test_student_requirements.py): the
# newest torch, and the newest Python it has wheels for.
INTEL_MAC_TORCH = ("2.2.2", (3, 12))


def no_torch_advice(requirement, platform=None, machine=None,
                    version=None):
    """One sentence for pip's "no matching distribution" for torch, for
    the platform it runs on (default: this one): what exists there and the
    path that works."""
    import platform as host
    platform = sys.platform if platform is None else platform
    machine = (host.machine() if machine is None else machine).lower()
    version = sys.version_info if version is None else version
    python = "Python {}.{}".format(version[0], version[1])
    if platform == "win32" and machine in ("arm64", "aarch64"):
        return ("install_deps: PyPI has no torch for Windows on ARM: "
                "install Python's Windows installer (64-bit), the x64 "
                "build, which Windows on ARM runs emulated, and run the "
                "install with it (`py -V:3.12 homework.py install`), or "
                "follow the README's WSL path (Ubuntu in WSL has torch).")
    if platform == "darwin" and machine == "x86_64":
        newest, top = INTEL_MAC_TORCH
        if not allows(requirement, newest):
            return ("install_deps: the newest torch for Intel Macs is {}, "
                    "older than this homework accepts ({}): work in Google "
                    "Colab or on a Linux or Windows machine (the README's "
                    "other paths).".format(newest, requirement))
        if tuple(version[:2]) > top:
            return ("install_deps: the newest torch for Intel Macs is {} "
                    "(the homework accepts it), built for Python 3.{} at "
                    "most, and this is {}: install Python 3.{} (python.org "
                    "or `brew install python@3.{}`), then `make install "
                    "PYTHON=python3.{}`.".format(newest, top[1], python,
                                                 top[1], top[1], top[1]))
    return ("install_deps: pip found no torch {} for this machine ({} {}, "
            "{}): PyPI's torch covers Linux (x86-64, aarch64), Windows x64 "
            "and macOS 11 or newer for Python 3.11 to 3.13; use one of "
            "those (the README names each path).".format(
                requirement[len("torch"):], platform, machine, python))


# pip's two lines when no torch fits this platform or this Python.
NO_TORCH = re.compile(r"(no matching distribution found for|could not find "
                      r"a version that satisfies the requirement) torch\b",
                      re.IGNORECASE)


def call_teed(argv):
    """Run ``argv``, its stderr passed on as it comes; (exit status, its
    stderr text), so that pip's reason can be put into words."""
    process = subprocess.Popen(argv, stderr=subprocess.PIPE,
                               universal_newlines=True)
    said = []
    for line in process.stderr:
        sys.stderr.write(line)
        sys.stderr.flush()
        said.append(line)
    return process.wait(), "".join(said)


def plan(python, requirements_file, torch_index, platform, compile=True):
    """The pip commands to run, as (purpose, argv) pairs, in order.

    ``purpose`` is "cpu-torch" (may fail: then run the "fallback-torch"
    command), "fallback-torch" (only after a failed "cpu-torch") or
    "requirements". ``compile=False``: no bytecode compiled ahead (a
    student's .venv: 0.2 GB and a good part of the time less; Python
    compiles what it imports on first use).
    """
    with open(requirements_file) as handle:
        pin = torch_pin(handle.read())
    pip = PIP + ([] if compile else ["--no-compile"])
    steps = []
    if platform.startswith("linux") and torch_index and pin:
        # --isolated: that index alone; an extra index or find-links of the
        # user's configuration would offer its own (CUDA) torch of the range
        steps.append(("cpu-torch", [python] + pip + FAST + [
            "--isolated", "--no-deps", "--index-url", torch_index, pin]))
        # Off the CPU index, the range would take the default index's
        # newest torch, a CUDA build on Linux (gigabytes of NVIDIA
        # libraries): the grader's own version instead, which a mirror or
        # a local wheel folder most likely has as a CPU build.
        fallback = grader_pin(requirements_file)
        if fallback is None or not allows(pin, fallback.split("==", 1)[1]):
            fallback = pin
        steps.append(("fallback-torch", [python] + pip + ["--no-deps",
                                                          fallback]))
    steps.append(("requirements", [python] + pip + ["-r", requirements_file]))
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


# Windows refuses a path of more than 259 characters (MAX_PATH, 260 with
# its NUL) unless long paths are enabled, and pip then fails half-way.
# The deepest file the student's packages put under site-packages, as
# characters after its folder: measured on the installed .venv and on
# torch's Windows wheel (kit_tests/test_student_install.py keeps it).
MAX_PATH = 260
DEEPEST_SITE_PACKAGES_FILE = 171
SHORT_FOLDER = "$HOME\\hw"


def _long_paths_enabled():
    """Whether Windows' registry allows long paths (False elsewhere)."""
    try:
        import winreg
        with winreg.OpenKey(winreg.HKEY_LOCAL_MACHINE,
                            r"SYSTEM\CurrentControlSet\Control\FileSystem"
                            ) as key:
            return winreg.QueryValueEx(key, "LongPathsEnabled")[0] == 1
    except (ImportError, OSError):
        return False


def long_path_problem(venv, platform=None, long_paths=None):
    """Why ``venv`` is too deep for Windows' path limit, or None: its
    site-packages folder plus the deepest file installed there."""
    platform = sys.platform if platform is None else platform
    if platform != "win32":
        return None
    site = os.path.join(os.path.abspath(venv), "Lib", "site-packages", "")
    deepest = len(site) + DEEPEST_SITE_PACKAGES_FILE
    if deepest < MAX_PATH:
        return None
    if _long_paths_enabled() if long_paths is None else long_paths:
        return None
    return ("install_deps: {} is too deep for Windows: its site-packages "
            "folder is {} characters long and the deepest file installed "
            "there adds {}, {} in all, over Windows' limit of {} per path, "
            "so the install would fail half-way. Move the homework folder "
            "to a short place, e.g. `Expand-Archive student.zip "
            "-DestinationPath {}` (README.md, Windows), then install "
            "there.".format(venv, len(site), DEEPEST_SITE_PACKAGES_FILE,
                            deepest, MAX_PATH - 1, SHORT_FOLDER))


def ensure_venv(venv):
    """Create ``venv`` with this interpreter, or reuse it; its python.

    A venv is reused only if its Python runs and has pip; a half-made one
    is made again. An existing venv made by an older Python is refused
    with the message.
    """
    problem = long_path_problem(venv)
    if problem:
        raise SystemExit(problem)
    python = venv_python(venv)
    if python is None:
        if os.path.exists(venv) and os.listdir(venv):   # empty: fill it
            remove_venv(venv, "no Python in it")
        return create_venv(venv)
    version = python_version_of(python)
    if version is None:
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


def run_plan(steps, echo=print, torch_index=CPU_INDEX, requirement=None):
    """Run the steps; the fallback only if the CPU index failed.

    Returns the exit status of the first step that failed for good; when
    pip found no torch for this platform, says what exists and the path
    (``no_torch_advice`` for ``requirement``, the requirements' torch).
    """
    cpu_failed = False
    for purpose, argv in steps:
        if purpose == "fallback-torch" and not cpu_failed:
            continue
        echo("install_deps: " + " ".join(argv))
        start = time.monotonic()
        status, said = call_teed(argv)
        if purpose == "cpu-torch" and status != 0:
            cpu_failed = True
            echo("install_deps: the PyTorch CPU index ({}) did not serve "
                 "torch ({:.1f} s): taking it from the default index "
                 "instead (pip's reason is above)".format(
                     torch_index, time.monotonic() - start))
        elif status != 0:
            if NO_TORCH.search(said):
                echo(no_torch_advice(requirement or "torch"))
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
    parser.add_argument("--no-compile", action="store_true",
                        help="compile no bytecode ahead (the student's .venv)")
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
    steps = plan(python, args.requirements, args.torch_index, sys.platform,
                 compile=not args.no_compile)
    if args.dry_run:
        for purpose, command in steps:
            print("{}: {}".format(purpose, " ".join(command)))
        return 0
    with open(args.requirements) as handle:
        requirement = torch_pin(handle.read())
    start = time.monotonic()
    status = run_plan(steps, torch_index=args.torch_index,
                      requirement=requirement)
    if status == 0:   # the figures come from the run, not from a README
        print("install_deps: {} ready in {:.0f} s ({:.1f} GB)".format(
            args.venv, time.monotonic() - start,
            folder_size(args.venv) / 1e9))
    return status


if __name__ == "__main__":
    sys.exit(main())
