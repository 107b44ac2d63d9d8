"""Offline mesh sagas: merge the logs devices wrote apart into one log every reader takes.

``merge(logs)`` is a G-Set CRDT over device records keyed by (device, seq, hash):
see ``agent_saga.mesh._merge`` for the rule and the merged log's format, and
``agent_saga.mesh._inputs`` for how each input is checked. A device is the hash of
its log's first record (seq 1): what its own chain commits to, never a file name. A
device enrols with a key (``enrol``: its first record names the key) and signs its head
at each sync (``sign_head``); a hub takes a device's records only up to its last signed
head, and only from a key it trusts (``agent_saga.mesh._keys``).
"""

from typing import TYPE_CHECKING

from agent_saga._migrating import gone_names
from agent_saga.log.parts import part_of, spanning_end
from agent_saga.mesh._inputs import FORMAT, MESH_FIELD, Exclusion, MeshError
from agent_saga.mesh._keys import DEVICE_KEYS, device_keys_path, enrol, sign_head
from agent_saga.mesh._merge import DeviceHead, MeshResult, merge, short

__all__ = [
    "DEVICE_KEYS", "FORMAT", "MESH_FIELD", "DeviceHead", "Exclusion", "MeshError", "MeshResult", "device_keys_path",
    "enrol", "merge", "part_of", "short", "sign_head", "spanning_end",
]

if not TYPE_CHECKING:  # at run time only: mypy still refuses a name this module lacks
    __getattr__ = gone_names(__name__)  # a 2.x name of this module says what 3.x has instead
