"""The student's install and commands: install_deps.py and homework.py.

Platforms: the venv runs here (Linux) for real; Debian 12 and 13 without
``python3.X-venv`` are simulated (``find_spec`` answering None for
``ensurepip``, and a wrapper interpreter whose import system lacks it);
Windows is simulated by its layout (``Scripts\\python.exe``) and
``sys.platform`` "win32"; PyPI's CUDA torch by a stand-in interpreter
whose torch requires NVIDIA packages.
"""
from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from autograder import homework as profile
from kit import install_deps

ROOT = Path(__file__).resolve().parents[1]
STUDENT = ROOT / "kit" / "student"
REQUIREMENTS = STUDENT / "requirements.txt"


@pytest.fixture(autouse=True)
def _no_make_variables(monkeypatch):
    """homework.py reads PY and VENV from the environment, as `make` passes
    them; the suite itself may run under `make test PY=...`."""
    monkeypatch.delenv("PY", raising=False)
    monkeypatch.delenv("VENV", raising=False)


def _homework():
    """kit/student/homework.py as a module (it imports install_deps from
    beside itself in the release; here kit/ provides it)."""
    sys.path.insert(0, str(ROOT / "kit"))
    try:
        spec = importlib.util.spec_from_file_location(
            "student_homework", STUDENT / "homework.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(ROOT / "kit"))
    return module


homework = _homework()


def _student(tmp_path: Path) -> Path:
    """The release's install files, laid out as students unzip them."""
    folder = tmp_path / "student"
    folder.mkdir()
    for path in (STUDENT / "Makefile", REQUIREMENTS, STUDENT / "homework.py",
                 STUDENT / "homework_profile.py", ROOT / "homework.toml",
                 ROOT / "kit" / "install_deps.py"):
        (folder / path.name).write_bytes(path.read_bytes())
    return folder


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("MAKEFLAGS", "MFLAGS", "PY", "PYTHON", "VENV",
                        "PYTHONPATH") and not k.startswith("PIP_")}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_NO_INDEX="1",
               PIP_DISABLE_PIP_VERSION_CHECK="1", **extra)
    return env


# -- the venv module ---------------------------------------------------------

@pytest.mark.parametrize("version,release", [
    ((3, 11, 2), ("debian", "12")), ((3, 13, 5), ("debian", "13")),
    ((3, 12, 3), ("ubuntu", "24.04"))])
def test_missing_ensurepip_names_the_package_of_this_python(version,
                                                            release):
    # Simulated Debian/Ubuntu system Python without python3.X-venv.
    problem = install_deps.venv_module_problem(
        find_spec=lambda name: None if name == "ensurepip" else object(),
        executable=f"/usr/bin/python3.{version[1]}", version=version,
        release=release)
    assert f"apt-get install python3.{version[1]}-venv" in problem
    assert "ensurepip" in problem and "run the same command again" in problem
    assert install_deps.venv_module_problem(
        find_spec=lambda name: object()) is None


def test_missing_venv_elsewhere_names_no_apt_package():
    problem = install_deps.venv_module_problem(
        find_spec=lambda name: None, executable="/opt/python/bin/python3",
        version=(3, 12, 1), release=("fedora", "41"))
    assert "no venv and no ensurepip module" in problem
    assert "apt-get" not in problem and "PYTHON=" in problem


@pytest.fixture
def no_ensurepip(tmp_path) -> Path:
    """This interpreter, started so that ``ensurepip`` cannot be found (as
    on Debian without python3.X-venv)."""
    fake = tmp_path / "python-no-ensurepip"
    fake.write_text(
        "#!/bin/sh\n"
        f'exec "{sys.executable}" -c "import importlib.util as u, runpy, '
        "sys; real = u.find_spec; u.find_spec = lambda n, *a: None if n == "
        "'ensurepip' else real(n, *a); sys.argv = sys.argv[1:]; "
        "runpy.run_path(sys.argv[0], run_name='__main__')\" \"$@\"\n")
    fake.chmod(0o755)
    return fake


