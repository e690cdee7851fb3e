"""Tests of your implementation (run `pytest tests`)."""
