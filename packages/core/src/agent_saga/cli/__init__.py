"""The ``agent-saga`` command. Each verb lives in its own module and registers itself."""
