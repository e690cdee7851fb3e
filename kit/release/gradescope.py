"""Build the Gradescope autograder: ``dist/autograder.zip``.

``python -m kit.release.gradescope [--out dist]`` (``make autograder``).
Layout of the zip, as Gradescope's specification asks (it is unzipped into
``/autograder/source``):

    setup.sh            image build: the venv, the worker user, locks source/
    run_autograder      per submission: grades /autograder/submission
    requirements.txt    the venv's pinned packages, torch included
    install_deps.py     the install rule (torch from the PyTorch CPU index)
    autograder/         the grader package (rubric, mistakes, sandbox, ...,
                        gradescope/entry.py: what run_autograder runs),
                        without staff/
    test_values/        manifest.json, public.safetensors, hidden.safetensors
    course/policy.toml  the course's late policy, where it has one (without
                        its extensions: Gradescope holds its own)

Never the reference or the kit: the grader needs only numbers. Before it
reports success it checks the zip: scripts executable at the root, the
values' sha256 as the manifest says, no solution line
(``kit/release/leaks.py``), and every third-party module the grader
imports pinned in requirements.txt (modules imported only at run time,
such as numpy by ``safetensors.torch``, are caught by
``kit_tests/test_gradescope_image.py``, which grades in a venv built by
setup.sh).
"""
from __future__ import annotations

import argparse
import ast
import hashlib
import json
import shutil
import sys
import time
import zipfile
from pathlib import Path

from autograder import STAFF_PACKAGE, homework
from kit.release import dist
from kit.release.student import ship_profile, write_zip

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "autograder" / "gradescope"
INSTALL_DEPS = ROOT / "kit" / "install_deps.py"
ENTRY_FILES = ("setup.sh", "run_autograder", "requirements.txt")
VALUE_FILES = ("manifest.json", "public.safetensors", "hidden.safetensors")
# Import name -> distribution name, where they differ.
DISTRIBUTIONS = {"torch": "torch"}


class AutograderZipError(RuntimeError):
    """The autograder zip would not work on Gradescope; says why."""


def assemble(dest: Path) -> None:
    """Write the autograder tree into the (new) directory ``dest``."""
    dest.mkdir(parents=True)
    for name in ENTRY_FILES:
        shutil.copy2(SCRIPTS / name, dest / name)
    shutil.copy2(INSTALL_DEPS, dest / INSTALL_DEPS.name)
    shutil.copytree(ROOT / "autograder", dest / "autograder",
                    ignore=shutil.ignore_patterns(
                        "__pycache__", "*.pyc", STAFF_PACKAGE))
    hw = homework.current()
    values = dest / hw.test_values.relative_to(hw.root)
    values.mkdir(parents=True)
    for name in VALUE_FILES:
        shutil.copy2(hw.test_values / name, values)
    ship_profile(dest)
    ship_policy(hw.root, dest)


def ship_policy(root: Path, dest: Path) -> None:
    """The course's late policy (course/policy.toml), without its
    extensions (students' names: Gradescope holds its own per-student due
    dates), where the course has one: the autograder applies it."""
    from autograder.term.course import COURSE_FOLDER
    from autograder.term.files import StaffFileError
    from autograder.term.policy import POLICY_FILE, load_policy
    try:
        policy = load_policy(root / COURSE_FOLDER / POLICY_FILE)
    except StaffFileError as exc:
        raise AutograderZipError(str(exc)) from None
    if policy is not None:
        (dest / COURSE_FOLDER).mkdir(parents=True)
        (dest / COURSE_FOLDER / POLICY_FILE).write_text(policy.shipped())


def third_party_imports(package: Path) -> set[str]:
    """Top-level modules imported by ``package`` outside the stdlib."""
    found = set()
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            else:
                continue
            found |= {n.split(".")[0] for n in names}
    return {n for n in found if n and n not in sys.stdlib_module_names
            and n != package.name}


def verify(tree: Path, archive: Path) -> None:
    """AutograderZipError unless the zip is fit for Gradescope."""
    problems = []
    with zipfile.ZipFile(archive) as zf:
        names = set(zf.namelist())
        for script in ("setup.sh", "run_autograder"):
            info = zf.getinfo(script) if script in names else None
            if info is None or not (info.external_attr >> 16) & 0o100:
                problems.append(f"{script} missing or not executable at "
                                f"the zip root")
        for name in ("requirements.txt", INSTALL_DEPS.name):
            if name not in names:   # setup.sh runs them
                problems.append(f"{name} missing at the zip root")
    try:   # the grader reads only the zip's own profile
        hw = homework.load(tree)
    except homework.HomeworkError as exc:
        raise AutograderZipError(f"autograder.zip's profile: {exc}") from None
    values = hw.test_values.relative_to(hw.root).as_posix()
    manifest = json.loads((hw.test_values / "manifest.json").read_text())
    for name, info in manifest["files"].items():
        data = (hw.test_values / name).read_bytes()
        if hashlib.sha256(data).hexdigest() != info["sha256"]:
            problems.append(f"{values}/{name} does not match manifest")
    pinned = {line.split("==")[0].strip().lower() for line in
              (tree / "requirements.txt").read_text().splitlines()
              if "==" in line and not line.lstrip().startswith("#")}
    for module in sorted(third_party_imports(tree / "autograder")):
        dist = DISTRIBUTIONS.get(module, module)
        if dist.lower() not in pinned:
            problems.append(f"the grader imports {module!r} but "
                            f"requirements.txt does not pin it")
    from kit.release.leaks import Secrets, scan_text
    secrets = Secrets.load()
    secrets.case_names, secrets.sha256s = [], set()  # these belong here
    secrets.windows = {}
    for path in sorted(tree.rglob("*")):
        if path.is_file() and path.suffix in (".py", ".toml", ".sh",
                                              ".txt", ".json", ""):
            for leak in scan_text(path.relative_to(tree).as_posix(),
                                  path.read_text(errors="replace"), secrets):
                problems.append(str(leak))
    if problems:
        raise AutograderZipError("autograder.zip is not fit:\n  "
                                 + "\n  ".join(problems))


def build(out: Path | None = None) -> Path:
    """Build and verify ``out/autograder.zip`` (default: the homework's
    ``dist()``); return its path."""
    out = out if out is not None else dist()
    out.mkdir(parents=True, exist_ok=True)
    tree, archive = out / "autograder", out / "autograder.zip"
    shutil.rmtree(tree, ignore_errors=True)
    archive.unlink(missing_ok=True)
    assemble(tree)
    write_zip(tree, archive)
    try:
        verify(tree, archive)
    except AutograderZipError:
        archive.unlink(missing_ok=True)
        raise
    return archive


def main(argv: list[str] | None = None) -> int:
    """Build the zip; exit 1 with the reason if it is not fit."""
    parser = argparse.ArgumentParser(
        prog="python -m kit.release.gradescope",
        description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None,
                        help="default: dist/ (another homework: dist/NAME/)")
    args = parser.parse_args(argv)
    start = time.monotonic()
    try:
        archive = build(args.out)
    except (AutograderZipError, homework.HomeworkError) as exc:
        print(f"autograder FAILED: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {archive} ({archive.stat().st_size // 1024} KB) in "
          f"{time.monotonic() - start:.0f} s: upload it as the Gradescope "
          f"autograder (base image Ubuntu 22.04 or 24.04)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
