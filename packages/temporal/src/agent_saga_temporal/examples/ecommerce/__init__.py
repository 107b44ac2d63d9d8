"""The checkout example: ``python -m agent_saga_temporal.examples.ecommerce SCENARIO``."""
