"""Staff tools, one folder per job: generate/ (every generated file, one
list), release/ (the student release, the Gradescope zip, the leak scan),
corpus/ (submissions made from the catalogue, and their verdicts),
machine/ (a fresh machine's quick start, benchmarks). At the top: the
catalogue's reader (variants.py) and what ships and runs by path
(install_deps.py, system_deps.py, student/)."""
