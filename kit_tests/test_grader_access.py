"""The grader-access rule (``checks/grader_access.py``) charges only code
the grader runs and only the built-ins it means (honest code first: a
local variable called ``compile`` or ``inspect`` in a ``__main__`` block
costs nothing), and judges a name built at run time as the name it
builds (``"mod" + "ules"``, ``attrgetter``, ``__getattribute__``,
``vars``, ``__dict__``). Each attack beside its control: the same code
without the trick, or the honest code it imitates."""
from __future__ import annotations

import pytest

from autograder.checks.grader_access import access_issues, findings
from kit_tests.reference_source import FULL_REFERENCE, first_two_classes
from kit_tests.rubrics import live_task_methods

TASKS = tuple(live_task_methods())
REFERENCE = first_two_classes(FULL_REFERENCE)


def _found(code: str) -> list[str]:
    source = REFERENCE + "\n" + code
    compile(source, "t", "exec")
    return [f.what for f in findings(source)]


# --------------------------------------------------------------------------
# Honest code is not charged (each beside the attack it must not hide)

HONEST = {
    "inspect in a __main__ block":
        'if __name__ == "__main__":\n    import inspect\n'
        '    print(inspect.signature(SelfAttention))\n',
    "the __main__ test reversed":
        'if "__main__" == __name__:\n    _m = globals()\n',
    "a local variable called compile":
        "def _run(model):\n    compile = model.compile\n"
        "    return compile()\n",
    "a parameter called eval":
        "def _mode(module, eval=True):\n"
        "    return module.eval() if eval else module\n",
    "a module-level name bound before its use":
        "compile = torch.compile\n_c = compile(nn.Linear(2, 2))\n",
    "a closure":
        "def _outer():\n    vars = {}\n\n    def inner():\n"
        "        return vars\n    return inner\n",
    "getattr of a name from a constant loop":
        "def _proj(module):\n    for name in ('q', 'k', 'v'):\n"
        "        getattr(module, name)\n"
        "    return getattr(module, f'W_{name}', None)\n",
    "getattr of a parameter": "def _get(o, n):\n    return getattr(o, n)\n",
    "a getattr wrapper given a layer's name":
        "def _get(o, n):\n    return getattr(o, n)\n\n\n"
        "_w = _get(nn.Linear(2, 2), 'weight')\n",
    "an f-string in an error":
        "def _check(n):\n    raise ValueError(f'{n} heads: {n}s')\n",
    "a mode chosen by a condition":
        "def _mode(t):\n    return 'train' if t else 'eval'\n",
}
# The same code where it does run, or where the name is the built-in's.
CHARGED = {
    "inspect in a __main__ block":
        'if __name__ != "__main__":\n    import inspect\n'
        '    print(inspect.signature(SelfAttention))\n',
    "the __main__ test reversed":
        '__name__ = "__main__"\nif "__main__" == __name__:\n'
        '    _m = globals()\n',
    "a local variable called compile":
        "def _run(model):\n    return compile('1', 's', 'eval')\n",
    "a parameter called eval":
        "def _mode(module, ev=True):\n    return eval('module')\n",
    "a module-level name bound before its use":
        "_c = compile('1', 's', 'eval')\ncompile = torch.compile\n",
    "a closure":
        "def _outer():\n    def inner():\n        return vars()\n"
        "    return inner\n",
    "getattr of a name from a constant loop":
        "import sys\nfor _name in ('path', 'modules'):\n"
        "    getattr(sys, _name)\n",
    "getattr of a parameter":
        "def _get(o):\n    return getattr(o, '__glob' + 'als__')\n",
    # A frame walk: the name handed to the student's own wrapper,
    # whose parameter hides it from the getattr rule.
    "a getattr wrapper given a layer's name":
        "def _get(o, n):\n    return getattr(o, n)\n\n\n"
        "_w = _get(nn.Linear(2, 2), 'f_loc' 'als')\n",
    "an f-string in an error":
        "_p = '__glo'\n_n = f'{_p}bals__'\n",
    "a mode chosen by a condition":
        "_n = 'ex' + 'ec' if True else 'eval'\n",
}


@pytest.mark.parametrize("name", HONEST)
def test_honest_code_is_not_charged(name):
    assert _found(HONEST[name]) == []
    # The control: the charged twin.
    assert _found(CHARGED[name]), name


@pytest.mark.parametrize("rename", [
    '__name__ = "__main__"\n',
    'import sys as _s\nsetattr(_s, "x", 1)\n',
    'locals()["__name__"] = "__main__"\n',
])
def test_a_main_block_counts_once_the_module_can_rename_itself(rename):
    main = 'if __name__ == "__main__":\n    import gc\n'
    assert "`import gc`" in _found(rename + main)
    assert "`import gc`" not in _found(main)


