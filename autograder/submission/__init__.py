"""Stage 1 of the pipeline: what was handed in.

``locate`` finds the student's ``modeling_attention.py`` in a folder, zip or
Gradescope upload; ``regions`` maps the source to its TODO regions, task
methods and helpers; ``answers`` reads the notebook's inline answers.
"""
