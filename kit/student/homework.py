"""The homework's commands, in plain Python: what ``make`` runs, anywhere.

Run in this folder (Linux, macOS, WSL, Windows PowerShell; no ``make``
needed)::

    python3 homework.py install        # .venv with requirements.txt
    python3 homework.py check [FILE]   # grade your module on the public cases
    python3 homework.py test           # the unit tests in tests/
    python3 homework.py submission     # build submission.zip
    python3 homework.py notebook       # JupyterLab on the notebook

(On Windows: ``py homework.py check``.) ``check``, ``test``, ``submission``
and ``notebook`` install first if needed. ``--py PATH`` (``make ... PY=``)
uses an environment you already have instead: nothing is installed, and the
packages the homework needs are checked first; the missing ones are named
with the one ``pip install`` line that adds them. ``--python PATH``
(``make install PYTHON=``) picks the Python that creates ``.venv``.
``make`` targets call this file, so both give the same results.

Runs on any Python far enough to say why it refuses: Python 2 parses this
file and gets one line; on Python 3 the version check of install_deps.py
comes first.
"""
from __future__ import print_function

import argparse
import hashlib
import os
import re
import subprocess
import sys

if sys.version_info[0] < 3:   # these imports are Python 2's too; not so below
    sys.exit("homework.py needs Python 3.11 or newer, and {} is Python {}: "
             "run it with python3 (`python3 homework.py ...`; on Windows "
             "`py homework.py ...`).".format(sys.executable,
                                             sys.version.split()[0]))

ROOT = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, ROOT)
import install_deps  # noqa: E402  (beside this file in the release)
from homework_profile import value  # noqa: E402  (beside it too)

REQUIREMENTS = os.path.join(ROOT, "requirements.txt")
STAMP = ".installed"      # in the venv: the requirements' digest
NOTEBOOK = value("notebook", "master")   # where the release puts it
# What each command runs with the environment's python, in this folder.
# JupyterLab is rooted here, so that the package opens beside the
# notebook, and the URL it prints opens the notebook, not the Launcher.
COMMANDS = {
    "check": ["-m", "autograder", "check"],
    "test": ["-m", "pytest", "tests"],
    "submission": ["make_submission.py"],
    "notebook": ["-m", "jupyterlab", "--ServerApp.root_dir=" + ROOT,
                 "--LabApp.default_url=/lab/tree/" + NOTEBOOK],
}
# Distribution name -> the module it installs, where they differ.
MODULES = {}
# The requirements each command needs (by name; the notebook and `ready`:
# all of requirements.txt): `make check` in an environment without
# JupyterLab is fine, a missing torch is not. numpy: safetensors.torch
# saves the values the checks exchange with it
# (kit_tests/test_student_install.py runs check with only these).
NEEDS = {
    "check": ("torch", "numpy", "safetensors", "pycodestyle"),
    "test": ("torch", "numpy", "safetensors", "pycodestyle", "pytest"),
    "submission": ("torch", "numpy", "safetensors", "nbformat"),
}


def marker_applies(marker, platform=None, machine=None):
    """Whether a requirement's environment marker holds here: the
    ``sys_platform`` / ``platform_machine`` comparisons joined by ``and``
    and ``or`` that requirements.txt uses (anything else: it holds)."""
    import platform as host
    values = {"sys_platform": sys.platform if platform is None else platform,
              "platform_machine": host.machine() if machine is None
              else machine}
    alternatives = []
    for alternative in marker.split(" or "):
        holds = True
        for test in alternative.split(" and "):
            found = re.match(r"\s*(\w+)\s*(==|!=)\s*[\"']([^\"']*)[\"']\s*$",
                             test)
            if found and found.group(1) in values:
                equal = values[found.group(1)] == found.group(3)
                holds = holds and equal == (found.group(2) == "==")
        alternatives.append(holds)
    return any(alternatives)


def requirements(path=REQUIREMENTS, platform=None, machine=None):
    """``(name, requirement)`` of every requirement that applies to this
    platform (its marker), in file order, without marker or spaces."""
    found = []
    with open(path) as handle:
        for line in handle:
            line, _, marker = line.split("#", 1)[0].partition(";")
            line = re.sub(r"\s", "", line)
            if line and marker_applies(marker, platform, machine):
                name = re.match(r"[A-Za-z0-9._-]+", line).group(0)
                found.append((name, line))
    return found


