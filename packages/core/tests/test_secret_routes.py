"""Secrets reach no record, exception, log line or repr by routes other than their name.

Issue 25, item 8. Each route below leaked on the main branch of the time: the key echoed
in a tool's exception text, a ``password`` in a list of dicts, a URL's userinfo, an
argument named ``pass``, a webhook URL's password. Each test asserts that the literal
secret appears in none of: the log file's bytes, ``str(SagaAborted)``, the library's
log lines, and (where there is one) the notifier's repr.
"""

from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from approval_support import Hook, gateway
from hypothesis import given
from hypothesis import strategies as st

from agent_saga import (
    FileApprovalStore,
    FileWAL,
    PreFlightGate,
    SagaAborted,
    WebhookNotifier,
    configure_logging,
    saga_scope,
)
from agent_saga.connectors import resolve_credential, set_credential_resolver
from agent_saga.redaction import REDACTED, looks_secret, redact_args


@pytest.fixture
def logged() -> Iterator[io.StringIO]:
    """The library's log lines, as configure_logging writes them."""
    out = io.StringIO()
    setup = configure_logging(stream=out, level=logging.DEBUG)
    yield out
    setup.close()


def _leaks(secret: str, wal: FileWAL, aborted: BaseException | None, lines: io.StringIO) -> list[str]:
    """Where ``secret`` turned up, by name of the place (empty: nowhere)."""
    wal.barrier()
    places = {
        "log file": wal.path.read_bytes().decode(),
        "SagaAborted": str(aborted) if aborted is not None else "",
        "log lines": lines.getvalue(),
    }
    return [where for where, text in places.items() if secret in text]


def _run(wal: FileWAL, forward: Any, args: dict[str, Any]) -> SagaAborted | None:
    try:
        with saga_scope(wal) as s:
            s.execute(tool="crm.update", forward=forward, semantics="IRREVERSIBLE", args=args)
    except SagaAborted as err:
        return err
    return None


def test_a_resolved_key_echoed_in_the_tools_exception_is_scrubbed(wal: FileWAL, logged: io.StringIO) -> None:
    key = "sk_live_RESOLVEDk3y0000111"
    set_credential_resolver(lambda name: key)
    try:
        def call() -> None:
            used = resolve_credential("stripe_prod")
            raise PermissionError(f"401 from the API: invalid key {used}")  # what many SDKs do

        aborted = _run(wal, call, {"customer": "cus_1"})
    finally:
        set_credential_resolver(None)
    assert aborted is not None and "401 from the API" in str(aborted)
    assert _leaks(key, wal, aborted, logged) == []
    assert "<redacted: credential>" in wal.path.read_text()  # the record says something was there


def test_a_key_passed_by_name_and_echoed_in_the_exception_is_scrubbed(wal: FileWAL, logged: io.StringIO) -> None:
    key = "key-BYNAME-9f8e7d6c5b"

    def call() -> None:
        raise ValueError(f"bad credentials: {key!r}")

    aborted = _run(wal, call, {"api_key": key, "account": "acct_1"})
    assert aborted is not None
    assert _leaks(key, wal, aborted, logged) == []


def test_a_password_inside_a_list_of_dicts_is_redacted(wal: FileWAL, logged: io.StringIO) -> None:
    password = "Hunter2-in-a-LIST"
    args = {"users": [{"name": "ann", "password": password}, {"name": "bob", "Pwd": "x" * 8}],
            "pairs": ({"token": "TOKEN-in-a-TUPLE-77"},)}
    aborted = _run(wal, lambda: "ok", args)
    assert aborted is None
    assert _leaks(password, wal, None, logged) == []
    assert _leaks("TOKEN-in-a-TUPLE-77", wal, None, logged) == []
    (intent,) = [r["body"] for r in wal.records() if r["type"] == "STEP_INTENT"]
    assert intent["args"]["users"] == [{"name": "ann", "password": REDACTED}, {"name": "bob", "Pwd": REDACTED}]


def test_url_userinfo_is_redacted_in_arguments_and_in_error_text(wal: FileWAL, logged: io.StringIO) -> None:
    in_args, in_error = "dsn-PASSWORD-a1b2", "err-PASSWORD-c3d4"

    def call() -> None:
        raise ConnectionError(f"could not connect to postgresql://admin:{in_error}@db.internal:5432/crm")

    aborted = _run(wal, call, {"dsn": f"postgresql://admin:{in_args}@db.internal/crm"})
    assert aborted is not None
    assert _leaks(in_args, wal, aborted, logged) == []
    assert _leaks(in_error, wal, aborted, logged) == []
    assert "postgresql://admin:<redacted: secret>@db.internal" in wal.path.read_text()  # host and user stay


