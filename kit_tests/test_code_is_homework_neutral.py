"""The grader and the shipped tools name no part of one homework in code.

What a check, a student command or the values generator needs per class
(the scale of the scores, which extra tensors a case records, which
classes a submission must define) comes from data: the profile, the
rubric, the cases' definitions, the manifest. This test reads the
attention homework's class and function names (the reference's top-level
definitions), its constructors' argument names (``num_heads``, ``d_out``,
``context_length``, ...: a case names them by role, the rubric by
parameter), its package and module names (the profile) and its question
ids (``questions.toml``) and the check kinds it ships itself (its profile's
``[data] kinds``: ``dropout_train``, ``attention_probs``, ...; such a
kind lives with its homework, never in the grader), and fails on any of
them written in code under
``autograder/``, ``kit/student/``, the values generator and the
editions' draw (kit/generate/edition.py):
identifiers and string literals, not docstrings or comments, which may
keep naming the attention homework's classes as examples.
"""
from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

from autograder import homework

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ("autograder", "kit/student", "kit/generate/values.py",
           "kit/generate/case_definition.py", "kit/generate/edition.py")
# The size of one head as MultiHeadAttention's docstring names it (the
# scale the steps definition freezes, the attribute the rubric's
# module_size item expects): no constructor argument, the homework's word.
HEAD_SIZE_NAME = "head_dim"


def homework_names(root: Path = ROOT) -> set[str]:
    """The attention homework's own names: the reference's public
    top-level classes and functions, its package and module, its
    question ids, its own check kinds' names."""
    profile = homework.load(root, staff=True)
    tree = ast.parse(profile.reference.read_text(encoding="utf-8"))
    names = {node.name for node in tree.body
             if isinstance(node, (ast.ClassDef, ast.FunctionDef))
             and not node.name.startswith("_")}
    names |= {profile.package, profile.module_stem}
    with profile.questions.open("rb") as f:
        names |= set(tomllib.load(f)["questions"])
    return names | argument_names(tree) | own_kinds(profile)


def own_kinds(profile: homework.Homework) -> set[str]:
    """The kinds the homework's own kind modules register
    (``@register(section, name)``), read from their source."""
    found = set()
    for path in profile.kinds:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and \
                    getattr(node.func, "id", "") == "register" and \
                    len(node.args) > 1 and \
                    isinstance(node.args[1], ast.Constant):
                found.add(node.args[1].value)
    return found


def argument_names(tree: ast.Module) -> set[str]:
    """The constructor arguments of the reference's public classes that
    are no plain word (``num_heads``, ``d_out``, ``context_length``, ...),
    and the head size's name. Plain words (``hidden``, ``causal``,
    ``dropout``) are also the grader's own (hidden cases, causal and
    dropout kinds), so they are left out."""
    found = {HEAD_SIZE_NAME}
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and \
                        item.name == "__init__":
                    found |= {a.arg for a in item.args.args[1:]
                              if "_" in a.arg}
    return found


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the string constants that are docstrings."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef,
                             ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and \
                    isinstance(first.value, ast.Constant) and \
                    isinstance(first.value.value, str):
                found.add(id(first.value))
    return found


def _words(node: ast.AST) -> list[str]:
    """The identifiers a node writes (names, attributes, definitions,
    arguments, imports)."""
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Attribute):
        return [node.attr]
    if isinstance(node, (ast.ClassDef, ast.FunctionDef,
                         ast.AsyncFunctionDef)):
        return [node.name]
    if isinstance(node, ast.arg):
        return [node.arg]
    if isinstance(node, ast.keyword) and node.arg:
        return [node.arg]
    if isinstance(node, ast.alias):
        alias = [node.asname] if node.asname else []
        return [*node.name.split("."), *alias]
    if isinstance(node, ast.ImportFrom) and node.module:
        return node.module.split(".")
    return []