def module_of(name):
    """The importable module of distribution ``name``."""
    return MODULES.get(name, name.replace("-", "_").lower())


def missing_packages(find_spec=None, path=REQUIREMENTS, command=None):
    """The requirement lines (this platform's) that ``command`` needs
    (NEEDS; all of them for another command) whose module is missing here
    (looked up with ``find_spec``: nothing is imported)."""
    if find_spec is None:
        import importlib.util
        find_spec = importlib.util.find_spec
    needed = NEEDS.get(command)
    return [line for name, line in requirements(path)
            if (needed is None or name in needed)
            and find_spec(module_of(name)) is None]


def pip_line(python, missing, platform=None):
    """The one command that adds ``missing`` (requirement lines) to ``python``.

    On Linux PyPI's torch is the multi-GB CUDA build: torch then also
    comes from the PyTorch CPU index.
    """
    platform = sys.platform if platform is None else platform
    extra = ""
    if platform.startswith("linux") and any(
            re.match(r"torch\b", line) for line in missing):
        extra = " --extra-index-url " + install_deps.CPU_INDEX
    return "{} -m pip install {}{}".format(
        quote(python), " ".join(quote(line) for line in missing), extra)


def quote(word):
    """``word`` quoted for bash, PowerShell and cmd alike where it has a
    space or a ``<``/``>`` (a version range), else as it is."""
    return '"{}"'.format(word) if re.search(r"[\s<>]", word) else word


def ready_problem(python, version, find_spec=None, path=REQUIREMENTS,
                  command=None):
    """Why the environment of ``python`` cannot run ``command`` (None: the
    whole homework), or None: too old a Python, or the packages it lacks
    with the pip line."""
    problem = install_deps.version_problem(version, python)
    if problem:
        return problem
    missing = missing_packages(find_spec, path, command)
    if not missing:
        return None
    return ("homework: the environment of {} lacks {} the homework needs: "
            "{}. Add {}:\n\n    {}\n\nor leave out PY= (--py) to install "
            ".venv with everything.".format(
                python, "a package" if len(missing) == 1 else
                "{} packages".format(len(missing)), ", ".join(
                    line.split("==")[0] for line in missing),
                "it" if len(missing) == 1 else "them",
                pip_line(python, missing)))


def check_environment(python, command=None):
    """Exit status of the readiness check of ``python`` for ``command``,
    run by that interpreter (``python homework.py --needs COMMAND ready``):
    its version and its packages, not this one's."""
    try:
        return subprocess.call([python, os.path.join(ROOT, "homework.py"),
                                "--py", python, "--needs", command or "all",
                                "ready"])
    except OSError as exc:
        print("homework: cannot run {} ({}): pass PY= (--py) the path of "
              "an existing Python.".format(python, exc.strerror),
              file=sys.stderr)
        return 1


