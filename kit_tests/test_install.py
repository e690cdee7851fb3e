"""``make install`` as a user runs it: kit/install_deps.py and both Makefiles.

The install runs for real into a throwaway venv, against indexes made
here: the "PyTorch CPU index" is a local HTTP server that counts what it is
asked (it either fails with 503 or serves the torch wheel), the "default
index" a local PEP 503 folder built from ``pip download torch==X`` (cached
under build/). pip's own configuration is switched off
(``PIP_CONFIG_FILE=/dev/null``), so nothing else can serve torch.
"""
from __future__ import annotations

import html
import http.server
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from kit import install_deps

ROOT = Path(__file__).resolve().parents[1]
REQUIREMENTS = [ROOT / "requirements.txt",
                ROOT / "kit" / "student" / "requirements.txt",
                ROOT / "autograder" / "gradescope" / "requirements.txt"]
TORCH = install_deps.torch_pin((ROOT / "requirements.txt").read_text())
WHEELS = ROOT / "build" / "install-test" / "mpmath"
MESSAGE = "Python 3.11 or newer is needed"


def _argv_has(argv: list[str], *words: str) -> bool:
    text = " ".join(argv)
    return all(f" {w} " in f" {text} " for w in words)


def test_one_torch_pin_for_the_grader_a_range_around_it_for_students():
    # the kit and the grader pin one torch; the students' range (the
    # oldest to the newest torch the kit's checks were run on) holds it
    kit, student, grader = (install_deps.torch_pin(p.read_text())
                            for p in REQUIREMENTS)
    assert TORCH and kit == grader == TORCH and TORCH.startswith("torch==")
    assert re.fullmatch(r"torch>=[\d.]+,<=[\d.]+", student)
    assert install_deps.allows(student, TORCH.split("==")[1])
    assert not install_deps.allows(student, "2.2.1")
    assert not install_deps.allows(student, "99.0")


def test_torch_requirement_is_read_without_marker_or_spaces():
    assert install_deps.torch_pin(
        "x==1\ntorch >= 2.2.2, <= 2.15.0 ; sys_platform != 'win32'  # n\n"
    ) == "torch>=2.2.2,<=2.15.0"
    assert install_deps.torch_pin("torchvision==0.1\n") is None
    assert install_deps.allows("torch>=2.2.2,<=2.15.0", "2.15.0+cpu")


def test_linux_asks_the_cpu_index_for_torch_alone(tmp_path):
    requirements = tmp_path / "requirements.txt"
    requirements.write_text(f"{TORCH}\nsafetensors==0.8.0\n")
    steps = install_deps.plan("py", str(requirements), "http://cpu/",
                              "linux")
    purposes = [purpose for purpose, _ in steps]
    assert purposes == ["cpu-torch", "fallback-torch", "requirements"]
    cpu, fallback, rest = (argv for _, argv in steps)
    assert cpu[-1] == TORCH and _argv_has(
        cpu, "--no-deps", "--index-url http://cpu/", "--retries 0",
        "--timeout 5")
    assert fallback[-1] == TORCH and "http://cpu/" not in fallback
    assert "http://cpu/" not in rest and "-r" in rest
    for platform in ("darwin", "win32"):   # PyPI's wheels are CPU builds
        only = install_deps.plan("py", str(requirements), "http://cpu/",
                                 platform)
        assert [purpose for purpose, _ in only] == ["requirements"]
    assert len(install_deps.plan("py", str(requirements), "", "linux")) == 1