def test_no_venv_is_made_without_ensurepip(tmp_path, no_ensurepip):
    folder = _student(tmp_path)
    done = subprocess.run(["make", "--no-print-directory", "install",
                           f"PYTHON={no_ensurepip}"], cwd=folder,
                          env=_clean_env(), capture_output=True, text=True,
                          timeout=120)
    assert done.returncode != 0
    package = f"python3.{sys.version_info[1]}-venv"
    assert package in done.stderr and "no ensurepip module" in done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    assert "did not serve torch" not in done.stdout
    assert not (folder / ".venv").exists()


def _wheel_requirements(tmp_path: Path) -> Path:
    """Requirements installable offline: one tiny local wheel."""
    from kit_tests.test_install import _fake_torch
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    requirements = tmp_path / "requirements.txt"
    requirements.write_text(f"{_fake_torch(wheels)}\n")
    return requirements


@pytest.mark.e2e   # the installer into a real venv (make test-all)
def test_half_made_venv_is_made_again(tmp_path):
    # What `python3 -m venv` leaves on Debian without python3.X-venv: a
    # venv with no pip. The next install removes it and succeeds.
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip",
                    str(venv)], check=True)
    requirements = _wheel_requirements(tmp_path)
    done = subprocess.run(
        [sys.executable, str(ROOT / "kit" / "install_deps.py"), "--venv",
         str(venv), "-r", str(requirements), "--torch-index", ""],
        env=_clean_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{venv} is half-made (no pip in it): removing it" in done.stdout
    assert re.search(r"ready in \d+ s \(\d+\.\d GB\)", done.stdout)
    subprocess.run([str(venv / "bin" / "python"), "-c", "import torch"],
                   check=True)


def test_a_folder_that_is_no_venv_is_never_removed(tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "notes.txt").write_text("keep me")
    with pytest.raises(SystemExit, match="not a virtual environment"):
        install_deps.ensure_venv(str(folder))
    assert (folder / "notes.txt").read_text() == "keep me"


# -- torch's size -------------------------------------------------------------

def _stub(path: Path, status: int, output: str = "") -> str:
    path.write_text(f"#!/bin/sh\nprintf '{output}'\nexit {status}\n")
    path.chmod(0o755)
    return str(path)


def test_cuda_fallback_is_named_with_its_size(tmp_path):
    # The CPU index fails; the default index's torch requires NVIDIA
    # packages (PyPI's Linux build), simulated by a stand-in interpreter.
    cuda = _stub(tmp_path / "cuda-python", 0,
                 "filelock\\nnvidia-cublas-cu12==12.8; platform_system == "
                 "\"Linux\"\\nnvidia-cudnn-cu12==9.10\\n")
    steps = [("cpu-torch", [_stub(tmp_path / "down", 1)]),
             ("fallback-torch", [cuda]), ("requirements", [cuda])]
    said: list[str] = []
    assert install_deps.run_plan(steps, said.append, "http://cpu/") == 0
    note = next(line for line in said if "CUDA build" in line)
    assert "2 NVIDIA packages" in note and "5.3 GB" in note
    assert "http://cpu/" in note
    # a CPU torch from the default index (no NVIDIA requirement): no note
    cpu = _stub(tmp_path / "cpu-python", 0, "filelock\\nsympy\\n")
    said.clear()
    install_deps.run_plan([("cpu-torch", [_stub(tmp_path / "d2", 1)]),
                           ("fallback-torch", [cpu])], said.append)
    assert not any("CUDA" in line for line in said)


# -- bring your own environment (PY=) ---------------------------------------

def _only(*present: str):
    return lambda name: object() if name in present else None


def test_missing_packages_get_one_pip_line():
    # An environment holding only torch, pytest and pycodestyle (simulated
    # find_spec): check lacks safetensors and numpy (which safetensors
    # saves with), the notebook much more.
    find_spec = _only("torch", "pytest", "pycodestyle")
    pins = dict(homework.requirements(REQUIREMENTS))
    problem = homework.ready_problem("/env/bin/python", (3, 12, 0),
                                     find_spec, REQUIREMENTS, "check")
    assert problem.count("-m pip install") == 1
    assert (f"/env/bin/python -m pip install {pins['numpy']} "
            f"{pins['safetensors']}\n") in problem + "\n"
    whole = homework.ready_problem("/env/bin/python", (3, 12, 0), find_spec,
                                   REQUIREMENTS)
    line = next(x for x in whole.splitlines() if "-m pip install" in x)
    assert set(line.split("install", 1)[1].split()) == {
        pins[n] for n in pins if n not in ("torch", "pytest", "pycodestyle")}
    assert homework.ready_problem("/p", (3, 12, 0), _only(*map(
        homework.module_of, pins)), REQUIREMENTS) is None


def test_pip_line_takes_torch_from_the_cpu_index_on_linux():
    line = homework.pip_line("/p", ["torch==2.13.0"], "linux")
    assert line.endswith("--extra-index-url " + install_deps.CPU_INDEX)
    assert "index" not in homework.pip_line("/p", ["torch==2.13.0"],
                                            "darwin")


@pytest.mark.parametrize("target", ["check", "test", "submission",
                                    "notebook"])
def test_an_empty_environment_gets_the_line_not_a_traceback(tmp_path,
                                                            target):
    # A real venv without packages (no system site packages) as PY=.
    env = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip",
                    str(env)], check=True)
    folder = _student(tmp_path)
    done = subprocess.run(["make", "--no-print-directory", target,
                           f"PY={env / 'bin' / 'python'}"], cwd=folder,
                          env=_clean_env(), capture_output=True, text=True,
                          timeout=120)
    assert done.returncode != 0
    assert "Traceback" not in done.stdout + done.stderr
    line = next(x for x in done.stderr.splitlines() if "pip install" in x)
    assert '"torch>=' in line and "numpy==" in line
    assert ("jupyterlab==" in line) == (target == "notebook")
    assert not (folder / ".venv").exists()


