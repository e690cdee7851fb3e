"""The student release: contents, leak scanner, and that it works alone.

One release is built per module (about 3 s without verification); the
verified build (leak scan plus self-grading) runs once as its own test.
The unzipped release runs its own Makefile with ``PY=`` set to this kit's
interpreter, so no packages are installed.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file

from autograder import homework
from autograder.local import SCOPE
from autograder.rubric import load_rubric
from autograder.submission.answers import questions
from kit.release import leaks, student as release
from kit.generate.skeleton import generate_skeleton, solution_lines

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "solutions" / "transformer_lm" / "modeling_attention.py"
HIDDEN = ROOT / "test_values" / "hidden.safetensors"


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, Path]:
    out = tmp_path_factory.mktemp("dist")
    return release.build(out, verify=False)


@pytest.fixture(scope="module")
def unzipped(built, tmp_path_factory) -> Path:
    """student.zip extracted into an empty directory."""
    dest = tmp_path_factory.mktemp("unzipped")
    assert not any(dest.iterdir())
    with zipfile.ZipFile(built[1]) as archive:
        archive.extractall(dest)
    # one folder, as students expect of a zip: nothing else at the top
    folder = homework.current().release_folder
    assert [p.name for p in dest.iterdir()] == [folder]
    return dest / folder


@pytest.fixture(scope="module")
def secrets() -> leaks.Secrets:
    return leaks.Secrets.load()


def _env(**extra: str) -> dict[str, str]:
    """No PYTHONPATH to the kit: the release must find its own modules."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "AUTOGRADER_VALUES", "HOMEWORK_IMPL",
                        "AUTOGRADER_ROOT", "MAKEFLAGS", "MFLAGS")}
    return {**env, "MPLBACKEND": "Agg", **extra}


def _make(directory: Path, *args: str, **env: str
          ) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "--no-print-directory", *args,
                           f"PY={sys.executable}"], cwd=directory,
                          env=_env(**env), capture_output=True, text=True,
                          timeout=600)


# -- contents -----------------------------------------------------------------

def test_release_has_what_students_need_and_nothing_else(built):
    student, archive = built
    files = {p.relative_to(student).as_posix()
             for p in student.rglob("*") if p.is_file()}
    for needed in ("Makefile", "README.md", "requirements.txt",
                   "install_deps.py", "make_submission.py", "homework.py",
                   "transformer_lm/__init__.py",
                   "transformer_lm/modeling_attention.py",
                   "transformer_lm/test_values.py",
                   "assignment/attention.ipynb",
                   "test_values/public.safetensors",
                   "test_values/manifest.json", "tests/test_items.py",
                   "autograder/__main__.py", "autograder/rubric.toml",
                   "autograder/notebook_checks.py"):
        assert needed in files, needed
    assert any(f.startswith("assignment/tests/task_") for f in files)
    for path in files:
        top = path.split("/")[0]
        assert top not in ("solutions", "kit", "kit_tests", "examples")
        assert "hidden" not in path and "gradescope" not in path, path
    with zipfile.ZipFile(archive) as zf:
        # the zip's one folder holds exactly the release
        folder = homework.current().release_folder
        assert set(zf.namelist()) == {f"{folder}/{f}" for f in files}


def test_the_readme_is_rendered_for_the_homework(built):
    # the template's placeholders and staff note are gone; what they
    # stood for is the profile's, the points table the rubric's
    from kit.generate.facts import points_table
    from kit.release import readme
    text = (built[0] / "README.md").read_text()
    hw = homework.staff()
    assert "{{" not in text and "Staff note" not in text
    assert text.startswith(f"# {readme.heading(hw.notebook)}\n\n"
                           f"{hw.summary}\n")
    assert f"cd {hw.release_folder}\n" in text and hw.module_file in text
    assert points_table(load_rubric()) in text
    assert "{{ module }}" in readme.TEMPLATE.read_text()


def test_the_readmes_file_list_names_every_folder(built):
    # otter's tests/ beside the notebook was missing from the list
    student = built[0]
    text = (student / "README.md").read_text()
    listed = text.split("## Files", 1)[1].split("```")[1]
    names = {line.split()[0] for line in listed.splitlines() if line}
    notebook = homework.staff().notebook.relative_to(homework.staff().root)
    folders = [p for p in (*student.iterdir(),
                           *(student / notebook.parent).iterdir())
               if p.is_dir()]
    assert folders and {"transformer_lm", "tests"} <= {p.name for p in
                                                       folders}
    skip = {student / homework.staff().package, student / notebook.parent}
    assert {f"{p.relative_to(student).as_posix()}/" for p in folders
            if p not in skip} <= names, names


