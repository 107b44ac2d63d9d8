"""``python -m agent_saga_temporal.examples.ecommerce SCENARIO``."""

# Temporal's workflow sandbox imports __main__ again: only run when executed.
if __name__ == "__main__":
    import sys

    from agent_saga_temporal.examples.ecommerce.run import main

    sys.exit(main())
