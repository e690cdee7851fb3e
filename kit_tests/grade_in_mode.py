"""Grade groups of the variant catalogue in this process's jail mode and
print what each entry scored, as JSON (``kit_tests/test_jail_mode_grades.py``
runs it in every mode, as root and as a test user, with and without
namespaces, and compares).

``python -m kit_tests.grade_in_mode GROUP...``: one object, entry key ->
``{"scores": {task: score}, "lost": [ids], "internal_error": bool}``, plus
``"_layers"``: the jail's layers in force.
"""
from __future__ import annotations

import json
import sys
from concurrent.futures import ThreadPoolExecutor

from autograder.config import load_config
from autograder.grade import grade_source, sandbox_runner
from autograder.sandbox.preflight import run_preflight
from autograder.sandbox.pool import Sandbox
from kit import variants


def main(groups: list[str]) -> int:
    catalogue = variants.load_all()
    keys = [k for k, v in catalogue.items() if k.split("/")[0] in groups
            and not v.fields.get("known_bug")]
    config = load_config()
    with Sandbox() as sandbox:
        layers = run_preflight(sandbox)
        runner = sandbox_runner(sandbox)

        def one(key: str) -> tuple[str, dict]:
            grade = grade_source(
                catalogue[key].source(), key.replace("/", "-") + ".py",
                config.with_time_limit(catalogue[key].fields.get("timeout")),
                runner, name=key)
            lost = sorted(c.check.id for t in grade.tasks
                          for c in (*t.items, *t.deductions, *t.bonuses)
                          if not c.outcome.passed)
            return key, {"scores": {t.task.id: t.score
                                    for t in grade.tasks},
                         "lost": lost,
                         "internal_error": bool(grade.internal_error)}

        with ThreadPoolExecutor(2) as pool:
            found = dict(pool.map(one, keys))
    found["_layers"] = layers
    print(json.dumps(found, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