def test_readme_installs_the_requirements_file_with_the_students_python():
    # the own-environment line is requirements.txt itself: complete by
    # construction, and with the student's Python, not a bare `python`
    readme = (STUDENT / "README.md").read_text()
    lines = [x for x in readme.splitlines() if "-m pip install" in x]
    assert lines == ["/path/to/python -m pip install -r requirements.txt"]
    assert "python -m pip" not in readme.replace("/path/to/python -m", "")


@pytest.mark.parametrize("platform,machine,numpy", [
    ("darwin", "x86_64", "numpy==1.26.4"), ("darwin", "arm64", "numpy==2.4.6"),
    ("linux", "x86_64", "numpy==2.4.6"), ("win32", "AMD64", "numpy==2.4.6")])
def test_requirements_apply_their_markers(platform, machine, numpy):
    found = homework.requirements(REQUIREMENTS, platform, machine)
    assert [line for name, line in found if name == "numpy"] == [numpy]
    torch = dict(found)["torch"]
    assert torch == install_deps.torch_pin(REQUIREMENTS.read_text())
    assert homework.pip_line("/p", [torch], platform).split()[4] == \
        f'"{torch}"'   # quoted: `<` and `>` are redirections in a shell


def _release_folder(tmp_path: Path) -> Path:
    """The student's folder with the checker, the package and the values
    of the checkout (what `check` reads), linked."""
    folder = _student(tmp_path)
    for name in ("autograder", "transformer_lm", "test_values", "tests"):
        (folder / name).symlink_to(ROOT / name)
    return folder


def test_check_runs_in_an_environment_of_only_what_it_needs(tmp_path):
    # An environment of the student's own with exactly the packages
    # `check` asks for (homework.NEEDS) and what their metadata requires:
    # nothing found beside them by chance (numpy beside safetensors).
    from kit_tests.own_environment import own_environment
    python = own_environment(homework.NEEDS["check"], tmp_path / "own")
    folder = _release_folder(tmp_path)
    reference = profile.staff().reference
    done = subprocess.run(
        [sys.executable, "homework.py", "--py", str(python), "check",
         str(reference)], cwd=folder, env=_clean_env(), capture_output=True,
        text=True, timeout=600)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    assert "No module named" not in out and "lacks" not in out
    assert re.search(r"public: ([\d.]+) / \1 points", out), out[-2000:]


