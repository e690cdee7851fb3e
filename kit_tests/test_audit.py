"""The worker's audit (autograder/sandbox/audit.py), outside the jail: each
spelling of a reach-in, run as code of the submission's file, is reported
at once on the channel; the same operations done by the standard library
or the grader for their own ends (a warning, a dataclass, a namedtuple, a
new import, the grader compiling the module) are not; and the watch names
grader state patched through sys.modules, which raises no event."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from kit_tests.test_cli import ROOT

# Run in a fresh interpreter (an audit hook cannot be removed): each case
# is compiled as the submission's file and run; what the hook reported
# for it is read back from the pipe.
HARNESS = textwrap.dedent('''
    import gc, json, os, sys
    from autograder.sandbox import audit, shape_recorder
    from autograder.sandbox.student_module import load_module
    read, write = os.pipe()
    os.set_blocking(read, False)
    reporter = audit.Reporter(write)
    audit.install("student.py", reporter)
    changes = audit.watch()
    found = {}
    for name, code in json.loads(sys.argv[1]).items():
        reporter.seen.clear()   # each case reported on its own
        reporter.count = 0
        try:   # loaded as the worker loads it (its compile is the grader's)
            load_module(code, "student.py", name="s")
        except Exception as exc:
            found[name] = ["raised " + type(exc).__name__]
            continue
        # The module dropped: its finalizers fire here, in no frame of
        # the submission's (as in the grader's probe code).
        sys.modules.pop("s", None)
        gc.collect()
        try:
            data = os.read(read, 1 << 16)
        except BlockingIOError:
            data = b""
        whats = []
        while data:
            size = int.from_bytes(data[:4], "big")
            payload, data = data[4:4 + size], data[4 + size:]
            head = int.from_bytes(payload[:4], "big")
            whats.append(json.loads(payload[4:4 + head])["what"])
        found[name] = whats + ["changed " + n for n in changes()]
    print(json.dumps(found))
''')

ATTACKS = {
    "getframe": "import sys\ngetattr(sys, '_get' + 'frame')(0)",
    "code": "import operator\nf = lambda: 1\n"
            "operator.attrgetter('__co' + 'de__')(f)",
    "getattribute": "f = lambda: 1\nobject.__getattribute__(f, '__co' + "
                    "'de__')",
    "exec": "getattr(getattr(print, '__se' + 'lf__'), 'ex' + 'ec')('x = 1')",
    "traceback": "try:\n    1 / 0\nexcept Exception as e:\n"
                 "    getattr(e.__traceback__, 'tb_' + 'frame')",
    "inspect": "import inspect\ninspect.currentframe()",
    "gc": "import gc\ngc.get_referrers(print)",
    # Libraries that compile, run or walk frames for their caller launder
    # nothing: the submission's code is on the stack.
    "timeit": "import timeit\nns = {}\n"
              "timeit.Timer('pass', setup='def f(): return 1', "
              "globals=ns).timeit(1)",
    "profile": "import cProfile\ncProfile.runctx('x = 1', {}, {})",
    "trace": "import trace\ntrace.Trace(count=0, trace=0).runctx("
             "'x = 1', {}, {})",
    # (walk_stack(None) starts four frames out: called four deep.)
    "walk_stack": "import traceback\n"
                  "def a(): return next(traceback.walk_stack(None))\n"
                  "def b(): return a()\ndef c(): return b()\n"
                  "def d(): return c()\nd()",
    "walk_tb": "import traceback\ntry:\n    1 / 0\nexcept Exception as e:"
               "\n    next(traceback.walk_tb(e.__traceback__))",
    "currentframe": "import logging\nlogging.currentframe()",
    "typing_eval": "import typing\ndef f(x: 'int'): pass\n"
                   "typing.get_type_hints(f)",
    "scratch_module": "import os, sys, tempfile\n"
                      "d = tempfile.mkdtemp()\n"
                      "open(os.path.join(d, 'scratch_helper.py'), 'w')"
                      ".write('x = 1')\nsys.path.insert(0, d)\n"
                      "import scratch_helper",
    # Code run on a thread the submission started, or by a callback it
    # registered that fires in no frame of its own, launders nothing
    # (redteam6 threadexec, finalforge): the thread is a finding itself.
    "thread": "import threading, timeit\n"
              "t = threading.Thread(target=timeit.timeit, kwargs=dict("
              "setup='x = 1', number=1))\nt.start()\nt.join()",
    "finalize": "import timeit, weakref\nclass O: pass\nKEEP = O()\n"
                "weakref.finalize(KEEP, timeit.timeit, setup='x = 1', "
                "number=1)",
    # (a library's function: one of the module's would keep KEEP alive)
    "finalize_defaults": "import textwrap, weakref\nclass O: pass\n"
                         "KEEP = O()\nweakref.finalize(KEEP, setattr, "
                         "textwrap.indent, '__de' + 'faults__', (None,))",
    # A library method that calls a C function the submission set as a
    # slot of its class (ChainMap's subscript) does not make it the
    # library's own use; nor does code a dataclass field name pastes into
    # the generated source (redteam8 chainexec, dcinject).
    "slot_getframe": "import collections, sys\n"
                     "class M(dict):\n    __getitem__ = sys._getframe\n"
                     "collections.ChainMap(M())[0]",
    "slot_exec": "import collections\n"
                 "class E(dict):\n    __getitem__ = exec\n"
                 "collections.ChainMap(E())['x = 1']",
    "dataclass_field_code": "import dataclasses\n"
                            "N = 'a,)if 0 else 0\\n x = 1\\n def __eq__"
                            "(s,o):\\n  return (s'\n"
                            "dataclasses.dataclass(init=False, repr=False)"
                            "(type('R', (), {'__annotations__': {N: int}}))",
    # A field name set on a base class after it was made (redteam9
    # dcbase); code compiled under an installed module's file name and
    # run through a library's wrapper (sdexec).
    "dataclass_base_field": "import dataclasses\n"
                            "@dataclasses.dataclass\nclass B:\n    a: int\n"
                            "dataclasses.fields(B)[0].name = 'a,)if 0 else "
                            "0\\n x = 1\\n def __eq__(s,o):\\n  return (s'\n"
                            "dataclasses.dataclass(init=False, repr=False)"
                            "(type('R', (B,), {}))",
    "installed_file_name": "import functools, os\n"
                           "c = functools.singledispatch(compile)('x = 1', "
                           "os.__file__, 'exec')\n"
                           "functools.singledispatch(exec)(c, {})",
    "dataclass_helper": "import dataclasses\n"
                        "dataclasses._create_fn('f', [], ['return 1'])",
    "patched": "import sys\nm = getattr(sys, 'mod' + 'ules')\n"
               "m['autograder.sandbox.shape_recorder'].ShapeRecorder.take = "
               "lambda self: {}",
}
CONTROLS = {
    "warning": "import warnings\nwarnings.warn('careful')",
    "dataclass": "import dataclasses\n@dataclasses.dataclass\n"
                 "class P:\n    x: int = 1\nP()",
    "namedtuple": "import collections\ncollections.namedtuple('T', 'a b')",
    "dataclass_kinds": "import dataclasses, typing\n"
                       "@dataclasses.dataclass(frozen=True, order=True)\n"
                       "class P:\n    x: int = 1\n"
                       "    y: tuple = dataclasses.field(default=())\n"
                       "    z: 'typing.Optional[int]' = None\n"
                       "P() < P(2)\nhash(P())\n"
                       "dataclasses.make_dataclass('Q', ['a', ('b', int)])"
                       "(1, 2)\ndataclasses.replace(P(), x=3)\n"
                       "@dataclasses.dataclass\nclass L:\n"
                       "    y: list = dataclasses.field(default_factory=list)"
                       "\nL()",
    "chainmap": "import collections\n"
                "collections.ChainMap({'a': 1}, {'b': 2})['b']",
    "import": "import json.tool",
    "torch": "import torch\ntorch.nn.functional.softmax(torch.ones(2), -1)",
    "print_exc": "import io, traceback\ntry:\n    1 / 0\nexcept Exception:\n"
                 "    traceback.print_exc(file=io.StringIO())",
    "deepcopy": "import copy, torch\n"
                "copy.deepcopy(torch.nn.Linear(2, 2))",
    "logging": "import logging\nlogging.getLogger('s').warning('careful')",
    "enum": "import enum\nenum.Enum('E', 'a b')\n"
            "class F(enum.Enum):\n    A = 1",
    "typevar": "import typing\ntyping.TypeVar('T')",
    "new_stdlib_module": "import difflib, fractions, statistics",
    "finalize_harmless": "import weakref\nclass O: pass\nKEEP = O()\n"
                         "weakref.finalize(KEEP, list, (1, 2))",
    "lazy_library_import": "import weakref\nclass O: pass\nKEEP = O()\n"
                           "weakref.finalize(KEEP, __import__, 'xml.dom')",
    "vmap": "import torch\nfrom torch.func import vmap\n"
            "vmap(lambda t: t @ t.mT)(torch.ones(2, 3, 3))",
    "module_call": "import torch\nclass M(torch.nn.Module):\n"
                   "    def forward(self, x):\n"
                   "        return torch.einsum('ij,jk->ik', x, x)\n"
                   "M()(torch.ones(2, 2))",
}


@pytest.fixture(scope="module")
def reported() -> dict[str, list[str]]:
    cases = {**CONTROLS, **ATTACKS}   # controls first: nothing patched yet
    done = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", HARNESS, json.dumps(cases)],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_every_spelling_is_reported(reported, name):
    assert reported[name] and not reported[name][0].startswith("raised"), \
        reported[name]


@pytest.mark.parametrize("name", sorted(CONTROLS))
def test_the_same_done_by_the_library_is_not(reported, name):
    assert reported[name] == [], reported[name]


def test_a_patch_of_the_grader_names_what_changed(reported):
    assert "changed autograder.sandbox.shape_recorder.ShapeRecorder" in \
        reported["patched"]