def occurrences(path: Path, names: set[str]) -> list[tuple[int, str]]:
    """(line, name) of every name of ``names`` in ``path``'s code."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    docs = _docstrings(tree)
    word = re.compile(r"(?<![A-Za-z0-9_])(" + "|".join(
        map(re.escape, sorted(names, key=len, reverse=True)))
        + r")(?![A-Za-z0-9_])")
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if id(node) not in docs:
                found += [(node.lineno, m) for m in word.findall(node.value)]
        else:
            found += [(getattr(node, "lineno", 0), w)
                      for w in _words(node) if w in names]
    return sorted(set(found))


def _scanned_files(root: Path = ROOT) -> list[Path]:
    files = []
    for rel in SCANNED:
        path = root / rel
        files += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    return files


def test_the_names_are_read_from_the_homework():
    names = homework_names()
    assert {"transformer_lm", "modeling_attention", "Q1"} <= names
    assert "MultiHeadSelfAttention" in names
    assert {"num_heads", "d_out", "context_length", "head_dim", "d_in",
            "qkv_bias"} <= names
    assert not {"hidden", "causal", "dropout"} & names
    # the kinds only the attention homework uses: in its kinds/, so the
    # grader's code may not name (nor register) them
    assert {"attention_probs", "causal_property", "dropout_train",
            "dropout_on_weights", "concatenated_heads",
            "module_size"} <= names


def test_the_scan_sees_code_and_skips_docstrings_and_comments(tmp_path):
    path = tmp_path / "sample.py"
    path.write_text('"""Module doc: SelfAttention."""\n'
                    '# SelfAttention in a comment\n'
                    'def f(case):\n'
                    '    """SelfAttention in a docstring."""\n'
                    '    if case.cls == "SelfAttention":\n'
                    '        return f"{case.name}: Q1"\n'
                    '    import transformer_lm.modeling_attention\n')
    found = occurrences(path, {"SelfAttention", "Q1", "transformer_lm",
                               "modeling_attention", "Q11"})
    assert found == [(5, "SelfAttention"), (6, "Q1"),
                     (7, "modeling_attention"), (7, "transformer_lm")]


def test_no_homework_name_in_the_graders_code():
    names = homework_names()
    found = [f"{path.relative_to(ROOT)}:{line}: {name}"
             for path in _scanned_files()
             for line, name in occurrences(path, names)]
    assert not found, (
        "the attention homework's names are written in code that must "
        "serve any homework:\n  " + "\n  ".join(found) + "\nfix: read "
        "what the code needs per class from data (the profile, the "
        "rubric's parameters, the cases' definitions or the steps "
        "definition frozen into the manifest), not from the name")


# --------------------------------------------------------------------------
# The homework is read at the entry points and passed down, never bound
# when a module is imported.

# Modules that still read the homework on import, each with why. Shrink it.
READS_ON_IMPORT: set[str] = set()
_READERS = ("current", "staff")


def _reads_on_import(tree: ast.Module) -> list[int]:
    """Lines of the calls ``homework.current()``/``staff()`` (or the bare
    names) that run when the module is imported: in its statements and
    class bodies, and in decorators and default arguments, not in
    function bodies or lambdas."""
    found = []

    def calls(node: ast.AST) -> None:
        if isinstance(node, (ast.Lambda, ast.FunctionDef,
                             ast.AsyncFunctionDef)):
            return
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else \
                getattr(func, "id", None)
            if name in _READERS:
                found.append(node.lineno)
        for child in ast.iter_child_nodes(node):
            calls(child)

    def statements(body: list[ast.stmt]) -> None:
        for stmt in body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for node in (*stmt.decorator_list, *stmt.args.defaults,
                             *filter(None, stmt.args.kw_defaults)):
                    calls(node)
            elif isinstance(stmt, ast.ClassDef):
                for node in stmt.decorator_list:
                    calls(node)
                statements(stmt.body)
            else:
                calls(stmt)

    statements(tree.body)
    return found


def test_the_import_scan_sees_module_level_reads_only(tmp_path):
    path = tmp_path / "sample.py"
    path.write_text("from autograder import homework\n"
                    "A = homework.current().module\n"
                    "def f(hw=homework.staff()):\n"
                    "    return homework.current()\n"
                    "class C:\n"
                    "    B = homework.staff()\n"
                    "    def g(self):\n"
                    "        return homework.staff()\n"
                    "G = lambda: homework.current()\n")
    assert _reads_on_import(ast.parse(path.read_text())) == [2, 3, 6]


def test_no_module_reads_the_homework_on_import():
    found = []
    for folder in ("autograder", "kit"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            tree = ast.parse(path.read_text(encoding="utf-8"), rel)
            found += [f"{rel}:{line}" for line in _reads_on_import(tree)
                      if rel not in READS_ON_IMPORT]
    assert not found, (
        "the homework is read when these modules are imported (a "
        "module-level constant, chosen once by $HOMEWORK):\n  "
        + "\n  ".join(found) + "\nfix: take the homework (or the path) as "
        "a parameter, read once at the entry point and passed down")
    stale = [rel for rel in READS_ON_IMPORT
             if not _reads_on_import(ast.parse((ROOT / rel).read_text()))]
    assert not stale, f"no longer read on import: drop {stale} from the list"