def test_the_fallback_takes_the_graders_torch_within_the_range(tmp_path):
    # Off the CPU index a range would take the default index's newest
    # torch (a CUDA build on Linux): the grader's pin, from the list the
    # release ships beside the requirements.
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("torch>=2.2.2,<=2.15.0\nsafetensors==0.8.0\n")
    (tmp_path / "autograder").mkdir()
    listing = tmp_path / "autograder" / "imports.toml"
    listing.write_text('[[package]]\nname = "torch"\n'
                       'requirement = "torch==2.13.0"\n')

    def fallback() -> list[str]:
        steps = dict(install_deps.plan("py", str(requirements),
                                       "http://cpu/", "linux"))
        return steps["fallback-torch"]
    assert fallback()[-1] == "torch==2.13.0"
    assert dict(install_deps.plan("py", str(requirements), "http://cpu/",
                                  "linux"))["cpu-torch"][-1] == \
        "torch>=2.2.2,<=2.15.0"      # the CPU index: any in the range
    # The controls: a pin outside the range, or no list, keeps the range.
    listing.write_text('requirement = "torch==2.1.0"\n')
    assert fallback()[-1] == "torch>=2.2.2,<=2.15.0"
    listing.unlink()
    assert fallback()[-1] == "torch>=2.2.2,<=2.15.0"


def test_the_release_ships_the_list_the_fallback_reads(tmp_path):
    from kit.release import student
    student.ship_profile(tmp_path)     # the profile and its data files
    shutil.copy2(ROOT / "kit" / "student" / "requirements.txt", tmp_path)
    pin = next(line.split("#")[0].strip() for line in (
        ROOT / "requirements.txt").read_text().splitlines()
        if line.startswith("torch=="))
    assert install_deps.grader_pin(str(tmp_path / "requirements.txt")) \
        == pin


def _mpmath_wheel() -> Path:
    """mpmath (a small pure-Python package) as a wheel file, fetched once
    from the default index: a real package beside the stand-in torch."""
    if not list(WHEELS.glob("mpmath-*.whl")):
        WHEELS.parent.mkdir(parents=True, exist_ok=True)
        partial = Path(tempfile.mkdtemp(dir=WHEELS.parent))
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet",
                        "--disable-pip-version-check", "--no-deps",
                        "-d", str(partial), "mpmath"], check=True,
                       timeout=600)
        try:
            partial.rename(WHEELS)
        except OSError:     # another test process fetched it first
            shutil.rmtree(partial, ignore_errors=True)
    return next(WHEELS.glob("mpmath-*.whl"))


def _simple_index(files: list[Path], dest: Path) -> str:
    """A PEP 503 index of ``files`` in ``dest``; its file:// URL."""
    projects: dict[str, list[Path]] = {}
    for path in files:
        name = re.sub(r"[-_.]+", "-", path.name.split("-")[0]).lower()
        projects.setdefault(name, []).append(path)
    for name, paths in projects.items():
        (dest / name).mkdir(parents=True)
        (dest / name / "index.html").write_text("".join(
            f'<a href="{p.resolve().as_uri()}">{html.escape(p.name)}</a>\n'
            for p in paths))
    return dest.resolve().as_uri()


class _CpuIndex(http.server.BaseHTTPRequestHandler):
    """Records every request; 503 unless ``wheel`` is set, then serves
    torch's page and that one file."""

    wheel: Path | None = None
    asked: list[str] = []

    def do_GET(self):  # noqa: N802 (http.server's name)
        path = urllib.parse.unquote(self.path)
        self.asked.append(path)
        wheel = self.wheel
        if wheel is not None and path.rstrip("/") == "/torch":
            kind = "text/html"
            body = (f'<a href="/files/{urllib.parse.quote(wheel.name)}">'
                    f'{html.escape(wheel.name)}</a>').encode()
        elif wheel is not None and path == f"/files/{wheel.name}":
            kind, body = "application/octet-stream", wheel.read_bytes()
        else:
            self.send_error(503 if wheel is None else 404)
            return
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def cpu_index() -> Iterator[tuple[str, type[_CpuIndex]]]:
    handler = type("Handler", (_CpuIndex,), {"asked": [], "wheel": None})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/", handler
    server.shutdown()
    server.server_close()


