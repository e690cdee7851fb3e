"""The kit as a package (pyproject.toml, kit/cli.py, kit/__main__.py):
its package list is whole, the staff command says a bad profile in one
line, releases go per homework, and (e2e) the wheel installed in a fresh
venv generates, zips and grades a homework that lives outside the
checkout, with nothing of the checkout on the path."""
from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

import pytest

from autograder import homework
from kit import cli
from kit.release import dist

ROOT = Path(__file__).resolve().parents[1]
FFN = ROOT / "homeworks" / "ffn"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_every_python_folder_of_the_kit_is_a_listed_package():
    listed = set(PYPROJECT["tool"]["setuptools"]["packages"])
    folders = {p.parent.relative_to(ROOT).as_posix().replace("/", ".")
               for top in ("autograder", "kit")
               for p in (ROOT / top).rglob("*.py")
               if "__pycache__" not in p.parts
               and "templates" not in p.parts}   # data: a homework's files
    assert folders <= listed, f"add to pyproject.toml: {folders - listed}"
    assert PYPROJECT["tool"]["setuptools"]["package-dir"][
        "kit.student_tests"] == "tests"


def test_the_console_scripts_are_the_kit_and_the_grader():
    scripts = PYPROJECT["project"]["scripts"]
    assert scripts["homework-kit"] == "kit.cli:console"
    assert scripts["homework-grader"] == "kit.cli:grader"
    assert set(cli.COMMANDS) >= {"generate", "release", "autograder"}


def _kit(*args: str) -> subprocess.CompletedProcess:
    """``python -m kit ARGS`` in a process of its own (the commands' modules
    read the profile as they import)."""
    env = {k: v for k, v in os.environ.items() if k != "HOMEWORK"}
    return subprocess.run([sys.executable, "-m", "kit", *args], cwd=ROOT,
                          env=env, capture_output=True, text=True,
                          timeout=300)


def test_a_bad_profile_is_one_line_naming_the_key(tmp_path):
    shutil.copytree(FFN, tmp_path / "ffn")
    profile = tmp_path / "ffn" / "homework.toml"
    profile.write_text(profile.read_text().replace("title =", "titel ="))
    for command in ("generate", "release", "autograder"):
        done = _kit("--homework", str(tmp_path / "ffn"), command)
        assert done.returncode == 2, done.stderr
        assert done.stderr.count("\n") == 1, done.stderr
        assert "unknown key [homework] titel" in done.stderr
        assert "the keys are name, title" in done.stderr
        assert not (tmp_path / "ffn" / "dist").exists()


def test_a_missing_profile_says_how_to_name_one(tmp_path):
    done = _kit("--homework", str(tmp_path), "release")
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "homework.toml is missing" in done.stderr
    assert "HOMEWORK=DIR (or `homework-kit --homework DIR ...`)" in \
        done.stderr


