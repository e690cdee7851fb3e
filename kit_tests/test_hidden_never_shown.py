"""Hidden means hidden until published: a submission that tries
hard to print the hidden cases (at import, in every call, in exception
messages, in the type names of what it returns) shows no hidden case's
name, description or input statistic in any student-visible text before
publication; what it printed during the hidden cases comes after it.

The worker never holds a hidden case's name (opaque ids) and receives the
hidden probes only after every public probe has answered
(``supervisor.Attempt``)."""
from __future__ import annotations

import json

import pytest

from autograder import homework
from autograder.report import results as report
from autograder.values import load_cases
from kit import variants
from kit.corpus.grading_batch import grade_batch

# After the imports of the reference: looks for the grader's probes in
# the worker's memory at import and in every call, prints what it finds
# and every input's statistics, and puts them in exceptions and in the
# type names of what it returns.
SPY = '''

import gc as _gc


def _token(x):
    if not isinstance(x, torch.Tensor):
        return "-"
    return f"{list(x.shape)}:{float(x.double().sum()):.5f}"


_kind = []     # the grader's Probe class, once seen


def _probes(tag):
    # every Probe refers to its class: once seen, the collector finds
    # them all from it (a Python loop over every object per call would
    # cost the test seconds)
    objects = _gc.get_referrers(_kind[0]) if _kind else _gc.get_objects()
    found = []
    for obj in objects:
        if type(obj).__name__ == "Probe":
            _kind[:] = [type(obj)]
            args = getattr(obj, "args", None) or [None]
            found.append(f"{tag} {obj.id} {_token(args[0])}")
    return "\\n".join(found)


print(_probes("IMPORT-LEAK"))
_call = nn.Module.__call__
_calls = [0]


def _spy(self, *args, **kwargs):
    token = _token(args[0] if args else None)
    print("CALL-LEAK", token, _probes("CALL-LEAK"))
    _calls[0] += 1
    if _calls[0] % 3 == 1:
        raise ValueError(f"EXC-LEAK {token}")
    if _calls[0] % 3 == 2:
        return type(f"TYPE-LEAK {token}", (), {})()
    return _call(self, *args, **kwargs)


nn.Module.__call__ = _spy
'''


def _spy_source() -> str:
    source = homework.staff().reference.read_text()
    anchor = "import torch.nn as nn\n"
    assert anchor in source
    return source.replace(anchor, anchor + SPY, 1)


def _token(x) -> str:
    return f":{float(x.double().sum()):.5f}"


def _secrets(cases) -> list[str]:
    """What must not be seen: each hidden case's name and description and
    the statistics of its input, where no public case shares them."""
    public = [c for c in cases if c.set != "hidden"]
    public_text = " ".join(f"{c.name} {c.description} "
                           f"{_token(c.tensors['x'])}" for c in public)
    found = []
    for case in cases:
        if case.set != "hidden":
            continue
        for secret in (case.name, case.description,
                       _token(case.tensors["x"])):
            if secret not in public_text:
                found.append(secret)
    return found


@pytest.fixture(scope="module")
def spied(box):
    cases = load_cases()
    grade = grade_batch({"spy": _spy_source()}, {"spy": 2.0},
                        sandbox=box)["spy"]
    assert not grade.internal_error, grade.internal_error
    return grade, cases


def _visible(grade) -> dict[str, str]:
    data = report.results_json(grade)
    return {
        "feedback.md before publication":
            report.feedback_markdown(grade, hidden_details=False),
        "results.json before publication": data["output"] + json.dumps(
            [t for t in data["tests"]
             if t["visibility"] != "after_published"]),
        "check": report.check_text(grade)}


def test_no_hidden_detail_is_visible_before_publication(spied):
    grade, cases = spied
    secrets = _secrets(cases)
    assert len(secrets) > 30
    for where, text in _visible(grade).items():
        leaked = [s for s in secrets if s in text]
        assert not leaked, (where, leaked)


def test_the_attack_ran_and_its_hidden_output_waits(spied):
    grade, cases = spied
    visible = _visible(grade)["results.json before publication"]
    # what it printed at import and during public cases is shown ...
    assert "IMPORT-LEAK" in visible
    # ... what it printed during hidden cases comes after publication
    # (inputs only: the worker never holds a hidden case's name)
    later = [t for t in report.results_json(grade)["tests"]
             if t["visibility"] == "after_published"]
    assert len(later) == 1 and "CALL-LEAK" in later[0]["output"]
    hidden = {c.name for c in cases if c.set == "hidden"}
    assert not any(f" {name}:" in grade.hidden_stdout for name in hidden)
    assert any(_token(c.tensors["x"]) in grade.hidden_stdout
               for c in cases if c.set == "hidden")


# --------------------------------------------------------------------------
# The worker's side, probe by probe

CRASHER = '''
import gc
import os

print("IMPORTED", [o.id for o in gc.get_objects()
                   if type(o).__name__ == "Probe"])
_count = [0]


def forward_hook(module, args):
    _count[0] += 1
    print("CALL", _count[0], [o.id for o in gc.get_objects()
                              if type(o).__name__ == "Probe"])
    if float(args[0].sum()) > 1e6:   # the hidden input below
        os._exit(3)
'''


def _probe(pid: str, scale: float, hidden: bool):
    # 30 s: every probe but the crashing one must finish, on a loaded
    # machine too (a fresh worker starts within the next probe's time).
    import torch
    from autograder.sandbox.protocol import Probe
    x = torch.ones(2, 5, 7) * scale
    return Probe(pid, "SelfAttention", {"input_size": 7, "hidden": 9},
                 args=[x], hidden=hidden, timeout=30.0)


def test_a_fresh_worker_after_a_hidden_crash_keeps_hidden_output_hidden(
        box):
    """Hidden probes reach the worker last, under opaque ids; after a
    crash during one, the fresh worker's import output goes with the
    hidden probe it runs first, never with a public one."""
    source = homework.staff().reference.read_text().replace(
        "import torch.nn as nn\n", "import torch.nn as nn\n" + CRASHER, 1)
    source = source.replace(
        "class SelfAttention(nn.Module):",
        "class SelfAttention(nn.Module):\n"
        "    def __call__(self, *args):\n"
        "        forward_hook(self, args)\n"
        "        return super().__call__(*args)\n", 1)
    probes = [_probe("public_case:eval", 1.0, False),
              _probe("secret_case:eval", 1e6, True),
              _probe("other_secret:eval", 2.0, True),
              _probe("second_public:eval", 3.0, False)]
    results = box.run(source, "m.py", probes)
    by_id = {r.id: r for r in results}
    assert [r.id for r in results] == [p.id for p in probes]
    public = by_id["public_case:eval"].stdout + \
        by_id["second_public:eval"].stdout
    assert "IMPORTED ['public_case:eval', 'second_public:eval']" in public
    assert "secret" not in public and "h0" not in public
    seen = [(r.id, r.status, r.message) for r in results]
    assert by_id["second_public:eval"].ok, seen   # public ones ran first
    assert by_id["secret_case:eval"].status == "crash", seen
    after = by_id["other_secret:eval"]
    assert after.ok, seen
    # the fresh worker imported with the hidden probe only, by its id
    assert "IMPORTED []" in after.stdout and "h0" in after.stdout
    assert "secret" not in after.stdout