def test_python_2_gets_one_line(tmp_path):
    # No Python 2 here: homework.py must parse in Python 2's grammar
    # (lib2to3's, print as a function: its __future__ import), hold no
    # syntax lib2to3 lets through (f-strings, annotations), and stop
    # before its first import Python 2 lacks.
    import ast
    import warnings
    source = (STUDENT / "homework.py").read_text()
    tree = ast.parse(source)
    assert not [n for n in ast.walk(tree) if isinstance(
        n, (ast.JoinedStr, ast.AnnAssign, ast.NamedExpr, ast.AsyncFunctionDef,
            ast.Nonlocal, ast.YieldFrom))]
    assert not [a for n in ast.walk(tree) if isinstance(n, ast.arguments)
                for a in n.kwonlyargs + n.posonlyargs]
    assert "from __future__ import print_function" in source
    guard = source.index("if sys.version_info[0] < 3:")
    assert guard < source.index("import install_deps")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            from lib2to3 import pygram, pytree
            from lib2to3.pgen2 import driver
        except ImportError:
            pytest.skip("no lib2to3 (Python >= 3.13) to parse as Python 2")
    driver.Driver(pygram.python_grammar_no_print_statement,
                  convert=pytree.convert).parse_string(source)
    # the guard's line, run as Python 2 would see it
    code = source[guard:source.index("\n\n", guard)]
    fake = type("sys", (), {"version_info": (2, 7, 18), "executable":
                            "/usr/bin/python2", "version": "2.7.18 (x)",
                            "exit": staticmethod(lambda m: (_ for _ in ())
                                                 .throw(SystemExit(m)))})
    with pytest.raises(SystemExit) as stop:
        exec(code, {"sys": fake})
    assert str(stop.value).count("\n") == 0
    assert "Python 3.11 or newer" in str(stop.value)
    assert "/usr/bin/python2 is Python 2.7.18" in str(stop.value)


def test_notebook_is_rooted_at_the_homework_with_the_notebook_open():
    # `make notebook` is homework.py's: JupyterLab rooted at the folder
    # (transformer_lm/ opens from it), its URL opening the notebook.
    makefile = (STUDENT / "Makefile").read_text()
    recipe = re.search(r"^notebook:.*\n\t(.*)$", makefile, re.M).group(1)
    assert recipe.split() == ["@$(HOMEWORK)", "notebook", "$(ARGS)"]
    command = homework.COMMANDS["notebook"]
    assert f"--ServerApp.root_dir={homework.ROOT}" in command
    notebook = homework.NOTEBOOK
    assert notebook == profile.staff().notebook.relative_to(ROOT).as_posix()
    assert f"--LabApp.default_url=/lab/tree/{notebook}" in command


# -- Windows (simulated) ----------------------------------------------------

def test_windows_venv_layout(tmp_path, monkeypatch):
    # Simulated: sys.platform "win32" and a venv whose python is
    # Scripts\python.exe (no bin/): install, then run a command with it.
    venv = tmp_path / "venv"
    scripts = venv / "Scripts" / "python.exe"
    calls: list[list[str]] = []

    def fake_install(argv):
        scripts.parent.mkdir(parents=True)
        scripts.write_text("")
        assert argv[:2] == ["--venv", str(venv)]
        return 0

    def fake_call(argv, **kw):
        calls.append([str(a) for a in argv])
        return 0

    class Done:
        stdout = str(tmp_path / "site") + "\n"

    (tmp_path / "site").mkdir()
    monkeypatch.setattr(sys, "platform", "win32")
    monkeypatch.setattr(homework.install_deps, "main", fake_install)
    monkeypatch.setattr(homework.subprocess, "call", fake_call)
    monkeypatch.setattr(homework.subprocess, "run",
                        lambda *a, **k: Done())
    assert homework.main(["--venv", str(venv), "check", "mine.py"]) == 0
    assert calls[0][:3] == [str(scripts), "-m", "ipykernel"]
    assert calls[-1] == [str(scripts), "-m", "autograder", "check",
                         "mine.py"]
    assert homework.installed(str(venv))
    pth = f"{profile.current().name}_homework.pth"
    assert (tmp_path / "site" / pth).read_text().strip() == homework.ROOT
    # installed: the next command installs nothing
    calls.clear()
    assert homework.main(["--venv", str(venv), "test"]) == 0
    assert calls == [[str(scripts), "-m", "pytest", "tests"]]
    assert [p for p, _ in install_deps.plan(
        str(scripts), str(REQUIREMENTS), install_deps.CPU_INDEX,
        sys.platform)] == ["requirements"]


