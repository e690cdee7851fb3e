"""Build the student release: ``dist/student/`` and ``dist/student.zip``
(another homework than the checkout's: ``dist/NAME/...``).

``python -m kit.release.student [--out dist]`` (``make release``) assembles

    transformer_lm/      the generated skeleton, __init__.py, test_values.py
    assignment/          the student notebook from `otter assign`, its tests/
    test_values/         public.safetensors and a public-only manifest.json
    tests/               the student tests
    autograder/          the checker (`python -m autograder check`), no
                         Gradescope parts
    Makefile README.md requirements.txt make_submission.py homework.py
                         (kit/student/: the commands, with and without make;
                         the README rendered for the homework)
    install_deps.py      the install rule (kit/install_deps.py)

then refuses to report success unless (a) the leak scanner
(``kit/release/leaks.py``) finds nothing in the folder and in the zip and
(b) the release's own grader, run inside the release, gives its skeleton 0
on every code item and the reference full marks on the public cases.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from autograder import homework
from autograder import GRADESCOPE_PACKAGE, STAFF_PACKAGE
from autograder.report import layout
from kit.generate.values import StaleValues, check_fresh
from kit.release import dist, readme

ROOT = Path(__file__).resolve().parents[2]
STUDENT_FILES = ROOT / "kit" / "student"
# The student tests: the checkout's tests/, which an installed kit carries
# as kit/student_tests (pyproject.toml maps the folder there).
STUDENT_TESTS = next((p for p in (ROOT / "kit" / "student_tests",
                                  ROOT / "tests") if p.is_dir()),
                     ROOT / "tests")
# Grader parts that only the Gradescope zip needs.
SKIP = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache")
ZIP_DATE = (2020, 1, 1, 0, 0, 0)  # fixed timestamps: reproducible zips


class ReleaseError(RuntimeError):
    """The release is unsafe or broken; the message says what and where."""


def _python_env(root: Path) -> dict[str, str]:
    """Environment that makes ``root`` the only project on the path (and
    its own homework.toml the profile: no HOMEWORK)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("AUTOGRADER_VALUES", "HOMEWORK_IMPL",
                        "AUTOGRADER_ROOT", "HOMEWORK")}
    env["PYTHONPATH"] = str(root)
    env.setdefault("MPLBACKEND", "Agg")
    return env


def otter_assign(python: str, out: Path,
                 hw: homework.Homework | None = None) -> Path:
    """Run ``otter assign`` on the master notebook of ``hw`` (default: the
    homework in use) into ``out``; return the student folder (notebook
    plus otter's ``tests/``)."""
    master = (hw or homework.staff()).notebook
    done = subprocess.run(
        [python, "-m", "otter", "assign", str(master), str(out)],
        cwd=master.parent, env=_python_env(ROOT), capture_output=True,
        text=True)
    student = out / "student"
    if done.returncode != 0 or not (student / master.name).exists():
        raise ReleaseError(f"otter assign failed:\n{done.stdout}\n"
                           f"{done.stderr}")
    return student


def _public_manifest(values: Path) -> dict:
    """The manifest restricted to the public cases (hidden names, sizes
    and the hidden file's sha never ship)."""
    manifest = json.loads((values / "manifest.json").read_text())
    manifest.pop("sources", None)   # staff files' digests: not for students
    manifest["files"] = {k: v for k, v in manifest["files"].items()
                         if k == "public.safetensors"}
    manifest["cases"] = {k: v for k, v in manifest["cases"].items()
                         if v["set"] == "public"}
    return manifest


