"""Stage 2 of the pipeline, the jail: run student code isolated and bounded.

``pool.Sandbox`` keeps warm workers; ``supervisor`` is the parent's side of
a run (timeouts, restarts, budgets); ``worker_jail`` the keeper and inmate
processes, jailed by ``jail`` (namespaces, Landlock, ``seccomp``,
``memlimit``); ``protocol`` and ``wire`` what crosses between them, with
bounds; ``preflight`` proves the jail works here (the canary) before any
score is written.
"""
