"""The last stage: a graded submission in words and files.

``results`` writes Gradescope's results.json, feedback.md and the score
lines; ``layout`` says where a graded folder keeps what. Student text
reaches Markdown, HTML and CSV through ``autograder.text``.
"""
