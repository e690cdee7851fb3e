"""``python -m kit [--homework DIR] COMMAND``: see kit/cli.py."""
import sys

from kit.cli import main

if __name__ == "__main__":
    sys.exit(main())