def _install(venv: Path, requirements: Path, index: str, cpu: str):
    """install_deps.py as the Makefiles run it, with pip's configuration
    off and ``index`` as the default index; (seconds, output)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_INDEX_URL=index,
               PIP_DISABLE_PIP_VERSION_CHECK="1")
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, str(ROOT / "kit" / "install_deps.py"),
         "--venv", str(venv), "-r", str(requirements),
         "--torch-index", cpu],
        env=env, capture_output=True, text=True, timeout=1200)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    return time.monotonic() - start, output


def _torch_version(venv: Path) -> str:
    return subprocess.run(
        [str(venv / "bin" / "python"), "-c",
         "import torch; print(torch.__version__)"],
        capture_output=True, text=True, check=True).stdout.strip()


def _fake_torch(dest: Path) -> Path:
    """A tiny pure-Python wheel called torch at the pinned version."""
    version = TORCH.split("==")[1]
    wheel = dest / f"torch-{version}-py3-none-any.whl"
    info = f"torch-{version}.dist-info"
    files = {"torch/__init__.py": f'__version__ = "{version}"\n',
             f"{info}/METADATA": ("Metadata-Version: 2.1\nName: torch\n"
                                  f"Version: {version}\n"),
             f"{info}/WHEEL": ("Wheel-Version: 1.0\nGenerator: kit\n"
                               "Root-Is-Purelib: true\nTag: py3-none-any\n")}
    files[f"{info}/RECORD"] = "".join(f"{name},,\n" for name in
                                      [*files, f"{info}/RECORD"])
    with zipfile.ZipFile(wheel, "w") as zf:
        for name, text in files.items():
            zf.writestr(name, text)
    return wheel


linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="the CPU index is used on Linux only")


@linux_only
def test_unreachable_cpu_index_falls_back_fast(tmp_path, cpu_index):
    # The CPU index fails (503): one request for torch, no retry storm,
    # then torch from the default index. (A tiny stand-in for torch: the
    # real wheel's install through the same code is the Gradescope image's,
    # kit_tests/test_gradescope_image.py, and `make install` itself.)
    url, handler = cpu_index
    requirements = tmp_path / "requirements.txt"
    requirements.write_text(f"{TORCH}\n")
    default = _simple_index([_fake_torch(tmp_path)], tmp_path / "default")
    seconds, output = _install(tmp_path / "venv", requirements, default, url)
    assert handler.asked == ["/torch/"]
    waited = re.search(r"did not serve torch \(([\d.]+) s\)", output)
    assert waited, output[-4000:]
    print(f"\nCPU index down: fell back after {waited.group(1)} s "
          f"(whole install {seconds:.0f} s)")
    assert _torch_version(tmp_path / "venv").startswith(
        TORCH.split("==")[1])


@linux_only
def test_cpu_index_serves_torch_alone(tmp_path, cpu_index):
    # The CPU index serves torch (a tiny stand-in: the real wheel's install
    # is the test above): asked for torch alone; the rest, here mpmath,
    # from the default index, which has no torch.
    url, handler = cpu_index
    handler.wheel = _fake_torch(tmp_path)
    requirements = tmp_path / "requirements.txt"
    requirements.write_text(f"{TORCH}\nmpmath\n")
    default = _simple_index([_mpmath_wheel()], tmp_path / "default")
    _, output = _install(tmp_path / "venv", requirements, default, url)
    assert handler.asked == ["/torch/", f"/files/{handler.wheel.name}"]
    assert "did not serve" not in output
    done = subprocess.run(
        [str(tmp_path / "venv" / "bin" / "python"), "-c",
         "import mpmath, torch; print(torch.__file__)"],
        capture_output=True, text=True, check=True)
    assert str(tmp_path / "venv") in done.stdout


@pytest.fixture
def python310(tmp_path) -> Path:
    """An interpreter that says it is Python 3.10.12 (this one, patched)."""
    fake = tmp_path / "python3.10"
    fake.write_text(
        "#!/bin/sh\n"
        f'exec "{sys.executable}" -c "import runpy, sys; '
        "sys.version_info = (3, 10, 12, 'final', 0); "
        "sys.argv = sys.argv[1:]; "
        "runpy.run_path(sys.argv[0], run_name='__main__')\" \"$@\"\n")
    fake.chmod(0o755)
    return fake


def _student(tmp_path: Path) -> Path:
    """The release's install files, laid out as students unzip them."""
    folder = tmp_path / "student"
    folder.mkdir()
    for path in (ROOT / "kit" / "student" / "Makefile",
                 ROOT / "kit" / "student" / "requirements.txt",
                 ROOT / "kit" / "student" / "homework.py",
                 ROOT / "kit" / "student" / "homework_profile.py",
                 ROOT / "homework.toml",
                 ROOT / "kit" / "install_deps.py"):
        shutil.copy2(path, folder / path.name)
    return folder


