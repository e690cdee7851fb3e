"""The course around the grades: what staff decide, kept as data.

After ``rubric`` has scored a submission, this stage reads the course
folder (``course/`` beside homework.toml: the late policy, the TAs'
question scores, adjustments, local submission times), checks it whole
against the batch (``course.load_course``), and makes each submission's
total (``totals``), which ``outputs`` writes beside the grades. The
Gradescope entry applies the same late policy (``results_policy``).
Nothing here runs student code or writes a staff file.
"""
