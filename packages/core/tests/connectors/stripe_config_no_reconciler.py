"""The same start-up, in a daemon that has the refund but no way to ask Stripe about a charge."""

from __future__ import annotations

import stripe_config  # noqa: F401

from agent_saga.registry import unregister_reconciler

unregister_reconciler("stripe.charge")
