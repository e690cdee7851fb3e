"""``python -m autograder grade|check|gradescope``: see autograder/cli.py."""
import os
import sys

if __name__ == "__main__":
    # Re-execute with the clean environment before importing anything
    # heavy: importing autograder.cli imports torch, which the new process
    # would import again (autograder/sandbox/cleanenv.py).
    from autograder.sandbox import cleanenv, memlimit
    if not cleanenv.pending():
        # A grading command where the memory cannot hold the grader and
        # one worker: refused with the figures now, before torch is
        # loaded (later the kernel could kill the grader mid-batch,
        # printing nothing). autograder/sandbox/memlimit.py
        command = next((a for a in sys.argv[1:] if a[:1] != "-"), "")
        try:
            if command in ("grade", "check", "gradescope"):
                memlimit.check_room(grow_mb=memlimit.PARENT_MB)
        except memlimit.MemoryShortage as exc:
            print(f"error: {exc}", file=sys.stderr)
            sys.exit(2)
        cleanenv.reexec_clean(sys.argv[1:])   # returns only if impossible
    from autograder.homework import HomeworkError
    try:   # the profile is read as the grader's modules import
        from autograder.cli import main
    except HomeworkError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    status = main()
    # Skip the interpreter's teardown, about 0.4 s of CPU once torch is
    # imported: every output is written and closed, the fork server
    # stopped and the temporary folders removed by now.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
