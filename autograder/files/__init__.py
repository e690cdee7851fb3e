"""Files, for every stage (the lowest floor: it imports no other part of
the grader): ``atomic`` writes each file whole or not at all,
``user_files`` opens a path a user named only once it is known to be a
regular file."""