def test_releases_go_per_homework(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    own = homework.load(homework.DEFAULT_ROOT)
    assert dist(own) == tmp_path / "dist"   # the README's paths
    assert dist(homework.load(FFN)) == tmp_path / "dist" / "ffn"


@pytest.mark.parametrize("name", ["student", "autograder", "student.zip"])
def test_a_homework_named_like_the_checkouts_outputs_is_refused(
        tmp_path, monkeypatch, name):
    """dist/student/ is the checkout's own release: a homework named
    ``student`` would write into it (and ``autograder`` beside its zip's
    tree), so its name is refused in one line naming the key."""
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "hw"
    shutil.copytree(FFN, folder)
    profile = folder / homework.PROFILE
    text = profile.read_text()
    profile.write_text(text.replace('name = "ffn"', f'name = "{name}"', 1))
    hw = homework.load(folder)
    assert hw.name == name
    with pytest.raises(homework.HomeworkError,
                       match=r"\[homework\] name = .* rename it"):
        dist(hw)


def _sources(dest: Path) -> Path:
    """What the build reads, copied (building in the checkout would leave
    build/ and an egg-info there)."""
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("pyproject.toml", "README.md", "requirements.txt",
                 "requirements-test.txt"):
        shutil.copy2(ROOT / name, dest / name)
    for folder in ("autograder", "kit", "tests"):
        shutil.copytree(ROOT / folder, dest / folder, ignore=skip)
    return dest


def _fresh_venv(folder: Path) -> Path:
    """A venv of its own whose third-party packages are this interpreter's,
    each linked into its own site-packages, where the kit's wheel goes
    too (as `pip install` in a course's venv puts torch beside the kit:
    no download); nothing of the kit."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip",
                    str(folder)], check=True)
    python = folder / "bin" / "python"
    site = Path(subprocess.run(
        [str(python), "-c", "import sysconfig; "
         "print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True).stdout.strip())
    for parent in sorted({sysconfig.get_paths()["purelib"],
                          sysconfig.get_paths()["platlib"]}):
        for entry in Path(parent).iterdir():
            if entry.suffix != ".pth" and entry.name not in (
                    "autograder", "kit", "kinds") and \
                    not (site / entry.name).exists():
                (site / entry.name).symlink_to(entry)
    return python


@pytest.mark.e2e
def test_the_installed_wheel_grades_a_homework_outside_the_checkout(
        tmp_path):
    (tmp_path / "src").mkdir()
    src = _sources(tmp_path / "src")
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "HOMEWORK")}
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                    "--no-build-isolation", "-w", str(tmp_path / "wheels"),
                    f"{src}/"], check=True, env=env, cwd=tmp_path)
    wheel, = (tmp_path / "wheels").glob("homework_kit-*.whl")
    with zipfile.ZipFile(wheel) as zf:   # the tests' packages: an extra
        meta, = (n for n in zf.namelist() if n.endswith("/METADATA"))
        needs = [line for line in zf.read(meta).decode().splitlines()
                 if line.startswith("Requires-Dist: ")]
    assert "Requires-Dist: torch==2.13.0" in needs
    assert [n for n in needs if "playwright" in n] == \
        ['Requires-Dist: playwright==1.65.2; extra == "test"']
    python = _fresh_venv(tmp_path / "venv")
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps",
                    "--no-index", str(wheel)], check=True, env=env)
    course = tmp_path / "course" / "ffn"
    shutil.copytree(FFN, course)
    work = tmp_path / "work"
    work.mkdir()
    bin_ = python.parent

    def run(*args: str, **extra: str) -> subprocess.CompletedProcess:
        return subprocess.run([*args], cwd=work, env={**env, **extra},
                              capture_output=True, text=True, timeout=600)

    where = run(str(python), "-c", "import autograder, kit; "
                "print(autograder.__file__, kit.__file__)")
    assert str(ROOT) not in where.stdout and str(tmp_path / "venv") in \
        where.stdout
    fresh = run(str(bin_ / "homework-kit"), "--homework", str(course),
                "generate", "--check")
    assert fresh.returncode == 0 and "up to date" in fresh.stdout, \
        fresh.stdout + fresh.stderr
    zipped = run(str(bin_ / "homework-kit"), "--homework", str(course),
                 "autograder")
    assert zipped.returncode == 0, zipped.stderr
    assert (work / "dist" / "ffn" / "autograder.zip").is_file()
    subs = tmp_path / "subs"
    subs.mkdir()
    shutil.copy2(course / "solutions" / "ffn_block" / "modeling_ffn.py",
                 subs / "reference.py")
    shutil.copy2(course / "ffn_block" / "modeling_ffn.py",
                 subs / "skeleton.py")
    helped = run(str(bin_ / "homework-grader"), "--help")
    assert helped.returncode == 0 and "--homework DIR" in helped.stdout, \
        helped.stdout + helped.stderr
    graded = run(str(bin_ / "homework-grader"), "--homework", str(course),
                 "grade", "--out", str(work / "grades"),
                 str(subs / "reference.py"), str(subs / "skeleton.py"))
    assert graded.returncode == 0, graded.stderr
    with open(work / "grades" / "grades.csv", newline="") as f:
        rows = {r["submission"]: r for r in csv.DictReader(f)}
    assert rows["reference"]["score"] == rows["reference"]["max_score"]
    assert float(rows["skeleton"]["score"]) == 0.0


def test_a_homework_in_another_folder_or_linked_keeps_its_values_fresh(
        tmp_path):
    # the manifest names a homework's sources relative to its own folder:
    # copied elsewhere, or reached through a link, nothing is stale
    shutil.copytree(FFN, tmp_path / "course" / "ffn")
    (tmp_path / "homeworks").mkdir()
    (tmp_path / "homeworks" / "ffn").symlink_to(tmp_path / "course" / "ffn")
    for chosen in (tmp_path / "course" / "ffn",
                   tmp_path / "homeworks" / "ffn"):
        done = _kit("--homework", str(chosen), "generate", "--check",
                    "test-values", "mistakes")
        assert done.returncode == 0, done.stdout + done.stderr
        assert "up to date" in done.stdout


def test_cases_outside_the_checkout_import_from_their_file(tmp_path):
    from kit.generate import cases, values
    outside = tmp_path / "kit" / "cases.py"
    outside.parent.mkdir()
    outside.write_text("from kit.generate.cases import Case\nCASES = []\n")
    module = values._profile_module(outside)
    assert module.CASES == [] and module.Case is cases.Case
    assert values._profile_module(outside) is module   # imported once
    # inside the checkout: the one module the kit's own imports share
    assert values._profile_module(ROOT / "kit" / "generate" / "cases.py") \
        is cases


def test_a_release_is_refused_while_a_generated_file_is_stale(tmp_path):
    # The installed command has no Makefile's fresh-all before it: a
    # rubric edited and not regenerated would ship a notebook and skeleton
    # that say other points.
    shutil.copytree(FFN, tmp_path / "ffn")
    rubric = tmp_path / "ffn" / "autograder" / "rubric.toml"
    text = rubric.read_text()
    assert "\npoints = 3\n" in text
    rubric.write_text(text.replace("\npoints = 3\n", "\npoints = 4\n", 1))
    for command in ("release", "autograder"):
        done = _kit("--homework", str(tmp_path / "ffn"), command)
        assert done.returncode == 1, done.stdout + done.stderr
        assert "stale: " in done.stderr
        assert f"error: {command} ships generated files that are older " \
            "than what generates them" in done.stderr
        assert "wrote" not in done.stdout


def test_the_help_says_the_whole_first_paragraph():
    text = " ".join(cli._parser().format_help().split())
    assert "``homework-kit COMMAND`` once the kit is installed with pip" \
        in text


@pytest.mark.e2e   # a verified release: the self-grading runs
def test_a_release_counts_the_files_its_zip_holds(tmp_path):
    import re
    import zipfile
    # (byte code the self-grading leaves in the folder is not the
    # release's: the folder held 210 files beside a zip of 120)
    shutil.copytree(FFN, tmp_path / "ffn")
    out = tmp_path / "out"
    done = _kit("--homework", str(tmp_path / "ffn"), "release", "--out",
                str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    with zipfile.ZipFile(out / "student.zip") as zipped:
        held = sum(1 for info in zipped.infolist() if not info.is_dir())
    said = re.search(r"\((\d+) files, ", done.stdout)
    assert said and int(said.group(1)) == held, done.stdout
