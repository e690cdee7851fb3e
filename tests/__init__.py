"""Tests of your attention implementation (run `pytest tests`)."""
