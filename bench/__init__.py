"""elastream benchmarks (installed as ``elastream.bench``).

Each module reproduces the shape of one paper experiment on this machine and
offers ``add_arguments(parser)``, ``run(args) -> dict`` and
``print_report(result, console)``; ``elastream bench <name>`` dispatches here.
Every number a benchmark prints is measured in that run.
"""
