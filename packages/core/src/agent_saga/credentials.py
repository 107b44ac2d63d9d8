"""Credential references: secrets travel as names and are resolved at the moment of use.

A compensation's kwargs are written to the log (fsync'd, kept, read by the recovery
daemon in another process), so a secret must never be one of them. Put a reference
there instead::

    Compensation(handler="stripe.refund",
                 kwargs={"charge_id": r["id"], "api_key": credential_ref("stripe_prod")})

and tell each process how to resolve names, once, from its own secret store::

    set_credential_resolver(lambda name: vault.read(f"agents/{name}"))

The engine (in the agent) and the recovery daemon replace each reference with the
resolved value just before calling the handler; the log, reports, the UI and error
messages only ever see the reference. :func:`assert_no_secrets` refuses, at authoring
time, a value that looks like a secret where a reference belongs.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator, Mapping
from math import isfinite
from typing import Any

from agent_saga.errors import CompensationRefused, ConfigurationError
from agent_saga.redaction import SCRUBBED, looks_secret, remember_secret, scrub_text

__all__ = [
    "REF_KEY",
    "CredentialError",
    "CredentialNameRefused",
    "assert_no_secrets",
    "credential_name",
    "credential_ref",
    "is_credential_ref",
    "plain_and_clean",
    "resolve_credentials",
    "scrub",
    "set_credential_resolver",
]

#: The single key of a reference's JSON form: ``{"$credential_ref": "stripe_prod"}``.
REF_KEY = "$credential_ref"

# Shapes of well-known secrets, for values that sit under an innocent-looking name. Every
# alternative is anchored at the start, so ``match`` (one attempt) is what is meant, not
# ``search`` (an attempt at every position of a long value).
_SECRET_VALUES = re.compile(
    r"^(sk|rk|pk)_(live|test)_[A-Za-z0-9]{8,}|^AKIA[0-9A-Z]{16}$|^(ghp|gho|ghs|github_pat)_[A-Za-z0-9_]{20,}"
    r"|^xox[abposr]-[A-Za-z0-9-]{10,}|^Bearer\s+\S{8,}|^-----BEGIN [A-Z ]*PRIVATE KEY-----"
)

# A credential's name is a name, not a path, a URL or a DSN: a reference comes from the log (the
# agent writes it) and a resolver often builds a path or a key from it (f"agents/{name}").
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}\Z")

_lock = threading.Lock()
_resolver: Callable[[str], Any] | None = None


class CredentialError(ConfigurationError):
    """A credential reference could not be resolved, or a secret was about to be logged."""


class CredentialNameRefused(CredentialError, CompensationRefused):
    """A credential reference whose name is not a plain name (a path, a URL, a DSN): never resolved."""


def credential_name(name: object) -> str:
    """``name`` if it can name a credential (1-128 letters, digits, ``_ . -``, no ``..``); else refused."""
    if not isinstance(name, str) or not _NAME.match(name) or ".." in name:
        shown = repr(name)[:80]
        raise CredentialNameRefused(
            f"credential reference {shown} is not a credential's name (1-128 letters, digits, '_', '.', '-'; "
            "no path, URL or connection string): it was not resolved. Name the credential; the resolver of the "
            "process that uses it decides what the name stands for"
        )
    return name


def credential_ref(name: str) -> dict[str, str]:
    """A reference to the credential called ``name``, safe to log (JSON)."""
    if not isinstance(name, str) or not name.strip():
        raise CredentialError(f"credential_ref needs a non-empty name, got {name!r}")
    return {REF_KEY: credential_name(name)}


def is_credential_ref(value: Any) -> bool:
    return isinstance(value, Mapping) and len(value) == 1 and isinstance(value.get(REF_KEY), str)


def set_credential_resolver(resolver: Callable[[str], Any] | None) -> None:
    """How this process turns a reference's name into the secret (None forgets it)."""
    global _resolver
    if resolver is not None and not callable(resolver):
        raise CredentialError(f"set_credential_resolver needs a callable name -> secret, got {resolver!r}")
    with _lock:
        _resolver = resolver


def _refs(value: Any) -> Iterator[str]:
    if is_credential_ref(value):
        yield value[REF_KEY]
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _refs(item)
    elif isinstance(value, list):
        for item in value:
            yield from _refs(item)


