"""Flow builders shared by the benchmarks, ``elastream demo`` and the tests."""