def assemble(dest: Path, python: str = sys.executable,
             hw: homework.Homework | None = None) -> None:
    """Write the release tree of ``hw`` (default: the homework in use)
    into the (new) directory ``dest``."""
    from kit.generate.skeleton import generate_skeleton
    dest.mkdir(parents=True)
    # the package: everything shipped as is, the skeleton regenerated
    # from the reference so a stale committed copy cannot slip through.
    hw = hw or homework.staff()
    shutil.copytree(hw.root / hw.package, dest / hw.package, ignore=SKIP)
    (dest / hw.module_file).write_text(
        generate_skeleton(hw.reference.read_text()))
    with tempfile.TemporaryDirectory() as tmp:
        student = otter_assign(python, Path(tmp) / "otter", hw)
        notebooks = dest / hw.notebook.relative_to(hw.root).parent
        notebooks.mkdir(parents=True)
        # everything otter ships (notebook, tests/, support files such as
        # figures) except its copy of the package, which would shadow
        # the real one one level up
        for path in sorted(student.iterdir()):
            if path.name == hw.package:
                continue
            if path.is_dir():
                shutil.copytree(path, notebooks / path.name, ignore=SKIP)
            else:
                shutil.copy2(path, notebooks)
    values = dest / hw.test_values.relative_to(hw.root)
    values.mkdir(parents=True)
    shutil.copy2(hw.test_values / "public.safetensors", values)
    (values / "public.safetensors").chmod(0o644)
    (values / "manifest.json").write_text(
        json.dumps(_public_manifest(hw.test_values), indent=2,
                   sort_keys=True) + "\n")
    shutil.copytree(STUDENT_TESTS, dest / "tests", ignore=SKIP)
    shutil.copytree(ROOT / "autograder", dest / "autograder",
                    ignore=shutil.ignore_patterns(
                        "__pycache__", "*.pyc", GRADESCOPE_PACKAGE,
                        STAFF_PACKAGE))
    for path in sorted(STUDENT_FILES.iterdir()):
        if path.is_file():
            shutil.copy2(path, dest / path.name)
    readme.write(dest / "README.md")   # the template, for this homework
    # the Makefile's install rule, the same file the kit and setup.sh use
    shutil.copy2(ROOT / "kit" / "install_deps.py", dest / "install_deps.py")
    ship_profile(dest, hw)


def ship_profile(dest: Path, hw: homework.Homework | None = None) -> None:
    """Copy the homework's profile into ``dest`` with the data files its
    grader reads, at the paths it names (over the grader package's copies,
    which are another homework's when the profile is not the checkout's
    own): a shipped grader reads only its own copy."""
    hw = hw or homework.current()
    shutil.copy2(hw.profile, dest / homework.PROFILE)
    for path in (hw.rubric, hw.mistakes, hw.questions, hw.python_features,
                 hw.imports, hw.shape_notation, *hw.kinds):
        if not path.is_relative_to(hw.root):
            continue   # the grader's own (python_features): ships with it
        target = dest / path.relative_to(hw.root)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)


def write_zip(src: Path, out: Path, folder: str = "") -> Path:
    """Zip the files of ``src`` deterministically, at the archive's root or
    (``folder``) under one top-level folder of that name."""
    tmp = out.with_suffix(".zip.tmp")
    prefix = folder + "/" if folder else ""
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(p for p in src.rglob("*") if p.is_file()):
            info = zipfile.ZipInfo(prefix + path.relative_to(src).as_posix(),
                                   ZIP_DATE)
            info.compress_type = zipfile.ZIP_DEFLATED
            mode = 0o755 if os.access(path, os.X_OK) else 0o644
            info.external_attr = (0o100000 | mode) << 16
            archive.writestr(info, path.read_bytes())
    tmp.replace(out)
    return out


def scan(release: Path, archive: Path,
         hw: homework.Homework | None = None) -> None:
    """ReleaseError naming every leak of ``hw``'s secrets (default: the
    homework in use) in the folder or the zip."""
    from kit.release.leaks import Secrets, scan_tree
    secrets = Secrets.load(hw)
    leaks = scan_tree(release, secrets) + scan_tree(archive, secrets)
    if leaks:
        listing = "\n".join(f"  {leak}" for leak in leaks[:50])
        more = f"\n  ... and {len(leaks) - 50} more" if len(leaks) > 50 \
            else ""
        raise ReleaseError(f"the release leaks {len(leaks)} thing(s):\n"
                           f"{listing}{more}")