def digest(path=REQUIREMENTS):
    """The requirements' digest, kept in the venv's stamp."""
    with open(path, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()


def installed(venv):
    """Whether ``venv`` holds a finished install of these requirements."""
    python = install_deps.venv_python(venv)
    try:
        with open(os.path.join(venv, STAMP)) as handle:
            return python is not None and handle.read().strip() == digest()
    except OSError:
        return False


def install(venv, python=None, say_done=False):
    """``venv`` with the requirements (once), the Jupyter kernel and this
    folder on its path; exit status. The stamp is written last, so an
    interrupted install is finished by the next run."""
    python = sys.executable if python is None else python
    if installed(venv):
        if say_done:
            print("homework: {} is installed (requirements.txt unchanged)"
                  .format(venv))
        return 0
    if os.path.realpath(python) != os.path.realpath(sys.executable):
        return subprocess.call([python, os.path.join(ROOT, "homework.py"),
                                "--venv", venv, "install"])
    try:
        os.remove(os.path.join(venv, STAMP))
    except OSError:
        pass
    status = install_deps.main(["--venv", venv, "-r", REQUIREMENTS,
                                "--no-compile"])
    if status:
        return status
    env_python = install_deps.venv_python(venv)
    status = subprocess.call([env_python, "-m", "ipykernel", "install",
                              "--sys-prefix", "--name", "python3"],
                             stdout=subprocess.DEVNULL)
    if status:
        print("homework: registering the Jupyter kernel failed (exit {}): "
              "run the same command again".format(status), file=sys.stderr)
        return status
    # lets the notebook (run from assignment/) import the package
    purelib = subprocess.run(
        [env_python, "-c",
         "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        stdout=subprocess.PIPE, universal_newlines=True, check=True
    ).stdout.strip()
    pth_name = value("homework", "name") + "_homework.pth"
    with open(os.path.join(purelib, pth_name), "w") as pth:
        pth.write(ROOT + "\n")
    with open(os.path.join(venv, STAMP), "w") as stamp:
        stamp.write(digest() + "\n")
    return 0


def run(command, python, args=()):
    """Run ``command`` (a key of COMMANDS) with ``python`` in this folder,
    this folder first on the import path; its exit status."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [ROOT] + [p for p in [env.get("PYTHONPATH")] if p])
    argv = [python] + COMMANDS[command] + list(args)
    print("homework: " + " ".join(argv), flush=True)
    try:
        status = subprocess.call(argv, cwd=ROOT, env=env)
    except KeyboardInterrupt:
        return 130
    if status and command == "notebook" and as_root() \
            and "--allow-root" not in args:
        print(ROOT_NOTEBOOK.format(python=quote(sys.executable)),
              file=sys.stderr)
    return status


# JupyterLab stops at once as root (a container, a root shell), in a line
# among its log's that names only its own option.
ROOT_NOTEBOOK = (
    "homework: JupyterLab does not run as root: run it as your own user, "
    "or pass its option: make notebook ARGS=--allow-root (without make: "
    "{python} homework.py notebook --allow-root)")


def as_root():
    """Whether this process is root (never on Windows)."""
    return getattr(os, "geteuid", lambda: 1)() == 0


def main(argv=None):
    """Parse the command line and run one command (see the module doc)."""
    parser = argparse.ArgumentParser(
        prog="homework.py", description=__doc__.splitlines()[0])
    parser.add_argument("--py", default=os.environ.get("PY") or None,
                        help="use this environment's python; install "
                             "nothing (default: $PY)")
    parser.add_argument("--python", default=None,
                        help="the Python that creates .venv (default: the "
                             "one running this file)")
    parser.add_argument("--venv", default=os.environ.get("VENV") or ".venv",
                        help="the venv folder (default: .venv)")
    parser.add_argument("--needs", default="all", help=argparse.SUPPRESS)
    parser.add_argument("command", choices=["install", "ready"]
                        + sorted(COMMANDS))
    parser.add_argument("file", nargs="?", help="check: the file to grade")
    # notebook: JupyterLab's own options pass through (--no-browser, ...)
    args, passed = parser.parse_known_args(argv)
    if passed and args.command != "notebook":
        parser.error("unrecognized arguments: " + " ".join(passed))
    venv = os.path.join(ROOT, args.venv)
    problem = install_deps.version_problem(sys.version_info, sys.executable)
    if problem and args.python is None and args.py is None:
        print(problem, file=sys.stderr)
        return 1
    if args.command == "install":
        return install(venv, args.python, say_done=True)
    if args.py and args.command == "ready":   # run by PY itself: here
        needs = None if args.needs == "all" else args.needs
        problem = ready_problem(args.py, sys.version_info, command=needs)
        if problem:
            print(problem, file=sys.stderr)
        return 1 if problem else 0
    if args.py:
        status = check_environment(args.py, args.command)
        python = args.py
    else:
        status = install(venv, args.python)
        python = install_deps.venv_python(venv)
    if status or args.command == "ready":
        return status
    extra = [args.file] if args.file and args.command == "check" else []
    if args.command == "notebook":
        extra = ([args.file] if args.file else []) + passed
    return run(args.command, python, extra)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:   # Ctrl-C: no traceback; the stamp is unset
        print("\nhomework: interrupted; run the same command again to "
              "finish", file=sys.stderr)
        sys.exit(130)
