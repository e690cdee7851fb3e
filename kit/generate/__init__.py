"""Generators: the files built from the reference, the rubric, the cases
and the catalogue (skeleton, notebook, facts, shipped mistakes, frozen
values), and what they are built from."""
