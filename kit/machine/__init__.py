"""The kit on a machine: a fresh Debian's quick start and the benchmarks.
(kit/install_deps.py and kit/system_deps.py stay at kit/'s top: they ship
in the releases and are run by path.)"""
