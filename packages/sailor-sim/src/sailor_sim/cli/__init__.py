"""The ``sailor-sim`` command line."""