def test_an_argument_named_pass_is_redacted(wal: FileWAL, logged: io.StringIO) -> None:
    aborted = _run(wal, lambda: "ok", {"user": "ann", "pass": "PASS-VALUE-31337", "db_pass": "DBPASS-4242"})
    assert aborted is None
    assert _leaks("PASS-VALUE-31337", wal, None, logged) == []
    assert _leaks("DBPASS-4242", wal, None, logged) == []


def test_a_webhook_urls_password_reaches_no_exception_denial_or_repr(
    wal: FileWAL, tmp_path: Path, logged: io.StringIO
) -> None:
    password = "HOOK-PASSWORD-5150"
    hook = Hook(status=500)
    try:
        url = hook.url.replace("http://", f"http://bot:{password}@")
        notifier = WebhookNotifier(url)
        gate = PreFlightGate(approval_provider=gateway(FileApprovalStore(tmp_path / "approvals"), notifier, wal))
        try:
            with saga_scope(wal, gate=gate) as s:
                s.execute(tool="wire.send", semantics="IRREVERSIBLE", forward=lambda: "sent", args={"amount": 80_000})
            aborted = None
        except SagaAborted as err:
            aborted = err
    finally:
        hook.close()
    assert aborted is not None and "HTTP 500" in str(aborted)
    assert _leaks(password, wal, aborted, logged) == []
    denied = [r["body"] for r in wal.records() if r["type"] == "APPROVAL_DENIED"]
    assert len(denied) == 1 and "HTTP 500" in denied[0]["note"] and password not in json.dumps(denied)
    assert password not in repr(notifier) and password not in repr(gate.approval_provider)
    assert "secret" not in repr(notifier)  # nor the token in the URL's path
    assert repr(notifier) == f"WebhookNotifier('http://127.0.0.1:{url.rsplit(':', 1)[1].split('/')[0]}')"


# -- the property -------------------------------------------------------------------------

_SECRET_NAMES = ["password", "pass", "pwd", "passwd", "secret", "token", "Authorization", "cookie", "Set-Cookie",
                 "api_key", "apikey", "api-key", "X-Api-Key", "access_key", "private_key", "client_secret",
                 "accessToken", "DB_PASSWORD"]
_INNOCENT_NAMES = ["amount", "name", "max_tokens", "tokenizer", "passenger", "credential_ref", "url", "items"]
# Every secret of an example carries a mark no other generated text has, so a leak is found by search.
_secrets = st.text("abcXYZ019-_.~", min_size=4, max_size=10).map(lambda s: f"\u00a7{s}")
_urls = st.builds(lambda scheme, user, pw, host: f"{scheme}://{user}:{pw}@{host}/p?q=1",
                  st.sampled_from(["https", "postgresql", "redis", "amqp+ssl"]), st.sampled_from(["", "u", "admin"]),
                  _secrets, st.sampled_from(["h", "db.internal:5432", "[::1]:80"]))
_plain = st.none() | st.integers() | st.text("abc xyz:/@", max_size=8) | _urls.map(lambda u: f"see {u} now")


def _dicts(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    # A secret value only under a secret name; anything under any name.
    item = st.tuples(st.sampled_from(_SECRET_NAMES), inner | _secrets) | st.tuples(
        st.sampled_from(_INNOCENT_NAMES), inner
    )
    return st.lists(item, max_size=4).map(dict)


def _tree(values: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.recursive(
        values, lambda inner: st.lists(inner, max_size=3) | st.tuples(inner) | _dicts(inner), max_leaves=15
    )


def _walk(value: Any) -> Iterator[tuple[str | None, Any]]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield key, item
            yield from _walk(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield None, item
            yield from _walk(item)


@given(_dicts(_tree(_plain | _urls)))
def test_redaction_leaves_no_recognised_name_value_and_no_url_password(args: dict[str, Any]) -> None:
    out = redact_args(args)
    for key, item in [(k, v) for k, v in out.items()] + list(_walk(out)):
        if key is not None and looks_secret(key):
            assert item == REDACTED, (key, item)
    text = json.dumps(out, ensure_ascii=False)
    for password in re.findall(r"://[^:/@\s]*:([^@\s/]*)@", text):
        assert password == REDACTED
    # The only secrets generated sit under a secret name or in a URL's password: none is left.
    assert "\u00a7" not in text, text
