"""Offline mesh sagas: merge the logs devices wrote apart into one log every reader takes.

``merge(logs)`` is a G-Set CRDT over device records keyed by (device, seq, hash):
see ``agent_saga.mesh._merge`` for the rule and the merged log's format, and
``agent_saga.mesh._inputs`` for how each input is checked. A device is the hash of
its log's first record (seq 1): what its own chain commits to, never a file name.
"""

from agent_saga.log.parts import part_of, spanning_end
from agent_saga.mesh._inputs import FORMAT, MESH_FIELD, Exclusion, MeshError
from agent_saga.mesh._merge import DeviceHead, MeshResult, merge, short

__all__ = ["FORMAT", "MESH_FIELD", "DeviceHead", "Exclusion", "MeshError", "MeshResult", "merge", "part_of", "short", "spanning_end"]
