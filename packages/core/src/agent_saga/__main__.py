import sys

from agent_saga.cli.main import main

sys.exit(main())
