"""Isolated, rubric-driven autograder for the attention homework."""
