"""The fault-injection suite (``make test-faults``; inside ``make
test-all``): the grader under faults of its own machine, each scenario
judged against a clean run of the same inputs (harness.py)."""
