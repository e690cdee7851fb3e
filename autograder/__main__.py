"""``python -m autograder grade|check|gradescope``: see autograder/cli.py."""
import sys

from autograder.cli import main

if __name__ == "__main__":
    sys.exit(main())