def test_an_unknown_readme_placeholder_is_named():
    from kit.release import readme
    with pytest.raises(readme.ReadmeError, match=r"\{\{ modul \}\}.*known"
                       r": heading, summary, hidden, folder, module, "
                       r"notebook"):
        readme.render("see {{ modul }}\n", homework.staff())


def test_the_release_grader_reads_its_own_profile(built):
    student, _ = built
    shipped = homework.load(student)
    assert shipped.root == student.resolve()
    assert shipped.module.is_file() and shipped.notebook.is_file()
    assert shipped.rubric.is_relative_to(student.resolve())
    assert not shipped.reference.exists()
    # the homework's own check kinds ship with it, each at its path
    _ships_own_kinds(shipped, student)


def _ships_own_kinds(shipped: homework.Homework, where: Path) -> None:
    """Every kind module of the checkout's profile is in ``shipped``'s,
    present under ``where``, byte for byte."""
    ours = homework.current()
    assert ours.kinds and len(shipped.kinds) == len(ours.kinds)
    for mine, theirs in zip(ours.kinds, shipped.kinds):
        assert theirs.relative_to(where.resolve()) == \
            mine.relative_to(ours.root)
        assert theirs.read_bytes() == mine.read_bytes()


def test_skeleton_is_generated_from_the_reference(built):
    shipped = (built[0] / "transformer_lm" / "modeling_attention.py")
    assert shipped.read_text() == generate_skeleton(REFERENCE.read_text())


def test_manifest_lists_public_cases_only(built):
    manifest = json.loads(
        (built[0] / "test_values" / "manifest.json").read_text())
    assert list(manifest["files"]) == ["public.safetensors"]
    assert manifest["cases"]
    assert {c["set"] for c in manifest["cases"].values()} == {"public"}
    full = json.loads((ROOT / "test_values" / "manifest.json").read_text())
    assert set(manifest["cases"]) == set(
        full["files"]["public.safetensors"]["cases"])


def test_student_notebook_comes_from_otter_assign(built):
    nb = json.loads(
        (built[0] / "assignment" / "attention.ipynb").read_text())
    sources = ["".join(c["source"]) for c in nb["cells"]]
    assert 'check("1.2")' in sources
    assert not any("# BEGIN SOLUTION" in s or "# ASSIGNMENT CONFIG" in s
                   for s in sources)
    answers = [c for c in nb["cells"]
               if c["metadata"].get("kit", {}).get("question")]
    assert [c["metadata"]["kit"]["question"] for c in answers] == list(
        questions())
    assert not any(c["metadata"]["kit"].get("sample") for c in answers)


def test_built_release_has_no_leaks(built, secrets):
    assert leaks.scan_tree(built[0], secrets) == []
    assert leaks.scan_tree(built[1], secrets) == []


# -- the scanner catches planted leaks ---------------------------------

def _hidden_tensor(name_end: str):
    tensors = load_file(str(HIDDEN))
    key = next(k for k in sorted(tensors) if k.endswith(name_end)
               and "mistake." not in k and tensors[k].size >= 12
               and np.isfinite(tensors[k]).all())
    return key, tensors[key]


def test_scanner_names_file_and_line_of_planted_leaks(built, tmp_path,
                                                      secrets):
    tree = tmp_path / "student"
    shutil.copytree(built[0], tree)
    # a solution line the scanner looks for (lines also in given code or
    # docstrings are not secrets)
    line = next(text for _, text in solution_lines(REFERENCE.read_text())
                if leaks._normalise(text) in secrets.needles)
    # 1. a solution line pasted (re-indented) into a test file, line 3
    (tree / "tests" / "extra.py").write_text(
        f"import torch\n\n        {line.strip()}\n")
    # 2. hidden values printed in a notebook output, as torch prints them
    key, values = _hidden_tensor("output")
    flat = values.ravel()[:6]
    printed = "tensor([" + ", ".join(f"{v:.4f}" for v in flat) + "])"
    nb_path = tree / "assignment" / "attention.ipynb"
    nb = json.loads(nb_path.read_text())
    code = next(c for c in nb["cells"] if c["cell_type"] == "code")
    code["outputs"] = [{"output_type": "stream", "name": "stdout",
                        "text": ["first line\n", printed + "\n"]}]
    nb_path.write_text(json.dumps(nb))
    # 3. a hidden case name in the README, line 2
    hidden_name = secrets.case_names[0]
    (tree / "README.md").write_text(f"# x\nsee {hidden_name} for edges\n")
    # 4. the hidden file under an innocent name; 5. its raw bytes inside
    #    another binary file
    shutil.copy2(HIDDEN, tree / "test_values" / "extra.bin")
    raw = values.astype("float32").tobytes()
    (tree / "blob.dat").write_bytes(b"\0\1junk" + raw + b"\0tail")
    # 6. a solution line inside a zip member
    with zipfile.ZipFile(tree / "old.zip", "w") as zf:
        zf.writestr("transformer_lm/modeling_attention.py",
                    f"# draft\n{line}\n")
    found = {(leak.path, leak.line, leak.kind)
             for leak in leaks.scan_tree(tree, secrets)}
    assert ("tests/extra.py", 3, "solution line") in found
    assert ("README.md", 2, "hidden case name") in found
    assert ("test_values/extra.bin", 0, "hidden file") in found
    assert ("blob.dat", 0, "hidden values") in found
    assert ("old.zip!transformer_lm/modeling_attention.py", 2,
            "solution line") in found
    nb_hits = [leak for leak in leaks.scan_tree(nb_path, secrets)
               if leak.kind == "hidden values"]
    assert nb_hits and nb_hits[0].line == 2 and "cell" in nb_hits[0].detail
    with pytest.raises(release.ReleaseError, match="tests/extra.py:3"):
        release.scan(tree, built[1])


