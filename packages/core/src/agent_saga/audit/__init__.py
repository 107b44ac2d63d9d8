"""Audit tools over the hash-chained log: verify, export, certify, Merkle disclosure.

See docs/AUDIT.md. Redaction and compaction, which rewrite a log, live with the
log itself (``agent_saga.log.maintenance``) and keep everything here verifiable.
"""

from agent_saga.audit._certify import Certificate, Unaccounted, certify, certify_log
from agent_saga.audit._disclosure import (
    DisclosureProof,
    DisclosureVerdict,
    audit_root,
    build_disclosure,
    verify_disclosure,
)
from agent_saga.audit._export import ChainBroken, ExportResult, export_bundle
from agent_saga.audit._verify import VERIFICATION_RULE, VerifyReport, verify_log, verify_records

__all__ = [
    "VERIFICATION_RULE",
    "Certificate",
    "ChainBroken",
    "DisclosureProof",
    "DisclosureVerdict",
    "ExportResult",
    "Unaccounted",
    "VerifyReport",
    "audit_root",
    "build_disclosure",
    "certify",
    "certify_log",
    "export_bundle",
    "verify_disclosure",
    "verify_log",
    "verify_records",
]
