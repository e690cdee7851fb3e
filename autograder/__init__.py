"""Isolated, rubric-driven autograder for any homework (its homework.toml).

The pipeline, one folder per stage: ``submission/`` (what was handed in)
→ ``sandbox/`` (the jail that runs it) → ``probes`` (what to ask of it) →
``checks/`` (judging each answer) → ``rubric`` (points) → ``report/``
(files and words). ``grade`` runs the stages for one submission, ``batch``
for many, ``graded_folder`` writes a batch's folder for the staff, ``cli``
parses commands; ``gradescope/`` is Gradescope's entry and ``staff/`` the
tools that read a graded folder.

What ships is decided by folder: ``staff/`` ships nowhere (only the kit has
it), ``gradescope/`` only in the Gradescope image.
"""

STAFF_PACKAGE = "staff"            # kit only: never in a zip
GRADESCOPE_PACKAGE = "gradescope"  # the Gradescope image only
