"""Student text as data, for every stage: ``mdsafe`` for Markdown and
HTML, ``csvsafe`` for CSV cells. The one seam through which text the
grader did not write reaches a page or a spreadsheet."""
