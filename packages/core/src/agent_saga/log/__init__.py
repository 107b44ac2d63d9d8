"""The write-ahead log: record model, canonical codec, hash chain and its checker, backends."""

from agent_saga.log.base import WAL, MemoryWAL
from agent_saga.log.chain import ChainUnverified, VerifyReport, verify_file
from agent_saga.log.codec import canonical, chain_hash, content_digest
from agent_saga.log.default import default_wal, set_default_wal
from agent_saga.log.file import FileWAL, TornTail, read_records
from agent_saga.log.records import GENESIS, HEADER_FIELDS, Record, RecordType

__all__ = [
    "GENESIS",
    "HEADER_FIELDS",
    "WAL",
    "ChainUnverified",
    "FileWAL",
    "MemoryWAL",
    "Record",
    "RecordType",
    "TornTail",
    "VerifyReport",
    "canonical",
    "chain_hash",
    "content_digest",
    "default_wal",
    "read_records",
    "set_default_wal",
    "verify_file",
]