# -- the student's walk on a minimal Debian (kit/machine/fresh_machine.py) --

def test_student_walk_installs_only_the_readme_packages():
    # The walk itself runs in `make test-fresh` (root, debootstrap); here
    # its plan: the README's packages, the venv trap first, no rm.
    from kit.machine import fresh_machine
    from kit.system_deps import readme_packages
    readme = (STUDENT / "README.md").read_text()
    walk = fresh_machine.student_walk(readme)
    apt = [line for user, _, line in walk if "apt-get install" in line]
    packages = readme_packages(readme)
    assert any(p.endswith("-venv") for p in packages)
    assert apt[0].split("--no-install-recommends")[1].split() == [
        p for p in packages if not p.endswith("-venv")]
    assert apt[-1].split("--no-install-recommends")[1].split() == packages
    lines = [line for user, _, line in walk if user == fresh_machine.USER]
    assert lines.index("make install") > next(
        i for i, x in enumerate(lines) if x.startswith("! make install"))
    assert not any("rm " in line for line in lines)
    assert any(x.startswith("make check") for x in lines)
    assert any("make test" in x for x in lines)


def test_an_empty_folder_is_filled_not_refused(tmp_path, monkeypatch):
    # `VENV=` may name a folder made beforehand: an empty one is used.
    made: list[str] = []
    monkeypatch.setattr(install_deps, "create_venv",
                        lambda venv: made.append(venv) or "python")
    (tmp_path / "empty").mkdir()
    assert install_deps.ensure_venv(str(tmp_path / "empty")) == "python"
    assert made == [str(tmp_path / "empty")]


@pytest.mark.parametrize("root, args, status, hinted", [
    (True, [], 1, True),
    (True, ["--allow-root"], 1, False),   # asked for: JupyterLab's own fault
    (True, [], 0, False),
    (False, [], 1, False),
])
def test_a_notebook_refused_as_root_names_the_option(
        monkeypatch, capsys, root, args, status, hinted):
    # JupyterLab as root stops at once naming only its own option; the
    # student runs make: the hint gives the make and homework.py forms
    monkeypatch.setattr(homework, "as_root", lambda: root)
    monkeypatch.setattr(homework.subprocess, "call", lambda *a, **k: status)
    assert homework.run("notebook", "python", args) == status
    err = capsys.readouterr().err
    assert ("make notebook ARGS=--allow-root" in err) == hinted
    assert (f"{sys.executable} homework.py notebook --allow-root"
            in err) == hinted


# -- no torch for this platform ----------------------------------------------

RANGE = install_deps.torch_pin(REQUIREMENTS.read_text())


def test_no_torch_on_windows_on_arm_names_x64_python_or_wsl():
    said = install_deps.no_torch_advice(RANGE, "win32", "ARM64", (3, 12, 1))
    assert "no torch for Windows on ARM" in said
    assert "x64" in said and "WSL" in said and said.count("\n") == 0


def test_no_torch_on_an_intel_mac_names_the_python_that_has_one():
    newest, top = install_deps.INTEL_MAC_TORCH
    said = install_deps.no_torch_advice(RANGE, "darwin", "x86_64",
                                        (3, 13, 0))
    assert f"newest torch for Intel Macs is {newest}" in said
    assert "accepts it" in said and "Python 3.13" in said
    assert f"make install PYTHON=python3.{top[1]}" in said
    # a range above the Intel Mac's newest: not in range, the other paths
    older = install_deps.no_torch_advice("torch>=2.5", "darwin", "x86_64",
                                         (3, 12, 0))
    assert "older than this homework accepts" in older


