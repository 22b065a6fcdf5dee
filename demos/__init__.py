"""Demo programs: one short torch.distributed program per operation.

Each module has a docstring whose first line is its one-line summary, an optional
``MIN_RANKS``, and ``main(ctx)`` with ``ctx`` a :class:`commviz.launch.runner.DemoContext`.
"""
