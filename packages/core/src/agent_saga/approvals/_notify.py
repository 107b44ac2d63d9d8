"""Telling people a request is waiting: ConsoleNotifier and WebhookNotifier.

A notifier only tells; the answer comes back through the store (the CLI, or a
web process that received the chat button click), never through a connection
into the agent. ``notify`` returns when the message was delivered and raises
``NotificationFailed`` otherwise, which denies the request: nobody was asked.

The text a person reads (:meth:`Notification.text`, the console line, a webhook's
``text``) shows every agent-written field through :func:`agent_saga.inert.inert`,
and the action digest the approver's signature will cover. The webhook's
``agent_saga`` object is data for a program (raw values, so it can recompute the
digest); whatever shows it to a person must render it inertly too.
"""

from __future__ import annotations

import base64
import json
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any, Protocol, TextIO, runtime_checkable

from agent_saga.approvals._authority import action_digest
from agent_saga.approvals._entry import SHORT_ID, ApprovalEntry
from agent_saga.approvals._errors import NotificationFailed
from agent_saga.approvals._passkey import passkey_digest
from agent_saga.errors import ConfigurationError
from agent_saga.inert import inert, inert_value
from agent_saga.redaction import remember_secret, scrub_text

__all__ = ["ConsoleNotifier", "Notification", "Notifier", "WebhookNotifier"]


@dataclass(frozen=True, slots=True)
class Notification:
    """One message: a new request (level 0) or an escalation to a later level."""

    entry: ApprovalEntry
    level: int
    targets: tuple[str, ...]

    @property
    def kind(self) -> str:
        return "requested" if self.level == 0 else "escalated"

    def text(self, now: float | None = None) -> str:
        e = self.entry
        left = max(0.0, e.deadline - (time.time() if now is None else now))
        args = ", ".join(f"{inert(k)}: {inert_value(v)}" for k, v in sorted(e.args.items())) or "no arguments"
        head = inert(" ".join(self.targets))
        again = f" (escalated, level {self.level + 1})" if self.level else ""
        short = inert(e.id[:SHORT_ID])
        if e.passkey_required:
            how = (f"approving needs a passkey and signs action sha256:{self.digest} (this request, its arguments, "
                   "rule and deadline)\n"
                   f"approve on the page `agent-saga approvals serve` opens   (or: agent-saga approvals deny {short} "
                   "--approver WHO --note WHY)")
        else:
            how = (f"approving signs action sha256:{self.digest} (this request, its reason and arguments)\n"
                   f"agent-saga approvals approve {short} --approver WHO --note WHY   (or: deny {short} ...)")
        return (
            f"{head} approval needed{again}: {inert(e.tool)} -- {inert(e.reason)} (rule {inert(e.rule)})\n"
            f"saga {inert(e.saga_id)} step {e.step}; {args}; expires in {left:.0f}s, then it is denied\n"
            + how
        )

    @property
    def digest(self) -> str:
        """The action digest an approval signs: the passkey's challenge where one is required (the page
        shows the same), else the one a key signs (``approvals list`` shows the same)."""
        e = self.entry
        return passkey_digest(e, e.deadline) if e.passkey_required else action_digest(e)

    def payload(self) -> dict[str, Any]:
        e = self.entry
        return {
            "text": self.text(),
            "agent_saga": {
                "event": self.kind, "request": e.id, "level": self.level, "targets": list(self.targets),
                "saga": e.saga_id, "step": e.step, "tool": e.tool, "rule": e.rule, "reason": e.reason,
                "args": e.args, "deadline": e.deadline, "action": self.digest,
                "passkey_required": e.passkey_required,
            },
        }


@runtime_checkable
class Notifier(Protocol):
    def notify(self, notification: Notification) -> None: ...


class ConsoleNotifier:
    """Writes each request to a stream (stderr by default): for a person at the terminal, or tests."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream

    def notify(self, notification: Notification) -> None:
        out = self.stream if self.stream is not None else sys.stderr
        try:
            print(notification.text(), file=out, flush=True)
        except (OSError, ValueError) as err:  # a closed stream is a delivery failure too
            raise NotificationFailed(f"could not write the request to {out!r}: {err}") from err

    def __repr__(self) -> str:
        return "ConsoleNotifier()"


class WebhookNotifier:
    """POSTs a Slack-style JSON message (``{"text": ...}`` plus the request's fields) to ``url``.

    Only a 2xx answer counts as delivered; any other status, a connection error
    or a timeout raises ``NotificationFailed`` (and so denies the request).
    """

    def __init__(self, url: str, *, timeout: float = 5.0, headers: dict[str, str] | None = None) -> None:
        parsed = urllib.parse.urlsplit(url) if isinstance(url, str) else None
        if parsed is None or parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ConfigurationError(
                f"WebhookNotifier needs an http(s) URL such as https://hooks.slack.com/services/..., got {url!r}"
            )
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
            raise ConfigurationError(f"timeout= must be a positive number of seconds, got {timeout!r}")
        self.url = url
        self.timeout = float(timeout)
        self.headers = dict(headers or {})
        # urllib cannot send a URL's userinfo: it goes as Basic auth, and the URL requested
        # (the one an error could quote) has none.
        self._target = url
        if parsed.username is not None or parsed.password is not None:
            self._target = urllib.parse.urlunsplit(parsed._replace(netloc=parsed.netloc.rpartition("@")[2]))
            if not any(k.lower() == "authorization" for k in self.headers):
                pair = f"{urllib.parse.unquote(parsed.username or '')}:{urllib.parse.unquote(parsed.password or '')}"
                self.headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
        # The webhook URL is a credential (anyone holding it can post): never print it whole.
        # Shown as scheme://host[:port] only: no userinfo (its password), no path (its token).
        host = parsed.hostname or ""
        if ":" in host:
            host = f"[{host}]"
        try:
            port = parsed.port
        except ValueError:
            port = None
        self._shown = f"{parsed.scheme}://{host}" + (f":{port}" if port is not None else "")
        remember_secret(parsed.password or "")

    def notify(self, notification: Notification) -> None:
        body = json.dumps(notification.payload()).encode()
        request = urllib.request.Request(
            self._target, data=body, method="POST",
            headers={"Content-Type": "application/json", **self.headers},
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as answer:
                status = answer.status
        except urllib.error.HTTPError as err:
            err.close()
            raise NotificationFailed(f"webhook {self._shown} answered HTTP {err.code}") from None
        except (urllib.error.URLError, OSError, ValueError) as err:
            reason = scrub_text(str(getattr(err, "reason", err))).replace(self._target, self._shown)
            raise NotificationFailed(f"webhook {self._shown} unreachable: {reason}") from None
        if not 200 <= status < 300:
            raise NotificationFailed(f"webhook {self._shown} answered HTTP {status}")

    def __repr__(self) -> str:
        return f"WebhookNotifier({self._shown!r})"
