"""ApprovalGateway: the gate's approval provider, backed by a shared store and the log.

For one request it (1) creates the request in the store, or finds the one a
previous attempt created (the id is derived from saga, step, tool and rule);
(2) writes APPROVAL_REQUESTED to the log and waits for it to be durable;
(3) notifies the first level; then (4) polls the store until someone decides,
notifying each later level when its delay has passed (APPROVAL_ESCALATED, once
per level) and expiring the request at its deadline. A grant counts only if it
is signed by a trusted approver key over this request and the step's own
arguments (:mod:`agent_saga.approvals._authority`): the agent can write the store,
so an unsigned or mis-signed grant is denied and recorded as such. Under a policy
that requires a passkey (``require_passkey``), a grant counts only with a person's
WebAuthn assertion over this request's action, verified against a registered
passkey (:mod:`agent_saga.approvals._passkey`); the count it reported goes into the
grant's record, which is where the next check finds it. A passkey *denial* is
checked the same way against the denial's own challenge: verified, it is that
person's final denial; not verified, the step is refused all the same, as a
denial by nobody. The decision is written to the log before the gate hears it.

The agent can write the store, so two things are taken from the saga's log, which
it cannot rewrite without breaking the chain: the deadline (the one the first
APPROVAL_REQUESTED record states; editing the store's does not move it), and a
refusal for good (a person's APPROVAL_DENIED, or APPROVAL_EXPIRED, for this
request id: deleting or resetting the store entry does not get the person asked
again). Before anything else, the gateway reads the log for both.

Every failure denies: an unreachable store, a notification that did not go out,
a request that vanished, the deadline, a grant that is not authenticated. The wait is written once, as a generator
of the engine's operations (``engine.invoke``), and run by its blocking driver or
its awaiting one (which keeps store and webhook I/O off the event loop).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from agent_saga.approvals._approval_policy import ApprovalPolicy
from agent_saga.approvals._authority import TrustedKeys, default_trust_path, require_crypto
from agent_saga.approvals._entry import ApprovalEntry, Status, new_entry
from agent_saga.approvals._errors import (
    ApprovalError,
    ApprovalExpired,
    ApprovalNotAuthenticated,
    ApprovalNotFound,
    ApprovalUnavailable,
)
from agent_saga.approvals._evidence import (
    Remembered,
    decision_body,
    decision_type,
    escalation_body,
    iso,
    log_key,
    mark_logged,
    remembered,
    request_body,
)
from agent_saga.approvals._notify import ConsoleNotifier, Notification, Notifier
from agent_saga.approvals._passkey import (
    PasskeyCredentials,
    PasskeyHistory,
    default_passkeys_path,
    passkey_challenge,
    passkey_denial_challenge,
    passkey_digest,
    passkey_history,
    require_webauthn,
    verify_assertion,
)
from agent_saga.approvals._store import ApprovalStore, FileApprovalStore
from agent_saga.engine.invoke import Barrier, Call, Protocol, Sleep, drive_async, drive_sync
from agent_saga.errors import ConfigurationError
from agent_saga.gate import ApprovalDecision, ApprovalRequest, StoreUnavailable
from agent_saga.log.base import WAL
from agent_saga.log.default import default_wal, log_argument
from agent_saga.log.records import RecordType
from agent_saga.redaction import scrub_text

__all__ = ["CLAIM_GRACE", "ApprovalGateway"]

#: How long a gateway lets a decider (the CLI with --wal-path) finish writing the
#: decision into the same log before writing it itself: a decider that died
#: must not leave the log without the decision.
CLAIM_GRACE = 10.0
_MIN_SLEEP = 0.005


class ApprovalGateway:
    """A durable approval provider for ``PreFlightGate(approval_provider=...)``.

    ``store``: where requests and decisions live (default: ``FileApprovalStore()``);
    ``notifier``: how people hear of a request (default: ``ConsoleNotifier()``);
    ``wal``: the log the approval records go to (default: ``default_wal()`` at
    each request -- give the saga's own log); ``policy``: the mandatory deadline
    and the escalation chain; ``trusted_keys``: whose signatures make a grant
    count -- a :class:`TrustedKeys`, or the path of a key list (default: the
    host's ``/etc/agent-saga/approver-keys``, re-read at each decision);
    ``passkeys``: the registered passkeys a passkey grant is checked against -- a
    :class:`PasskeyCredentials`, or the path of the list (default: the host's
    ``/etc/agent-saga/approver-passkeys``, re-read at each decision).
    """

    def __init__(
        self,
        *,
        store: ApprovalStore | None = None,
        notifier: Notifier | None = None,
        wal: WAL | str | os.PathLike[str] | None = None,
        policy: ApprovalPolicy,
        trusted_keys: TrustedKeys | str | os.PathLike[str] | None = None,
        passkeys: PasskeyCredentials | str | os.PathLike[str] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        require_crypto()  # a gateway that cannot check a signature must not start
        if not isinstance(policy, ApprovalPolicy):
            raise ConfigurationError(
                "policy= must be an ApprovalPolicy with a deadline, e.g. ApprovalPolicy(timeout=900), "
                f"got {policy!r}"
            )
        self.store: ApprovalStore = store if store is not None else FileApprovalStore()
        if not isinstance(self.store, ApprovalStore):
            raise ConfigurationError(
                f"store= must be an approval store (FileApprovalStore, RedisApprovalStore), got {store!r}"
            )
        self.notifier: Notifier = notifier if notifier is not None else ConsoleNotifier()
        if not isinstance(self.notifier, Notifier):
            raise ConfigurationError(f"notifier= must have a notify(notification) method, got {notifier!r}")
        self.wal = log_argument(wal)  # a log, or a path or URL as --wal-path takes it
        if trusted_keys is not None and not isinstance(trusted_keys, (TrustedKeys, str, os.PathLike)):
            raise ConfigurationError(
                f"trusted_keys= must be TrustedKeys or the path of a key list, got {trusted_keys!r}"
            )
        self.trusted_keys = trusted_keys
        if passkeys is not None and not isinstance(passkeys, (PasskeyCredentials, str, os.PathLike)):
            raise ConfigurationError(
                f"passkeys= must be PasskeyCredentials or the path of a passkey list, got {passkeys!r}"
            )
        if policy.require_passkey:
            require_webauthn()  # a gateway that cannot check a passkey must not start
        self.passkeys = passkeys
        self.policy = policy
        self.clock = clock
        self._levels = tuple((lvl.targets, lvl.after_seconds) for lvl in policy.levels)

    # -- ApprovalProvider ---------------------------------------------------------------

    def request_approval(self, request: ApprovalRequest) -> ApprovalDecision:
        return drive_sync(self._flow(request))

    async def request_approval_async(self, request: ApprovalRequest) -> ApprovalDecision:
        return await drive_async(self._flow(request))

    # -- the wait, written once -------------------------------------------------------

    def _flow(self, request: ApprovalRequest) -> Protocol[ApprovalDecision]:
        wal = self.wal if self.wal is not None else default_wal()
        store = self.store
        fresh = new_entry(request, self.clock(), self.policy.timeout, self._levels)
        if self.policy.needs_passkey(fresh.rule):
            fresh = fresh.replace(passkey_required=True)  # what the notice and `approvals approve` go by
        entry = fresh
        # What the log already says about this request; the store is the agent's to edit.
        past: Remembered = yield Call(partial(_read_log, wal, fresh.saga_id, fresh.id), {})
        if past.refusal is not None:
            return _refused_before(past, fresh)
        try:
            entry, created = yield Call(partial(store.create, fresh), {})
            # Never later than the log says, nor than this gateway's own clock allows.
            deadline = past.deadline if past.deadline is not None else min(entry.deadline, fresh.deadline)
            if past.deadline is None and self.policy.needs_passkey(fresh.rule):
                # A passkey signs the deadline: this gateway's own, so that an assertion made for an
                # earlier run of the same request (a store entry this log never asked for) is another
                # challenge. A pending entry is re-dated so the person is shown what will be checked.
                deadline = fresh.deadline
                entry = yield Call(partial(store.update, fresh.id, _redate(deadline)), {})
            # In the log, durably, before anyone is told: a crash after this point
            # cannot strand an approver's answer, and a restart finds the request.
            entry = yield from self._log_once(wal, entry, "requested", RecordType.APPROVAL_REQUESTED,
                                              self._request_body(entry, fresh, deadline))
            resumed = not created
            while True:
                if entry.decided:
                    decision = yield from self._conclude(wal, entry, fresh, deadline)
                    if decision is not None:
                        return decision
                else:
                    now = self.clock()
                    if now >= deadline:
                        entry = yield Call(partial(store.update, fresh.id, _expire(now, deadline)), {})
                        if not entry.decided:  # the store will not say so: the deadline stands anyway
                            entry = _expired(entry, now, deadline)
                        continue
                    entry = yield from self._announce(wal, entry, now, resumed, deadline)
                    if entry.decided:
                        continue
                yield Sleep(self._pause(entry, deadline))
                seen = yield Call(partial(store.get, fresh.id), {})
                if seen is None:
                    raise ApprovalNotFound(f"request {fresh.id} disappeared from the approval store {store.location}")
                entry = seen
        except (StoreUnavailable, ApprovalNotFound) as err:
            reason = scrub_text(f"approval store {store.location} failed: {err}")
            yield from self._log_system_denial(wal, entry, reason)
            raise ApprovalUnavailable(f"{reason} -- denied, since a decision that cannot be read was not given") from err

    def _pause(self, entry: ApprovalEntry, deadline: float) -> float:
        now = self.clock()
        upcoming = [deadline] + [
            entry.created_at + after for i, (_, after) in enumerate(entry.levels) if i not in entry.notified
        ]
        soonest = min(t for t in upcoming if t > now) if any(t > now for t in upcoming) else now
        return max(_MIN_SLEEP, min(self.policy.poll_interval, soonest - now))

    def _announce(self, wal: WAL, entry: ApprovalEntry, now: float, resumed: bool,
                  deadline: float) -> Protocol[ApprovalEntry]:
        """Ask every level whose time has come and that nobody has asked yet."""
        store, rid = self.store, entry.id
        for level, (targets, after) in enumerate(entry.levels):
            if now < entry.created_at + after:
                break
            if level in entry.notified:
                continue
            if level not in entry.escalated:
                claim = _Claim(level)
                entry = yield Call(partial(store.update, rid, claim), {})
                if not claim.won:
                    continue  # another process took this level's turn
            elif not resumed:
                continue  # claimed by another live caller, who is telling them
            # else: claimed by an earlier attempt that died before it told anyone: tell them now
            if entry.decided:
                break
            if level > 0:
                entry = yield from self._log_once(wal, entry, f"escalated:{level}", RecordType.APPROVAL_ESCALATED,
                                                  escalation_body(entry, level))
            # People are told the deadline the gateway holds to, not the store's (the agent's to edit).
            notice = Notification(entry.replace(deadline=deadline), level, targets)
            try:
                yield Call(partial(self.notifier.notify, notice), {})
            except Exception as err:  # noqa: BLE001 - any failure to tell a person denies
                # Nobody was asked, so nobody can say yes: deny, and say why.
                # The reason becomes the denial's note (APPROVAL_DENIED, the exception): scrubbed.
                why = scrub_text(f"notifying level {level + 1} ({', '.join(targets)}) failed: {err}")
                entry = yield Call(partial(store.update, rid, _deny_system(self.clock(), why)), {})
                break
            entry = yield Call(partial(store.update, rid, _notified(level)), {})
        return entry

    def _log_once(self, wal: WAL, entry: ApprovalEntry, event: str, rtype: RecordType,
                  body: dict[str, Any]) -> Protocol[ApprovalEntry]:
        key = log_key(event, wal)
        if key in entry.logged:
            return entry
        yield Barrier(wal, wal.append(rtype.value, entry.saga_id, body, entry.step))
        updated: ApprovalEntry = yield Call(partial(self.store.update, entry.id, mark_logged(key)), {})
        return updated

    def _request_body(self, entry: ApprovalEntry, asked: ApprovalEntry, deadline: float) -> dict[str, Any]:
        body = request_body(entry.replace(deadline=deadline), self.store.location, self._trust_source())
        if self.policy.needs_passkey(asked.rule):
            # The challenge a passkey must sign: the gateway's own copy of the action, its deadline.
            body["passkey"] = {"required": True, "challenge": passkey_digest(asked, deadline),
                               "registered": self._trust_source(self.passkeys, default_passkeys_path())}
        return body

    def _trust_source(self, trusted: object = None, default: Path | None = None) -> dict[str, Any]:
        """Which keys this gateway trusts, and whether this process could add one (then they prove little)."""
        if default is None:
            trusted, default = self.trusted_keys, default_trust_path()
        if isinstance(trusted, (TrustedKeys, PasskeyCredentials)):
            return {"location": trusted.location, "writable_by_agent": None}
        path = Path(trusted) if isinstance(trusted, (str, os.PathLike)) else default
        target = path if path.exists() else path.parent
        return {"location": str(path), "writable_by_agent": os.access(target, os.W_OK)}

    def _authenticate(self, entry: ApprovalEntry, asked: ApprovalEntry) -> str | None:
        """Why the grant ``entry`` cannot be believed for the request ``asked``, or None if it can."""
        trusted = self.trusted_keys
        try:
            keys = trusted if isinstance(trusted, TrustedKeys) else TrustedKeys.load(trusted)
            keys.verify(entry, asked)
        except ApprovalNotAuthenticated as err:
            why = str(err)
        except ConfigurationError as err:
            why = f"the trusted approver keys cannot be used ({err})"
        else:
            return None
        return (f"request {entry.id[:8]}: the store says {entry.status.value} by {entry.approver!r}, but the "
                f"decision is not authenticated: {why}; denied")

    def _passkey(self, wal: WAL, entry: ApprovalEntry, asked: ApprovalEntry,
                 deadline: float) -> Protocol[tuple[ApprovalEntry, dict[str, Any], bool]]:
        """The passkey decision ``entry`` (a grant, or a denial) checked for the request ``asked``: the
        entry as its credential names the approver, what the record says of the passkey, and whether
        this log holds it already. A denial is checked against the denial's own challenge."""
        short = entry.id[:8]
        deny = entry.status is Status.DENIED
        why: str | None = None
        history = PasskeyHistory({}, {})
        if entry.passkey is None:
            why = (f"the policy requires a passkey for rule {asked.rule!r}, but the grant by {entry.approver!r} "
                   "carries none (a key-signed or break-glass grant does not count here)")
        else:
            history = yield Call(partial(_read_passkeys, wal), {})
            try:
                check = verify_assertion(self._registered(), entry.passkey, asked, deadline, history,
                                         deny=deny, note=entry.note)
            except ApprovalNotAuthenticated as err:
                why = str(err)
            except ConfigurationError as err:
                why = f"the registered passkeys cannot be used ({err})"
        if why is not None:
            # A denial that does not verify still refuses the step (fail safe), but as a denial by
            # nobody: not final, since no person is proven to have said no.
            outcome = "refused as a denial by nobody (not final)" if deny else "denied"
            why = scrub_text(f"request {short}: the store says {entry.status.value} by {entry.approver!r}, but "
                             f"the decision is not authenticated: {why}; {outcome}")
            # Recorded as a denial by nobody; the store entry is left as it is, as evidence.
            yield from self._log_system_denial(wal, entry, why)
            raise ApprovalNotAuthenticated(why)
        challenge = (passkey_denial_challenge(asked, deadline, entry.note) if deny
                     else passkey_challenge(asked, deadline))
        record = check.record(challenge)
        # The approver is the registered credential's, whatever name the store gives.
        return (entry.replace(approver=check.credential.approver, signer=None),
                record, history.accepted.get(check.assertion) == entry.id)

    def _registered(self) -> PasskeyCredentials:
        given = self.passkeys
        return given if isinstance(given, PasskeyCredentials) else PasskeyCredentials.load(given)

    def _conclude(self, wal: WAL, entry: ApprovalEntry, asked: ApprovalEntry,
                  deadline: float) -> Protocol[ApprovalDecision | None]:
        """Make the decision durable in this log, then hand it to the gate (None: not yet)."""
        passkey: dict[str, Any] | None = None
        in_log = False
        if entry.granted and (entry.passkey is not None or self.policy.needs_passkey(asked.rule)):
            entry, passkey, in_log = yield from self._passkey(wal, entry, asked, deadline)
        elif entry.status is Status.DENIED and entry.passkey is not None:
            # A passkey denial (``approvals serve``'s Deny): final only if a registered passkey signed
            # this denial; a denial without one (``approvals deny``) is taken as it always was.
            entry, passkey, in_log = yield from self._passkey(wal, entry, asked, deadline)
        elif entry.granted:
            forged = self._authenticate(entry, asked)
            if forged is not None:
                # Recorded as a denial by nobody; the store entry is left as it is, as evidence.
                yield from self._log_system_denial(wal, entry, forged)
                raise ApprovalNotAuthenticated(forged)
        if entry.granted and (entry.decided_at is None or entry.decided_at > deadline):
            # Signed after the deadline the log states (a store whose deadline was moved
            # shows a person more time than the request has): too late to count.
            late = (f"request {entry.id[:8]}: granted by {entry.approver!r} after its deadline "
                    f"{iso(deadline)}; expiry denies")
            yield from self._log_system_denial(wal, entry, late)
            raise ApprovalExpired(late)
        key = log_key("decided", wal)
        if passkey is not None:
            # The log, not the store's "logged" mark, says whether this grant's record (and the
            # count it carries, which the next check reads) is there: the agent can write the mark.
            if not in_log:
                body = {**decision_body(entry, "gateway"), "passkey": passkey}
                yield Barrier(wal, wal.append(decision_type(entry).value, entry.saga_id, body, entry.step))
        elif key not in entry.logged:
            claimed = entry.claims.get(key)
            if claimed is not None and self.clock() - claimed < CLAIM_GRACE:
                return None  # the decider is writing this very record into this log
            yield Barrier(wal, wal.append(decision_type(entry).value, entry.saga_id,
                                           decision_body(entry, "gateway"), entry.step))
            try:
                yield Call(partial(self.store.update, entry.id, mark_logged(key)), {})
            except (StoreUnavailable, ApprovalError):
                pass  # the record is durable; forgetting that costs a duplicate record later, not a missing one
        if entry.granted:
            return ApprovalDecision(True, entry.approver, entry.note)
        if entry.status is Status.EXPIRED:
            raise ApprovalExpired(f"request {entry.id[:8]} for {entry.tool!r}: {entry.note}; expiry denies")
        if entry.approver is None:
            raise ApprovalUnavailable(entry.note)
        return ApprovalDecision(False, entry.approver, entry.note)

    def _log_system_denial(self, wal: WAL, entry: ApprovalEntry, reason: str) -> Protocol[None]:
        now = self.clock()
        denied = entry.replace(status=Status.DENIED, approver=None, note=reason, decided_at=now,
                               decided_via="agent-saga", signer=None)
        yield Barrier(wal, wal.append(RecordType.APPROVAL_DENIED.value, entry.saga_id,
                                       decision_body(denied, "gateway"), entry.step))

    def __repr__(self) -> str:
        return (f"ApprovalGateway(store={self.store!r}, notifier={self.notifier!r}, "
                f"timeout={self.policy.timeout:g}s, levels={len(self.policy.levels)})")


class _Claim:
    """A store change taking one level's turn; ``won`` says whether this caller took it."""

    def __init__(self, level: int) -> None:
        self.level = level
        self.won = False

    def __call__(self, entry: ApprovalEntry) -> ApprovalEntry:
        # Reset on every call: an optimistic store may run the change more than once.
        self.won = False
        if entry.decided or self.level in entry.escalated:
            return entry
        self.won = True
        return entry.replace(escalated=(*entry.escalated, self.level))


def _notified(level: int) -> Callable[[ApprovalEntry], ApprovalEntry]:
    def change(entry: ApprovalEntry) -> ApprovalEntry:
        return entry if level in entry.notified else entry.replace(notified=(*entry.notified, level))

    return change


def _expire(now: float, deadline: float) -> Callable[[ApprovalEntry], ApprovalEntry]:
    """Expire the entry at ``deadline`` (the gateway's, whatever the entry's own field says)."""

    def change(entry: ApprovalEntry) -> ApprovalEntry:
        if entry.decided or now < deadline:
            return entry
        return _expired(entry, now, deadline)

    return change


def _redate(deadline: float) -> Callable[[ApprovalEntry], ApprovalEntry]:
    def change(entry: ApprovalEntry) -> ApprovalEntry:
        return entry if entry.decided or entry.deadline == deadline else entry.replace(deadline=deadline)

    return change


def _expired(entry: ApprovalEntry, now: float, deadline: float) -> ApprovalEntry:
    return entry.replace(status=Status.EXPIRED, approver=None, note=f"no decision by {iso(deadline)}",
                         decided_at=now, decided_via="deadline", deadline=deadline)


def _read_log(wal: WAL, saga_id: str, request: str) -> Remembered:
    try:
        return remembered(wal.records(), saga_id, request)
    except Exception as err:
        # Whether a person already said no cannot be known: asking again could replay it.
        raise ApprovalUnavailable(
            f"cannot read the log {wal.location} for an earlier decision on request {request[:8]} ({err}); "
            "denied -- repair the log (agent-saga verify) and retry"
        ) from err


def _read_passkeys(wal: WAL) -> PasskeyHistory:
    try:
        return passkey_history(wal.records())
    except Exception as err:
        # The last sign count cannot be known: a cloned authenticator could not be told apart.
        raise ApprovalUnavailable(
            f"cannot read the log {wal.location} for the passkeys' last sign counts ({err}); denied -- "
            "repair the log (agent-saga verify) and retry"
        ) from err


def _refused_before(past: Remembered, asked: ApprovalEntry) -> ApprovalDecision:
    """A refusal already in the log: it stands, and nobody is asked again."""
    body = past.refusal or {}
    if past.refusal_type == RecordType.APPROVAL_EXPIRED.value:
        raise ApprovalExpired(
            f"request {asked.id[:8]} for {asked.tool!r} expired earlier (the log says so: "
            f"{body.get('note') or 'no decision in time'}); expiry denies, and nobody is asked again"
        )
    return ApprovalDecision(False, str(body.get("approver")),
                            f"{body.get('note') or ''} (remembered from the log; not asked again)".strip())


def _deny_system(now: float, reason: str) -> Callable[[ApprovalEntry], ApprovalEntry]:
    def change(entry: ApprovalEntry) -> ApprovalEntry:
        if entry.decided:
            return entry  # somebody decided first (from the list): theirs stands
        return entry.replace(status=Status.DENIED, approver=None, note=reason, decided_at=now,
                             decided_via="agent-saga")

    return change
