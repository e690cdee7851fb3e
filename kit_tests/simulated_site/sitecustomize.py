"""Carry kit_tests/simulated_platform.py's simulation into every child
interpreter (a spawned worker, a fresh fork server) whose PYTHONPATH
starts with this folder: only when AUTOGRADER_SIMULATE names a platform."""
import os

if os.environ.get("AUTOGRADER_SIMULATE"):
    from kit_tests.simulated_platform import install
    install(os.environ["AUTOGRADER_SIMULATE"])