def test_pips_no_matching_torch_becomes_the_platforms_sentence(tmp_path):
    pip = _stub(tmp_path / "pip", 1, "")
    (tmp_path / "pip").write_text(
        "#!/bin/sh\necho 'ERROR: Could not find a version that satisfies "
        "the requirement torch>=2.2.2 (from versions: 2.0.0, 2.2.2)' >&2\n"
        "echo 'ERROR: No matching distribution found for torch>=2.2.2' >&2\n"
        "exit 1\n")
    said: list[str] = []
    assert install_deps.run_plan([("requirements", [pip])], said.append,
                                 requirement=RANGE) == 1
    assert any("pip found no torch" in line for line in said[1:]), said
    # another package missing: pip's own words, nothing added
    (tmp_path / "pip").write_text(
        "#!/bin/sh\necho 'ERROR: No matching distribution found for "
        "torchvision' >&2\nexit 1\n")
    said.clear()
    install_deps.run_plan([("requirements", [pip])], said.append,
                          requirement=RANGE)
    assert len(said) == 1


# -- Windows' path limit (simulated: sys.platform "win32") -------------------

def test_a_deep_folder_on_windows_is_refused_before_the_install(
        tmp_path, monkeypatch):
    # a venv whose site-packages plus the deepest file is one character
    # over Windows' limit; the same one character shorter is fine (paths
    # only: under a short base, whatever the test's own folder)
    base = os.path.abspath(os.sep + "w")
    tail = len(os.path.join(".venv", "Lib", "site-packages", "")) + 1
    room = (install_deps.MAX_PATH - install_deps.DEEPEST_SITE_PACKAGES_FILE
            - tail - len(base) - 1)
    fits = os.path.join(base, "x" * (room - 1), ".venv")
    over = os.path.join(base, "x" * room, ".venv")
    problem = install_deps.long_path_problem(over, "win32", long_paths=False)
    assert problem and "too deep for Windows" in problem
    assert install_deps.SHORT_FOLDER in problem and "259" in problem
    assert install_deps.long_path_problem(fits, "win32",
                                          long_paths=False) is None
    assert install_deps.long_path_problem(over, "win32",
                                          long_paths=True) is None
    assert install_deps.long_path_problem(over, "linux") is None
    # ensure_venv stops there, before any venv is made
    monkeypatch.setattr(sys, "platform", "win32")
    monkeypatch.setattr(install_deps, "_long_paths_enabled", lambda: False)
    deep = tmp_path / ("x" * 150) / ("y" * 150) / ".venv"
    with pytest.raises(SystemExit, match="too deep for Windows"):
        install_deps.ensure_venv(str(deep))
    assert not deep.parent.parent.exists()


def test_the_readmes_windows_folder_fits_the_path_limit():
    # $HOME\hw\<folder>\.venv\Lib\site-packages\ + the deepest file, for
    # Windows' longest local user name (20 characters)
    home = "C:\\Users\\" + "u" * 20
    site = "\\".join([home, "hw", profile.current().release_folder,
                      ".venv", "Lib",
                      "site-packages", ""])
    assert len(site) + install_deps.DEEPEST_SITE_PACKAGES_FILE < \
        install_deps.MAX_PATH
    readme = (STUDENT / "README.md").read_text()
    assert "-DestinationPath $HOME\\hw" in readme
    assert install_deps.SHORT_FOLDER.replace("\\\\", "\\") in readme
    # and where Explorer's "Extract All" would put it, it does not fit
    downloads = "\\".join([home, "Downloads", "student",
                           profile.current().release_folder,
                           ".venv", "Lib", "site-packages", ""])
    assert len(downloads) + install_deps.DEEPEST_SITE_PACKAGES_FILE >= \
        install_deps.MAX_PATH


def test_the_deepest_site_packages_file_is_measured():
    # the constant covers every file of this environment's packages that
    # the student's requirements install (torch's license tree is deepest)
    import importlib.metadata as metadata
    from kit_tests.own_environment import closure
    names = [name for name, _ in homework.requirements(REQUIREMENTS)]
    deepest = max(len(str(file)) for dist in closure(names).values()
                  for file in dist.files or [] if file.parts[0] != "..")
    assert deepest <= install_deps.DEEPEST_SITE_PACKAGES_FILE
    assert metadata.version("torch")