def resolve_credentials(kwargs: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """``kwargs`` with every reference resolved, and the resolved secrets (to scrub from errors).

    Kwargs without references come back as a plain copy, with no resolver needed. A
    reference with no resolver set, or one the resolver fails on, raises
    :class:`CredentialError` naming the reference, never a value.
    """
    names = [credential_name(name) for name in _refs(kwargs)]
    if not names:
        return dict(kwargs), []
    with _lock:
        resolver = _resolver
    if resolver is None:
        raise CredentialError(
            f"compensation needs credential(s) {sorted(set(names))} but no resolver is set in this process; "
            "call agent_saga.connectors.set_credential_resolver(fn) at start-up (in the daemon too)"
        )
    resolved: dict[str, Any] = {}
    for name in names:
        if name not in resolved:
            try:
                resolved[name] = resolver(name)
            except Exception as err:  # noqa: BLE001 - named, never echoed
                raise CredentialError(
                    f"the credential resolver failed for {name!r} ({type(err).__name__})"
                ) from None
    secrets = [str(v) for v in resolved.values() if v]
    for value in secrets:
        # Remembered for the life of the process: wherever it turns up later (a tool's
        # exception echoing it, a log line, a span), scrub_text replaces it.
        remember_secret(value)

    def swap(value: Any) -> Any:
        if is_credential_ref(value):
            return resolved[value[REF_KEY]]
        if isinstance(value, Mapping):
            return {k: swap(v) for k, v in value.items()}
        if isinstance(value, list):
            return [swap(v) for v in value]
        return value

    return {k: swap(v) for k, v in kwargs.items()}, secrets


def scrub(text: str, secrets: list[str]) -> str:
    """``text`` with ``secrets``, every remembered secret and every URL password replaced."""
    for secret in secrets:
        if len(secret) >= 4:
            text = text.replace(secret, SCRUBBED)
    return scrub_text(text)


def assert_no_secrets(value: Any, *, where: str = "value") -> None:
    """Raise :class:`CredentialError` if ``value`` holds something that looks like a secret.

    Checked: a secret-looking *name* (``api_key``, ``password``, ...) whose value is
    not a credential reference, and a value shaped like a well-known secret (a Stripe
    key, an AWS access key id, a GitHub or Slack token, a bearer token, a PEM private
    key) under any name. Call it where a value is about to become durable: the
    library calls it on every compensation's kwargs.
    """
    if type(value) is dict and plain_and_clean(value):
        return
    for path, name, item in _walk(value, where):
        if name is not None and looks_secret(name) and item not in (None, "") and not is_credential_ref(item) \
                and not isinstance(item, (Mapping, list)):
            raise CredentialError(
                f"{path} looks like a secret ({name!r}); pass credential_ref('<name>') instead and resolve it "
                "with set_credential_resolver(), so the secret never enters the log"
            )
        if isinstance(item, str) and _SECRET_VALUES.match(item):
            raise CredentialError(
                f"{path} holds a value shaped like a secret key or token; pass credential_ref('<name>') "
                "instead, so the secret never enters the log"
            )


def plain_and_clean(kwargs: dict[Any, Any]) -> bool:
    """True for the usual kwargs: str names, flat JSON scalars, nothing secret-looking.

    A fast yes for both checks a compensation's kwargs go through on every step:
    such kwargs pass :func:`assert_no_secrets` and survive a JSON round trip (str,
    int, bool, None, finite floats). Anything else (nesting, a reference, a suspect,
    a name that is not a str) is left to the full checks, which also word the error.
    """
    for name, item in kwargs.items():
        if type(name) is not str:
            return False
        kind = type(item)
        if kind is str:
            if item and (looks_secret(name) or _SECRET_VALUES.match(item)):
                return False
        elif kind is int or kind is bool:
            if looks_secret(name):
                return False
        elif kind is float:
            if not isfinite(item) or looks_secret(name):
                return False
        elif item is not None:
            return False
    return True


def _walk(value: Any, path: str, name: str | None = None) -> Iterator[tuple[str, str | None, Any]]:
    yield path, name, value
    if is_credential_ref(value):
        return
    if isinstance(value, Mapping):
        for key, item in value.items():
            yield from _walk(item, f"{path}[{key!r}]", str(key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _walk(item, f"{path}[{i}]", None)