def _make(folder: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items()
           if k not in ("MAKEFLAGS", "MFLAGS", "PY", "PYTHON", "VENV")}
    return subprocess.run(["make", "--no-print-directory", "-C",
                           str(folder), *args], env=env, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize("makefile", ["kit", "student"])
def test_old_python_stops_at_once_with_the_message(tmp_path, python310,
                                                   makefile):
    folder = ROOT if makefile == "kit" else _student(tmp_path)
    venv = tmp_path / "venv"
    for args in ([f"PYTHON={python310}", f"VENV={venv}", "install"],
                 [f"PY={python310}", "test"]):
        done = _make(folder, *args)
        assert done.returncode != 0, args
        assert MESSAGE in done.stderr and "3.10.12" in done.stderr, args
        assert not venv.exists()
        assert "-m pytest" not in done.stdout   # stopped before the target


def test_py_uses_that_interpreter_and_installs_nothing(tmp_path):
    folder = ROOT
    python = "/opt/somewhere/bin/python3"
    planned = _make(folder, "-n", f"PY={python}", "test").stdout
    assert f"{python} " in planned and "--check" in planned
    assert "--venv" not in planned and "pip" not in planned
    assert re.search(rf"^{re.escape(python)} -m pytest", planned, re.M)
    # without PY=, the same target installs through install_deps.py first
    installs = _make(folder, "-n", f"VENV={tmp_path / 'v'}", "test").stdout
    assert "install_deps.py --venv" in installs
    assert "--torch-index \"https://download.pytorch.org/whl/cpu\"" in (
        installs)
    # and the check passes for this (recent) interpreter
    assert _make(folder, f"PY={sys.executable}",
                 "python-version").returncode == 0


def test_student_py_runs_that_interpreter_and_installs_nothing(tmp_path):
    # The student Makefile runs homework.py with PY= itself: its tests run
    # there (a one-test suite) and no venv is made.
    folder = _student(tmp_path)
    (folder / "tests").mkdir()
    (folder / "tests" / "test_one.py").write_text(
        "import sys\n\ndef test_where():\n"
        "    print('ran by', sys.executable)\n")
    done = _make(folder, f"PY={sys.executable}", f"VENV={tmp_path / 'v'}",
                 "test")
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(rf"^homework: {re.escape(sys.executable)} -m pytest "
                     "tests$", done.stdout, re.M)
    assert "1 passed" in done.stdout
    assert not (tmp_path / "v").exists()


def test_dry_run_prints_the_plan_and_creates_nothing(tmp_path):
    venv = tmp_path / "venv"
    done = subprocess.run(
        [sys.executable, str(ROOT / "kit" / "install_deps.py"), "--dry-run",
         "--venv", str(venv), "-r", str(ROOT / "requirements.txt"),
         "--torch-index", "http://cpu/"],
        capture_output=True, text=True, check=True)
    expected = [purpose for purpose, _ in install_deps.plan(
        "py", str(ROOT / "requirements.txt"), "http://cpu/", sys.platform)]
    assert [line.split(":")[0] for line in
            done.stdout.splitlines()] == expected
    assert not venv.exists()
