"""The write-ahead log: record model, canonical codec, hash chain and its checker, backends."""

from agent_saga.log.base import WAL, BaseWAL, MemoryWAL
from agent_saga.log.chain import ChainUnverified, VerifyReport, verify_file
from agent_saga.log.codec import canonical, chain_hash, content_digest
from agent_saga.log.default import default_wal, set_default_wal
from agent_saga.log.file import FileWAL, TornTail, read_records
from agent_saga.log.group import LogOptions
from agent_saga.log.maintenance import compact, redact_record, redact_where
from agent_saga.log.postgres import PostgresWAL  # psycopg is imported when one is created
from agent_saga.log.records import GENESIS, HEADER_FIELDS, Record, RecordType
from agent_saga.log.redis import RedisWAL  # redis-py likewise
from agent_saga.log.resolve import open_log

__all__ = [
    "GENESIS",
    "HEADER_FIELDS",
    "WAL",
    "BaseWAL",
    "ChainUnverified",
    "FileWAL",
    "LogOptions",
    "MemoryWAL",
    "PostgresWAL",
    "Record",
    "RecordType",
    "RedisWAL",
    "TornTail",
    "VerifyReport",
    "canonical",
    "chain_hash",
    "compact",
    "content_digest",
    "default_wal",
    "open_log",
    "read_records",
    "redact_record",
    "redact_where",
    "set_default_wal",
    "verify_file",
]
