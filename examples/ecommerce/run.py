"""``python -m examples.ecommerce.run SCENARIO`` from the repository's root, as seed 002 writes it.

The same command as ``python -m agent_saga_temporal.examples.ecommerce SCENARIO``: the
agent's choices, the workflow's numbered timeline, the outcome and its closing sentence.
"""

# Temporal's workflow sandbox imports __main__ again: only run when executed.
if __name__ == "__main__":
    import sys

    from agent_saga_temporal.examples.ecommerce.run import main

    sys.exit(main())
