"""``python -m agent_saga.ui --wal-path P``: the same as ``agent-saga ui``."""

import sys

from agent_saga.cli.main import main

if __name__ == "__main__":
    sys.exit(main(["ui", *sys.argv[1:]]))
