"""The services a caller trusts: by name, where they are, and the keys their tokens are signed with.

The caller binds each service name to its base URL and its verifier keys here, in its own
code (or the recovery daemon's ``--import``). Nothing a service returns, and nothing in the
log, chooses a URL: the compensation handler and the reconciler look the service up by name
and call only ``<base_url><prefix>/compensate`` and ``<base_url><prefix>/status/<key>``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from agent_saga.distributed._token import trusted_keys
from agent_saga.errors import ConfigurationError

__all__ = ["RemoteService", "add", "forget", "parse_service", "services", "tool_name", "trusted_service"]

_lock = threading.Lock()
_services: dict[str, RemoteService] = {}


def tool_name(service: str) -> str:
    """The name a remote step of ``service`` has in the caller's log (``http:<service>``)."""
    return f"http:{service}"


@dataclass(frozen=True, slots=True)
class RemoteService:
    """A service the caller trusts: ``name``, ``base_url`` (scheme://host[:port][/path]) and its keys."""

    name: str
    base_url: str
    keys: Mapping[str, bytes]
    prefix: str = "/_saga"
    timeout: float = 30.0

    @property
    def origin(self) -> tuple[str, str, int]:
        parts = urlsplit(self.base_url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        return parts.scheme, (parts.hostname or "").lower(), port

    @property
    def path(self) -> str:
        return urlsplit(self.base_url).path.rstrip("/")

    def serves(self, scheme: str, host: str, port: int, path: str) -> bool:
        """Whether a request to that URL goes to this service (same origin, under its base path)."""
        if (scheme, host.lower(), port) != self.origin:
            return False
        base = self.path
        return not base or path == base or path.startswith(base + "/")

    @property
    def compensate_url(self) -> str:
        return f"{self.base_url.rstrip('/')}{self.prefix}/compensate"

    def status_url(self, key: str) -> str:
        return f"{self.base_url.rstrip('/')}{self.prefix}/status/{key}"


def parse_service(
    name: str, base_url: str, keys: Iterable[str], *, prefix: str = "/_saga", timeout: float = 30.0
) -> RemoteService:
    """The :class:`RemoteService` those arguments describe; ConfigurationError saying which is wrong."""
    if not isinstance(name, str) or not name or any(c.isspace() or c in ":/" for c in name):
        raise ConfigurationError(f"trust_service: the name must be non-empty without spaces, ':' or '/', got {name!r}")
    parts = urlsplit(base_url) if isinstance(base_url, str) else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        raise ConfigurationError(
            f"trust_service({name!r}): base_url must be http(s)://host[:port][/path] without a query, got {base_url!r}"
        )
    if not isinstance(prefix, str) or not prefix.startswith("/") or prefix.endswith("/"):
        raise ConfigurationError(f"trust_service({name!r}): prefix must start and not end with '/', got {prefix!r}")
    if isinstance(keys, str):
        keys = [keys]
    try:
        parsed = trusted_keys(list(keys), f"trust_service({name!r}) keys")
    except ValueError as err:
        raise ConfigurationError(str(err)) from None
    if not parsed:
        raise ConfigurationError(f"trust_service({name!r}): give at least one verifier key for its tokens")
    return RemoteService(name, base_url.rstrip("/"), parsed, prefix, float(timeout))


def add(service: RemoteService) -> None:
    with _lock:
        _services[service.name] = service


def trusted_service(name: object) -> RemoteService:
    """The service trusted as ``name``; ConfigurationError naming what to do when there is none."""
    with _lock:
        service = _services.get(name) if isinstance(name, str) else None
    if service is None:
        raise ConfigurationError(
            f"no trusted service named {name!r} in this process: call trust_service(name, base_url, keys) "
            "in a module this process imports (the recovery daemon: --import it)"
        )
    return service


def services() -> list[RemoteService]:
    with _lock:
        return list(_services.values())


def forget() -> list[str]:
    """Trust no service; the names that were trusted."""
    with _lock:
        names = list(_services)
        _services.clear()
    return names
