"""The check kinds' registry: every module of ``autograder/checks/``
imports alone, no kind imports the rubric (the rubric imports the
registry), and every module that registers a kind is one
``autograder.checks.kinds`` imports. The floors and the cycles of every
import: kit_tests/test_layers.py."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from autograder.checks import kinds, registry
from autograder.rubric import load_rubric

ROOT = Path(__file__).resolve().parents[1]
CHECKS = ROOT / "autograder" / "checks"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def grader_modules() -> dict[str, Path]:
    return {module_name(p): p for p in (ROOT / "autograder").rglob("*.py")}


def imported(path: Path, modules: set[str], top_level: bool) -> set[str]:
    """The grader modules ``path`` imports: at module level only (what
    runs when it is imported; ``if TYPE_CHECKING`` aside), or anywhere."""
    tree = ast.parse(path.read_text())
    nodes = ([n for n in tree.body if not isinstance(n, ast.If)]
             if top_level else list(ast.walk(tree)))
    found = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and \
                node.level == 0:
            found |= {node.module, *(f"{node.module}.{a.name}"
                                     for a in node.names)}
    return found & modules


def test_no_check_module_imports_the_rubric():
    modules = grader_modules()
    offenders = [name for name, path in modules.items()
                 if name.startswith("autograder.checks")
                 and "autograder.rubric" in imported(path, set(modules),
                                                     top_level=False)]
    assert offenders == [], ("these read the rubric's types from "
                             "autograder.checks.entries instead")


def test_each_check_module_imports_alone():
    # One interpreter; the grader's modules are forgotten before each
    # import, so each one is imported as if first.
    names = sorted(n for n in grader_modules()
                   if n.startswith("autograder.checks."))
    script = (
        "import importlib, sys\n"
        "failed = []\n"
        f"for name in {names!r}:\n"
        "    for loaded in [m for m in sys.modules\n"
        "                   if m.split('.')[0] == 'autograder']:\n"
        "        del sys.modules[loaded]\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except Exception as exc:\n"
        "        failed.append(f'{name}: {exc!r}')\n"
        "print('\\n'.join(failed))\n")
    run = subprocess.run([sys.executable, "-c", script], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "", run.stdout


def registers(path: Path) -> bool:
    """Whether a module has a class decorated ``@register(...)``."""
    return any(isinstance(d, ast.Call) and getattr(d.func, "id", "") ==
               "register"
               for node in ast.walk(ast.parse(path.read_text()))
               if isinstance(node, ast.ClassDef)
               for d in node.decorator_list)


def test_every_registering_module_is_imported_by_kinds():
    modules = grader_modules()
    registering = {name for name, path in modules.items()
                   if name.startswith("autograder.checks.")
                   and registers(path)}
    assert registering, "no module registers a kind: the walk is wrong"
    listed = imported(CHECKS / "kinds.py", set(modules), top_level=True)
    assert registering - listed == set(), (
        "add these modules to the import in autograder/checks/kinds.py")


def test_every_kind_the_rubric_names_is_registered():
    for check in load_rubric().checks():
        spec = kinds.kind(check)
        assert (spec.section, spec.name) == (check.section, check.kind)
        assert isinstance(check.params, spec.params)


def test_a_kind_is_registered_once():
    section, name = next(iter(registry.KINDS))
    with pytest.raises(ValueError, match=f"{name}.*registered twice"):
        registry.register(section, name)


def _registered_names(path: Path) -> set[str]:
    """The kind names a module registers (``@register(section, name)``)."""
    return {d.args[1].value
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.ClassDef)
            for d in node.decorator_list
            if isinstance(d, ast.Call) and getattr(d.func, "id", "") ==
            "register" and len(d.args) > 1}


def test_a_homework_ships_its_own_kinds_through_the_registry():
    from autograder import homework
    hw = homework.current()
    own = kinds.register_homework_kinds(hw)
    assert own and all(path.is_relative_to(hw.root) and
                       not path.is_relative_to(ROOT / "autograder")
                       for path in hw.kinds)
    theirs = set().union(*(_registered_names(p) for p in hw.kinds))
    assert theirs and {name for _, name in registry.KINDS} >= theirs
    # the grader registers none of them itself, and loads each file once
    shared = set().union(*(_registered_names(p)
                           for p in grader_modules().values()))
    assert not theirs & shared
    assert kinds.register_homework_kinds(hw) == own
    # a homework that uses none of them reads its rubric without them
    ffn = homework.load(ROOT / "homeworks" / "ffn")
    assert ffn.kinds == () and kinds.register_homework_kinds(ffn) == {}
    used = {c.kind for c in load_rubric(hw=ffn).checks()}
    assert used and not used & theirs


def _kinds_homework(tmp_path: Path, listed: list[str]):
    """A homework whose kinds are ``tmp_path/kinds/*.py``: a kind module
    importing its sibling evidence relatively, the profile listing
    ``listed``."""
    from types import SimpleNamespace
    folder = tmp_path / "kinds"
    folder.mkdir()
    (folder / "evidence.py").write_text("def twice(x):\n    return 2 * x\n")
    (folder / "judge.py").write_text(
        "from .evidence import twice\n\nSEEN = twice(21)\n")
    return SimpleNamespace(name=f"hw_{tmp_path.name}",
                           kinds=tuple(folder / n for n in listed))


def test_a_homeworks_kinds_import_their_listed_siblings(tmp_path):
    hw = _kinds_homework(tmp_path, ["judge.py", "evidence.py"])
    own = kinds.register_homework_kinds(hw)
    assert own["judge"].SEEN == 42
    # the sibling the import found is the module listed, loaded once
    assert own["judge"].twice is own["evidence"].twice


def test_a_sibling_left_out_of_the_profile_is_named(tmp_path):
    hw = _kinds_homework(tmp_path, ["judge.py"])
    with pytest.raises(ImportError, match=r"evidence\.py.*not listed in "
                       r"its profile's \[data\] kinds: add it"):
        kinds.register_homework_kinds(hw)