@pytest.mark.parametrize("shadow", [
    "if False:\n    compile = None\n",        # maybe never bound
    "compile = None\ndel compile\n",           # bound, then deleted
    "def _f():\n    global compile\n    compile = None\n",
])
def test_a_shadow_that_may_not_hold_does_not_hide_the_builtin(shadow):
    use = "_c = compile('1', 's', 'eval')\n"
    assert "`compile`" in _found(shadow + use)
    assert "`compile`" not in _found("compile = print\n" + use)


def test_a_function_run_before_the_shadow_is_charged():
    # _f runs at import, before the module binds compile: the built-in.
    code = ("def _f():\n    return compile('1', 's', 'eval')\n\n\n"
            "_f()\ncompile = None\n")
    assert "`compile`" in _found(code)
    # The control: the binding first.
    assert _found("compile = print\n\n\n" + code.replace(
        "compile = None\n", "")) == []


def test_a_class_attribute_does_not_hide_the_builtin_from_methods():
    code = ("class _A:\n    exec = print\n\n    def f(self):\n"
            "        return exec('1')\n")
    assert "`exec`" in _found(code)
    assert _found(code.replace("exec('1')", "self.exec('1')")) == []


# --------------------------------------------------------------------------
# Names built at run time

BUILT = {
    "getattr, name concatenated": 'import sys\n_m = getattr(sys, "mod" + '
                                  '"ules")\n',
    "getattr, name grown by +=": 'import sys\n_n = "mod"\n_n += "ules"\n'
                                 '_m = getattr(sys, _n)\n',
    "getattr, name joined": 'import sys\n_m = getattr(sys, "".join(["mod",'
                            ' "ules"]))\n',
    "getattr, name reversed": 'import sys\n_m = getattr(sys, "seludom"'
                              '[::-1])\n',
    "getattr, name from chr": '_e = chr(101) + chr(120) + chr(101) + '
                              'chr(99)\n',
    "getattr, an f-string": '_p = "__glo"\n_g = getattr(len, f"{_p}bals__")'
                            '\n',
    "getattr passed around": 'import sys\n_g = getattr\n_m = _g(sys, '
                             '"modules")\n',
    "attrgetter": 'import operator\n_f = operator.attrgetter("__globals__")'
                  '\n',
    "attrgetter, dotted": 'from operator import attrgetter\n_f = '
                          'attrgetter("a.co_consts")\n',
    "attrgetter, built": 'from operator import attrgetter\n_f = '
                         'attrgetter("co_" + "consts")\n',
    "methodcaller": 'import operator\n_f = operator.methodcaller('
                    '"__sub" + "classes__")\n',
    "__getattribute__": '_g = object.__getattribute__(len, "__glob" + '
                        '"als__")\n',
    "vars": "_v = vars(torch)\n",
    "__dict__": "_d = torch.__dict__\n",
    "exec through print's module": '_e = getattr(getattr(print, "__se" + '
                                   '"lf__"), "ex" + "ec")\n',
    "exec through a module's builtins": "import dataclasses\n"
                                        "_e = dataclasses.builtins.exec\n",
}
# The controls: the same calls with names that reach nothing.
NOT_BUILT = {
    "getattr, name concatenated": 'import sys\n_m = getattr(sys, "ver" + '
                                  '"sion")\n',
    "getattr, name grown by +=": 'import sys\n_n = "ver"\n_n += "sion"\n'
                                 '_m = getattr(sys, _n)\n',
    "getattr, name joined": 'import sys\n_m = getattr(sys, "".join(["ver",'
                            ' "sion"]))\n',
    "getattr, name reversed": 'import sys\n_m = getattr(sys, "noisrev"'
                              '[::-1])\n',
    "getattr, name from chr": '_e = chr(104) + chr(105)\n',
    "getattr, an f-string": '_p = "__na"\n_g = getattr(len, f"{_p}me__")\n',
    "getattr passed around": 'import sys\n_m = getattr(sys, "version")\n',
    "attrgetter": 'import operator\n_f = operator.attrgetter("weight")\n',
    "attrgetter, dotted": 'from operator import attrgetter\n_f = '
                          'attrgetter("q.weight")\n',
    "attrgetter, built": 'from operator import attrgetter\n_f = '
                         'attrgetter("we" + "ight")\n',
    "methodcaller": 'import operator\n_f = operator.methodcaller("sum")\n',
    "__getattribute__": '_g = getattr(len, "__na" + "me__")\n',
    "vars": "_v = dir(torch)\n",
    "__dict__": "_d = torch.__name__\n",
    "exec through print's module": '_e = getattr(print, "__na" + "me__")\n',
    "exec through a module's builtins": "import dataclasses\n"
                                        "_e = dataclasses.field\n",
}


@pytest.mark.parametrize("name", BUILT)
def test_a_name_built_at_run_time_is_judged_as_the_name(name):
    found = _found(BUILT[name])
    assert found, name
    source = REFERENCE + "\n" + BUILT[name]
    for cls in TASKS:
        assert access_issues(source, cls, TASKS), cls
    assert _found(NOT_BUILT[name]) == []
