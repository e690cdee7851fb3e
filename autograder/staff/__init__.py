"""Staff tools that read a graded folder: the class report, similarity,
the regrade diff and Gradescope's export.

Neither the Gradescope image nor the student release ships this folder
(kit/release/gradescope.py, kit/release/student.py): it is decided by the
folder, not by a list of names, so their optional library (markdown-it) is
no dependency of the grader.
"""
