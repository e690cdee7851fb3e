"""The grading config (autograder/config.py) is the one route of a probe's
time limit: the rubric's ``[grading] timeout``, an item's own, or the
command's ``--timeout`` reaches every planned probe, whatever its kind
built; no kind can leave a probe at a default of its own."""
from __future__ import annotations

import collections
import tomllib
from dataclasses import replace

from autograder.config import GradingConfig, load_config
from autograder.grade import grading_context, plan_checks
from autograder import homework
from autograder.rubric import parse_rubric


def _config(grading_timeout: float | None = None,
            item_timeouts: dict[str, float] | None = None) -> GradingConfig:
    data = tomllib.loads(homework.current().rubric.read_text())
    if grading_timeout is not None:
        data["grading"]["timeout"] = grading_timeout
    for task in data["task"]:
        for section in ("item", "deduction", "bonus"):
            for entry in task.get(section, []):
                if entry["id"] in (item_timeouts or {}):
                    entry["timeout"] = item_timeouts[entry["id"]]
    live = load_config(sets=("public",))
    return replace(live, rubric=parse_rubric(data, "other.toml"))


def _limits(config: GradingConfig) -> dict[str, collections.Counter]:
    """Check id -> how many of its planned probes have each limit."""
    return {check.id: collections.Counter(p.timeout for p in probes)
            for check, probes in plan_checks(config,
                                             grading_context(config))}


def test_the_rubrics_limit_reaches_every_probe_of_every_kind():
    limits = _limits(_config(grading_timeout=7.5))
    assert len(limits) > 10   # every kind that runs code plans probes
    assert {s for c in limits.values() for s in c} == {7.5}


def test_an_items_own_limit_is_its_probes_alone():
    config = _config(grading_timeout=7.5, item_timeouts={"1.1": 2.0})
    limits = _limits(config)
    assert set(limits["1.1"]) == {2.0}
    assert {s for cid, c in limits.items() if cid != "1.1"
            for s in c} == {7.5}


def test_the_commands_override_reaches_every_probe():
    config = _config(grading_timeout=7.5, item_timeouts={"1.1": 2.0})
    limits = _limits(config.with_time_limit(0.5))
    assert {s for c in limits.values() for s in c} == {0.5}
    assert config.with_time_limit(None) is config


def test_load_config_carries_the_override():
    config = load_config(sets=("public",), probe_timeout=3.0)
    check = config.rubric.checks()[0]
    assert config.probe_timeout == 3.0 and config.time_limit(check) == 3.0
    assert load_config(sets=("public",)).time_limit(check) == check.timeout
