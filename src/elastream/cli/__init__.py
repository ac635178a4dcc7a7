"""The ``elastream`` command line."""
