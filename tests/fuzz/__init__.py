"""The fuzz suite: hostile and odd inputs run through the CLI, each outcome classified.

``python -m tests.fuzz`` (``make fuzz``) runs the full suite and prints counts by outcome;
``tests/test_fuzz*.py`` run a fast, seeded slice in ``make test``.
"""
