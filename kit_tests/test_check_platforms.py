"""``check`` where the Linux jail cannot run (autograder/sandbox/plain.py):
a simulated macOS and a simulated Windows (kit_tests/simulated_platform.py,
each in its own subprocess so that nothing leaks into other tests), and
the plain child's verdicts beside the jail's.

Simulated, not run for real: the grader's modules see the platform's
``sys.platform``, ``os``, ``signal``, missing modules and no ``/proc``; the
standard library and torch underneath are still Linux's (see the
simulation's docstring for what that leaves out).
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from autograder.rubric import load_rubric
from kit_tests.reference_source import FULL_REFERENCE

ROOT = Path(__file__).resolve().parents[1]
SIMULATE = ROOT / "kit_tests" / "simulated_platform.py"
SKELETON = ROOT / "transformer_lm" / "modeling_attention.py"
PLATFORMS = ["darwin", "win32"]
# What a student must never be told: staff remedies and staff places.
STAFF_WORDS = ("regrade", "staff", "on the reference",
               "AUTOGRADER_NO_NAMESPACES", "Traceback")
SUMMARY = re.compile(r"^public: ([\d.]+) / ([\d.]+) points "
                     r"\(\+([\d.]+) bonus\)", re.M)
ITEM = re.compile(r"^\s+\[(ok  |FAIL)\] (\S+) ", re.M)


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k != "AUTOGRADER_SIMULATE"}
    env.update(PYTHONPATH=str(ROOT),
               AUTOGRADER_CACHE_DIR=str(tmp_path / "cache"))
    return env


def _simulated(platform: str, args: list[str], tmp_path: Path
               ) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SIMULATE), platform, *args], cwd=tmp_path,
        env=_env(tmp_path), capture_output=True, text=True, timeout=600)


def _jailed(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "autograder", *args], cwd=tmp_path,
        env=_env(tmp_path), capture_output=True, text=True, timeout=600)


def _summary(out: str) -> tuple[float, float, float]:
    found = SUMMARY.search(out)
    assert found, f"no score line in:\n{out[-2000:]}"
    return tuple(float(x) for x in found.groups())   # type: ignore


def _no_staff_words(done: subprocess.CompletedProcess) -> None:
    text = done.stdout + done.stderr
    for word in STAFF_WORDS:
        assert word not in text, f"a student was told {word!r}:\n{text}"


@pytest.mark.parametrize("platform", PLATFORMS)
def test_the_grader_imports_and_chooses_the_plain_child(platform, tmp_path):
    """Simulated: every module ``check`` needs imports on the platform,
    the jail says what it lacks, and the child is forked from a fork
    server where there is fork, spawned where there is not (Windows)."""
    code = (f"import sys; sys.path.insert(0, {str(ROOT)!r})\n"
            "from kit_tests.simulated_platform import install\n"
            f"install({platform!r})\n"
            "import autograder.cli, autograder.batch\n"
            "from autograder.sandbox import plain, preflight, supervisor\n"
            "print(plain.jail_missing()); print(plain.start_method())\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path,
                          env=_env(tmp_path), capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    missing, method = done.stdout.split("\n")[:2]
    assert missing, "the simulated platform was taken for Linux"
    assert method == ("spawn" if platform == "win32" else "forkserver")


@pytest.mark.e2e
@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("which", ["reference", "skeleton"])
def test_simulated_check_scores_as_the_grader(platform, which, tmp_path):
    """Simulated macOS / Windows: ``check`` gives the reference every
    point and the bonus of the rubric, the skeleton 0, says in one line
    that the code ran in a plain child, and tells the student nothing
    meant for staff."""
    rubric = load_rubric()
    path = tmp_path / "modeling_attention.py"
    path.write_text(FULL_REFERENCE if which == "reference"
                    else SKELETON.read_text())
    done = _simulated(platform, ["check", str(path)], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    score, out_of, bonus = _summary(done.stdout)
    assert out_of == rubric.max_score
    if which == "reference":
        assert (score, bonus) == (rubric.max_score, rubric.max_bonus)
    else:
        assert (score, bonus) == (0, 0)
    notes = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(notes) == 1 and "plain child process" in notes[0], \
        done.stderr
    _no_staff_words(done)


@pytest.fixture
def deepest_windows_folder() -> Iterator[Path]:
    """A homework folder as deep as install_deps lets a Windows venv be
    (its site-packages plus the deepest file one short of MAX_PATH),
    under a short folder of its own (pytest's own may be deeper)."""
    from kit import install_deps
    base = Path(tempfile.mkdtemp(prefix="w"))
    tail = len(os.path.join(".venv", "Lib", "site-packages", "")) + 1
    room = (install_deps.MAX_PATH - install_deps.DEEPEST_SITE_PACKAGES_FILE
            - tail - len(str(base)) - 2)
    folder = base / ("d" * room)
    assert room > 0 and install_deps.long_path_problem(
        str(folder / ".venv"), "win32", long_paths=False) is None
    folder.mkdir()
    try:
        yield folder
    finally:
        shutil.rmtree(base)


def test_simulated_windows_refuses_a_path_past_max_path(tmp_path):
    code = (f"import sys; sys.path.insert(0, {str(ROOT)!r})\n"
            "from kit_tests.simulated_platform import install, MAX_PATH\n"
            "install('win32')\n"
            "from autograder.sandbox import plain\n"
            "o = plain.__builtins__['open']\n"
            f"long = {str(tmp_path)!r} + '/' + 'x' * MAX_PATH\n"
            "try:\n    o(long, 'w')\nexcept FileNotFoundError as e:\n"
            "    print('refused', e.strerror)\n"
            f"o({str(tmp_path / 'short')!r}, 'w').close(); print('short')\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path,
                          env=_env(tmp_path), capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "refused" in done.stdout and "short" in done.stdout


@pytest.mark.e2e
def test_simulated_windows_checks_in_the_deepest_folder_it_installs_in(
        tmp_path, deepest_windows_folder):
    """Simulated Windows with its path limit: from a homework folder as
    deep as the install accepts, ``check`` reads the module and gives the
    reference full marks (the grader's own paths stay within the limit)."""
    rubric = load_rubric()
    folder = deepest_windows_folder
    path = folder / "modeling_attention.py"
    path.write_text(FULL_REFERENCE)
    done = subprocess.run(
        [sys.executable, str(SIMULATE), "win32", "check", str(path)],
        cwd=folder, env=_env(tmp_path), capture_output=True, text=True,
        timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert _summary(done.stdout) == (rubric.max_score, rubric.max_score,
                                     rubric.max_bonus)
    _no_staff_words(done)


def _hostile() -> str:
    """The reference whose SelfAttention.forward never returns and whose
    CausalAttention.forward exits the process."""
    lines = FULL_REFERENCE.splitlines()
    out, cls = [], ""
    for line in lines:
        out.append(line)
        if line.startswith("class "):
            cls = line.split()[1].split("(")[0]
        if line.strip().startswith("def forward(") and \
                line.rstrip().endswith(":"):
            indent = " " * (len(line) - len(line.lstrip()) + 4)
            if cls == "SelfAttention":
                out.append(f"{indent}while True:\n{indent}    pass")
            elif cls == "CausalAttention":
                out.append(f"{indent}import os\n{indent}os._exit(3)")
    return "\n".join(out) + "\n"


@pytest.mark.e2e
def test_plain_child_gives_the_jails_verdicts(tmp_path):
    """Simulated macOS beside the real jail: a forward that loops forever
    (the time limit) and one that exits the process cost the same items
    with the same reasons in both, and the rest of the file is graded."""
    path = tmp_path / "hostile.py"
    path.write_text(_hostile())
    args = ["check", "--timeout", "3", str(path)]
    jailed = _jailed(args, tmp_path)
    plain = _simulated("darwin", args, tmp_path)
    assert jailed.returncode == plain.returncode == 0, plain.stderr[-3000:]
    verdicts = dict((i, m) for m, i in ITEM.findall(jailed.stdout))
    assert verdicts == dict((i, m) for m, i in ITEM.findall(plain.stdout))
    assert verdicts["1.2"] == verdicts["3.1"] == "FAIL"
    assert verdicts["2.1"] == "ok  "
    assert _summary(jailed.stdout) == _summary(plain.stdout)
    for text in (jailed.stdout, plain.stdout):
        assert "time limit of 3 s exceeded" in text
        assert "exited (code 3)" in text
    _no_staff_words(plain)


BROKEN_JAIL = """
import sys
from autograder.sandbox import jail

def refused(plan):
    raise OSError(1, "prctl(PR_SET_NO_NEW_PRIVS) failed: EPERM")

jail.drop_privileges = refused
from autograder.cli import main
sys.exit(main(["check", sys.argv[1]]))
"""


@pytest.mark.e2e
def test_a_jail_that_fails_its_canary_falls_back_to_the_plain_child(
        tmp_path):
    """Linux whose jail cannot be built (WSL1, a locked-down container;
    here the privilege drop refused in every worker): ``check`` still
    grades the reference in full, in the plain child, and says so in one
    line without a staff remedy."""
    rubric = load_rubric()
    path = tmp_path / "modeling_attention.py"
    path.write_text(FULL_REFERENCE)
    done = subprocess.run([sys.executable, "-c", BROKEN_JAIL, str(path)],
                          cwd=tmp_path, env=_env(tmp_path),
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert _summary(done.stdout) == (rubric.max_score, rubric.max_score,
                                     rubric.max_bonus)
    notes = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(notes) == 1 and "could not start" in notes[0], done.stderr
    _no_staff_words(done)


GRADER_BUG = """
import sys
from autograder import grade

def broken(*args, **kwargs):
    raise RuntimeError("a bug in the grader")

grade._score_task = broken
from autograder.cli import main
sys.exit(main(["check", sys.argv[1]]))
"""


@pytest.mark.e2e
def test_a_grader_failure_in_check_is_no_score_and_no_staff_remedy(
        tmp_path):
    """The grader's own code failing during ``check`` (after its canary
    passed): no score, the student is told to run it again or reinstall,
    never the staff's apology and its regrade."""
    path = tmp_path / "modeling_attention.py"
    path.write_text(FULL_REFERENCE)
    done = subprocess.run([sys.executable, "-c", GRADER_BUG, str(path)],
                          cwd=tmp_path, env=_env(tmp_path),
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 2, done.stdout + done.stderr
    assert not SUMMARY.search(done.stdout) and "Score" not in done.stdout
    assert "run it again" in done.stderr
    _no_staff_words(done)


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_spawned_children_are_not_one_per_process(monkeypatch, method):
    # A spawned child imports torch again: the student's own check runs
    # every probe in one (a grade keeps the processes apart).
    from autograder.sandbox import plain
    from autograder.sandbox.protocol import Probe
    sent = []

    def supervise(start, source, filename, probes, *args, **kwargs):
        sent.extend(probes)
        return [], None, []
    monkeypatch.setattr(plain, "supervise", supervise)
    box = plain.PlainSandbox.__new__(plain.PlainSandbox)
    box.method, box.context, box.total_seconds = method, None, 1.0
    box.memory_mb, box.output_limit, box.results_mb = 100, 100, 1
    box.jobs = 1
    box.run("", "s.py", [Probe(f"p{k}", "C", {}, process=k)
                         for k in range(3)])
    assert [p.process for p in sent] == \
        ([0, 0, 0] if method == "spawn" else [0, 1, 2])
