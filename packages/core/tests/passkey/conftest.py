"""The passkey tests need the `passkey` extra (py_webauthn); run them with `python3 -m tox run -e passkey`."""

from __future__ import annotations

try:
    import webauthn  # noqa: F401
except ImportError as err:  # a missing prerequisite is a failure that says how to fix it
    raise ImportError(
        "py_webauthn is not installed: run these tests with `python3 -m tox run -e passkey` "
        "(or pip install 'agent-saga[passkey]>=3.0.0')"
    ) from err
