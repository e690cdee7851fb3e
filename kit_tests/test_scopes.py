"""Which binding a name refers to (autograder/checks/scopes.py), as
Python decides it: the static rules ask this, so a local variable called
``compile`` is not the built-in, and a module-level binding hides the
built-in only where it surely ran first."""
from __future__ import annotations

import ast

from autograder.checks.scopes import Scopes

SOURCE = """\
a = compile
def f(compile):
    return compile
def g():
    return compile
compile = 3
b = compile
def h():
    def inner():
        return compile
    compile = 1
    return inner
"""


def _builtin_by_line() -> dict[int, bool]:
    tree = ast.parse(SOURCE)
    scopes = Scopes(tree)
    return {node.lineno: scopes.is_builtin(node) for node in ast.walk(tree)
            if isinstance(node, ast.Name) and node.id == "compile"
            and isinstance(node.ctx, ast.Load)}


def test_the_built_in_before_any_binding():
    assert _builtin_by_line()[1] is True


def test_a_parameter_is_not_the_built_in():
    assert _builtin_by_line()[3] is False


def test_a_function_may_run_before_the_module_binds_the_name():
    assert _builtin_by_line()[5] is True


def test_after_an_unconditional_module_binding_it_is_not():
    assert _builtin_by_line()[7] is False


def test_a_closure_over_an_enclosing_binding_is_not():
    assert _builtin_by_line()[10] is False


def test_a_binding_under_a_condition_leaves_the_built_in_possible():
    tree = ast.parse("if flag:\n    compile = 1\nx = compile\n")
    scopes = Scopes(tree)
    [use] = [n for n in ast.walk(tree) if isinstance(n, ast.Name)
             and n.id == "compile" and isinstance(n.ctx, ast.Load)]
    assert scopes.is_builtin(use) is True
