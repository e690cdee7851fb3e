"""Submissions made from the catalogue (kit/variants/) and the verdicts
they must get: examples, class and hostile batches, near copies."""
