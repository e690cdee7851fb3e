"""Code the grader cannot read never scores better than the same code
written plainly: what ``exec``, ``compile`` or a
reach-in builds counts as failing every static rule it could have failed
(PEP 8, shape comments, the bonus) on top of the access deduction, and
code a task's calls run above its markers (a function defined in the
given ``__init__``) is judged by every rule the code inside them is.
Each attack graded in process beside its control: the same code written
plainly, which pays only for what it really breaks."""
from __future__ import annotations

import pytest

from autograder.config import load_config
from autograder.grade import grade_source
from autograder.local import in_process_runner
from kit_tests.reference_source import FULL_REFERENCE

OWN = '''        q, k, v = self.q(x), self.k(x), self.v(x)  # [bs, seq, hidden]
        probs = torch.softmax(
            q @ k.transpose(1, 2) / q.shape[-1] ** 0.5, dim=-1
        )  # [bs, seq, seq]
        return probs @ v  # [bs, seq, hidden]
'''
# A helper with no shape comment and a PEP 8 violation (E225).
HELPER = ('def _attend(module, x):\n'
          '    q, k, v = module.q(x), module.k(x), module.v(x)\n'
          '    probs=torch.softmax(q @ k.transpose(1, 2) / '
          'q.shape[-1] ** 0.5, -1)\n'
          '    return probs @ v\n')
FORWARD = "        return _attend(self, x)  # [bs, seq, hidden]\n"


def _plain() -> str:
    assert FULL_REFERENCE.count(OWN) == 1
    return FULL_REFERENCE.replace(OWN, FORWARD) + "\n\n" + HELPER


def _by_exec(runner: str) -> str:
    return FULL_REFERENCE.replace(OWN, FORWARD) + "\n\n" + \
        runner.format(h=repr(HELPER)) + "\n"


@pytest.fixture(scope="module")
def config():
    return load_config()


def _grade(source: str, config):
    compile(source, "m.py", "exec")
    grade = grade_source(source, "m.py", config, in_process_runner)
    assert not grade.internal_error, grade.internal_error
    lost = {c.check.id: c.outcome.lines for t in grade.tasks
            for c in (*t.items, *t.deductions, *t.bonuses)
            if not c.outcome.passed}
    return grade.score, lost


@pytest.fixture(scope="module")
def plain(config):
    return _grade(_plain(), config)


def test_the_plain_helper_pays_for_its_style_and_comments(plain):
    score, lost = plain
    assert {"1.pep8", "1.shapes", "1.bonus"} <= set(lost)
    assert not any(k.endswith(".access") for k in lost)


RULES = {"pep8": {"1", "2", "3.1", "3.2", "3.3", "3.4"},
         "shapes": {"1", "2", "3.1", "3.2", "3.3"},
         "access": {"1", "2", "3.1", "3.2", "3.3", "3.4"}}


@pytest.mark.parametrize("runner", [
    "exec({h})",
    'exec(compile({h}, "<s>", "exec"))',
    'getattr(getattr(print, "__se" + "lf__"), "ex" + "ec")({h})',
], ids=["exec", "compile", "exec reached by built names"])
def test_a_helper_built_from_a_string_scores_below_the_plain_one(
        config, plain, runner):
    score, lost = _grade(_by_exec(runner), config)
    assert score < plain[0], (score, plain[0])
    # Every task's static rules count as failed, and say why.
    for rule, tasks in RULES.items():
        assert {k for k in lost if k.endswith("." + rule)} == {
            f"{t}.{rule}" for t in tasks}, rule
    assert "1.bonus" in lost
    assert "cannot read" in "\n".join(lost["1.pep8"])


def test_a_reach_in_one_class_costs_that_class_static_rules_only(config):
    inside = FULL_REFERENCE.replace(OWN, "        _v = vars(self)\n" + OWN)
    score, lost = _grade(inside, config)
    assert {"1.access", "1.pep8", "1.shapes", "1.bonus"} <= set(lost)
    assert not any(k.startswith(("2.", "3.")) for k in lost), sorted(lost)


WRAPPER = ("        # YOUR CODE STARTS HERE\n"
           "        return torch.cat([head(x) for head in self.heads], "
           "dim=-1)\n        # [b, num_tokens, num_heads * d_out]\n")
HEADS = "            for _ in range(num_heads)\n        ])\n"
IN_INIT = ("\n        def run(x):\n"
           "            out = torch.cat([h(x) for h in self.heads], dim=-1)"
           "{c}\n            return out{c}\n        self._run = run\n")


@pytest.mark.parametrize("comment", ["", "\n            # [b, num_tokens, "
                                         "num_heads * d_out]"],
                         ids=["uncommented", "control: commented"])
def test_code_run_from_the_given_init_is_judged_as_inside_the_markers(
        config, comment):
    assert FULL_REFERENCE.count(WRAPPER) == FULL_REFERENCE.count(HEADS) == 1
    source = FULL_REFERENCE.replace(
        WRAPPER, "        # YOUR CODE STARTS HERE\n"
                 "        return self._run(x)\n"
                 "        # [b, num_tokens, num_heads * d_out]\n"
    ).replace(HEADS, HEADS + IN_INIT.format(c=comment))
    score, lost = _grade(source, config)
    if comment:
        assert set(lost) == set(), sorted(lost)
    else:
        assert set(lost) == {"3.2.shapes"}, sorted(lost)
        assert "`run`" in "\n".join(lost["3.2.shapes"])
