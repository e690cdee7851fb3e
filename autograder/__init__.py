"""Isolated, rubric-driven autograder for the attention homework."""

# Staff tools that read a graded folder (class report, similarity, regrade
# diff, Gradescope export): neither the Gradescope image nor the student
# release ship them (kit/gradescope.py, kit/release.py), so their optional
# library (markdown-it, for the linked pages) is no dependency of the grader.
STAFF_ONLY = ("class_report.py", "similarity.py", "regrade.py",
              "gradescope_export.py")
