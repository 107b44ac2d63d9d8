# The 3.x line: `agent-saga` 0.x-2.x on the package index is an unrelated project with the same
# import name, so every distribution of ours pins agent-saga>=3.0.0,<4 and no resolver can
# pick that line. Adapters carry the same version: they are released together with this core.
__version__ = "3.0.0"