def self_grade(release: Path, python: str = sys.executable,
               hw: homework.Homework | None = None) -> dict:
    """Grade the release's skeleton and the reference of ``hw`` (default:
    the homework in use) with the release's own grader (public values
    only). ReleaseError unless the skeleton scores 0 on every item and the
    reference gets full marks."""
    hw = hw or homework.staff()
    with tempfile.TemporaryDirectory() as tmp:
        subs = Path(tmp) / "subs"
        (subs / "skeleton").mkdir(parents=True)
        (subs / "reference").mkdir()
        name = Path(hw.module_file).name
        shutil.copy2(release / hw.module_file, subs / "skeleton" / name)
        shutil.copy2(hw.reference, subs / "reference" / name)
        out = Path(tmp) / "grades"
        done = subprocess.run(
            [python, "-m", "autograder", "grade", "--public-only",
             "--out", str(out),
             str(subs / "skeleton"), str(subs / "reference")],
            cwd=release, env=_python_env(release), capture_output=True,
            text=True, timeout=600)
        results = {}
        for name in ("skeleton", "reference"):
            path = layout.submission_dir(out, name) / "results.json"
            if not path.exists():
                raise ReleaseError(
                    f"the release's grader wrote no {name}/results.json "
                    f"(exit {done.returncode}):\n{done.stdout[-2000:]}\n"
                    f"{done.stderr[-3000:]}")
            results[name] = json.loads(path.read_text())
    problems = []
    for test in results["skeleton"]["tests"]:
        if test.get("score", 0) != 0 and test.get("max_score", 0) > 0:
            problems.append(f"skeleton scores {test['score']} on "
                            f"{test['name']}")
    ref = results["reference"]
    full = sum(t.get("max_score", 0) for t in ref["tests"])
    lost = [t["name"] for t in ref["tests"] if t.get("status") != "passed"]
    if ref["score"] < full or full == 0 or lost:
        problems.append(f"reference scores {ref['score']} of {full} "
                        f"(lost: {', '.join(lost)})")
    if problems:
        raise ReleaseError("the release's grader is inconsistent:\n  "
                           + "\n  ".join(problems))
    return {"skeleton": results["skeleton"]["score"],
            "reference": ref["score"], "max": full}


def build(out: Path | None = None, python: str = sys.executable,
          verify: bool = True,
          hw: homework.Homework | None = None) -> tuple[Path, Path]:
    """Build ``out/student`` and ``out/student.zip`` of ``hw`` (default:
    the homework in use); verify them unless ``verify`` is False (default
    ``out``: the homework's ``dist()``). Returns (folder, zip)."""
    hw = hw or homework.staff()
    out = out if out is not None else dist(hw)
    try:
        check_fresh()
    except StaleValues as exc:   # names what changed and the command
        raise ReleaseError(str(exc)) from None
    out.mkdir(parents=True, exist_ok=True)
    release, archive = out / "student", out / "student.zip"
    shutil.rmtree(release, ignore_errors=True)
    archive.unlink(missing_ok=True)
    staging = out / "student.partial"
    shutil.rmtree(staging, ignore_errors=True)
    assemble(staging, python, hw)
    staging.rename(release)
    # student.zip unpacks into one folder, as students expect of a zip
    # (Gradescope's autograder.zip keeps its files at the root: its spec).
    write_zip(release, archive, hw.release_folder)
    if verify:
        try:
            scan(release, archive, hw)
            self_grade(release, python, hw)
        except ReleaseError:
            # never leave a leaking or broken release where it could ship
            archive.unlink(missing_ok=True)
            shutil.rmtree(release, ignore_errors=True)
            raise
    return release, archive


def main(argv: list[str] | None = None) -> int:
    """Build and verify the release; exit 1 with the reason if unsafe."""
    parser = argparse.ArgumentParser(
        prog="python -m kit.release.student",
        description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None,
                        help="default: dist/ (another homework: dist/NAME/)")
    parser.add_argument("--no-verify", action="store_true",
                        help="skip the leak scan and the self-grading")
    args = parser.parse_args(argv)
    start = time.monotonic()
    try:
        release, archive = build(args.out, verify=not args.no_verify,
                                 hw=homework.staff())
    except (ReleaseError, homework.HomeworkError) as exc:
        print(f"release FAILED: {exc}", file=sys.stderr)
        return 1
    # What the zip holds (the self-grading's byte code in the folder is
    # not part of the release)
    with zipfile.ZipFile(archive) as zipped:
        files = sum(1 for info in zipped.infolist() if not info.is_dir())
    print(f"wrote {release} and {archive} ({files} files, "
          f"{archive.stat().st_size // 1024} KB) in "
          f"{time.monotonic() - start:.0f} s"
          + ("" if args.no_verify else
             ": no leaks; skeleton 0, reference full marks"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