def test_the_variant_catalogue_never_ships(built, tmp_path, secrets):
    """kit/variants/*.toml hold the reference's lines (as the text its
    edits replace): not in the release, refused by path where it belongs,
    and by content under any other name."""
    catalogue = sorted((ROOT / "kit" / "variants").glob("*.toml"))
    assert catalogue
    shipped = {p.read_bytes() for p in built[0].rglob("*") if p.is_file()}
    assert not shipped & {p.read_bytes() for p in catalogue}
    tree = tmp_path / "student"
    shutil.copytree(built[0], tree)
    shutil.copytree(ROOT / "kit" / "variants", tree / "kit" / "variants")
    renamed = tree / "assignment" / "notes.toml"
    renamed.write_bytes((ROOT / "kit" / "variants" / "mistakes.toml")
                        .read_bytes())
    found = leaks.scan_tree(tree, secrets)
    forbidden = {leak.path for leak in found if leak.kind == "forbidden file"}
    assert forbidden == {f"kit/variants/{p.name}" for p in catalogue}
    assert any(leak.path == "assignment/notes.toml" and
               leak.kind == "solution line" for leak in found)


def test_scanner_ignores_public_values_and_given_code(built, tmp_path,
                                                      secrets):
    public = load_file(str(ROOT / "test_values" / "public.safetensors"))
    values = next(v for k, v in sorted(public.items()) if v.size >= 12)
    text = "\n".join(f"{v:.4f}" for v in values.ravel()[:12])
    given = "self.mix = nn.Linear(hidden, hidden)"  # shipped __init__ code
    path = tmp_path / "notes.md"
    path.write_text(f"{text}\n{given}\nprobs = torch.softmax(\n")
    assert leaks.scan_tree(path, secrets) == []


# -- the release works on its own -------------------------------------

def test_verified_build_self_grades(tmp_path):
    student, archive = release.build(tmp_path)
    assert archive.exists()
    assert (student / "transformer_lm" / "modeling_attention.py").exists()


def test_unzipped_release_make_check(unzipped, tmp_path):
    done = _make(unzipped, "check")
    report = done.stdout + done.stderr
    assert "Traceback" not in report, report
    assert "Task 1.1 not implemented yet" in report, report
    top = f"{load_rubric().max_score:g}"
    assert f"public: 0 / {top} points (+0 bonus); hidden cases: graded " \
        f"after you submit" in report
    ref = tmp_path / "mine.py"
    shutil.copy2(REFERENCE, ref)
    done = _make(unzipped, "check", f"FILE={ref}")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"public: {top} / {top} points (+1 bonus); hidden cases: " \
        f"graded after you submit" in done.stdout


def test_release_gradescope_command_says_it_is_not_there(built, tmp_path):
    """The release leaves autograder/gradescope/ out: its command stops
    with one line saying so (a usage error), never a traceback."""
    done = subprocess.run([sys.executable, "-m", "autograder", "gradescope",
                           "--root", str(tmp_path)], cwd=built[0],
                          env=_env(), capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        "error: this copy of the grader has no Gradescope entry: it runs "
        "in the Gradescope image built by `make autograder`"]
    assert done.stdout == "" and not (tmp_path / "results").exists()


def test_unzipped_release_pytest(unzipped, tmp_path):
    ref = tmp_path / "mine.py"
    shutil.copy2(REFERENCE, ref)
    done = _make(unzipped, "test", HOMEWORK_IMPL=str(ref))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and "failed" not in done.stdout
    assert SCOPE in done.stdout   # the header says what is checked
    # the skeleton: tests run (no collection error) and fail
    done = _make(unzipped, "test")
    assert done.returncode != 0, done.stdout[-3000:]
    assert " failed" in done.stdout.splitlines()[-1]
    assert "Task 1.1 not implemented yet" in done.stdout
    assert "error" not in done.stdout.splitlines()[-1].lower()
