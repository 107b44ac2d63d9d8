"""Runnable examples of the Temporal engine (each exercised by a test)."""
