"""Gradescope's side of the grader, shipped only in the Gradescope zip
(``kit/release/gradescope.py``; the student release leaves this folder out).

``setup.sh`` builds the image, ``run_autograder`` runs ``python -m
autograder gradescope`` for every submission, ``requirements.txt`` pins
the venv; :mod:`autograder.gradescope.entry` grades the submission into
results.json.
"""
