"""What an app's start-up module does for the Stripe connector, in the worker and the daemon:
register the connector (import), point the SDK at the provider, and say how to resolve credentials."""

from __future__ import annotations

import os

import stripe

import agent_saga.connectors.stripe  # noqa: F401 - registers stripe.refund and both reconcilers
from agent_saga.connectors import set_credential_resolver

stripe.api_base = os.environ["STRIPE_API_BASE"]
set_credential_resolver(lambda name: {"stripe_test": os.environ["STRIPE_TEST_KEY"]}[name])
