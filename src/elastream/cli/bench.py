"""``elastream bench <name> ...``: run the benchmark module ``elastream.bench.<name>``.

A benchmark module offers ``add_arguments(parser)``, ``run(args) -> dict`` and
``print_report(result, console)``. Modules are imported only when chosen, so
one benchmark's missing optional dependency never breaks the others. With
``--json`` exactly one JSON object goes to stdout; tables otherwise.
"""

from __future__ import annotations

import argparse
import importlib
import json
import pkgutil
from types import ModuleType
from typing import Any


def available() -> list[str]:
    """Names of the benchmark modules in ``elastream.bench``."""
    import elastream.bench as pkg

    return sorted(m.name for m in pkgutil.iter_modules(pkg.__path__) if not m.name.startswith("_"))


def add_parser(sub: Any) -> None:
    """Register ``bench`` on the top-level sub-parsers."""
    names = available()
    p = sub.add_parser("bench", help="run a benchmark", description=f"benchmarks: {', '.join(names)}",
                       add_help=False)
    p.add_argument("name", choices=names, help="which benchmark")
    p.add_argument("rest", nargs=argparse.REMAINDER, help="the benchmark's own options (see NAME --help)")
    p.add_argument("-h", "--help", action="help", help="show this help message and exit")
    p.set_defaults(handler=run_command)


def benchmark_parser(name: str, module: ModuleType) -> argparse.ArgumentParser:
    """The parser of one benchmark: its own options plus ``--json``."""
    doc = (module.__doc__ or "").strip()
    parser = argparse.ArgumentParser(prog=f"elastream bench {name}", description=doc.splitlines()[0] if doc else None)
    module.add_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    return parser


def run_command(args: argparse.Namespace) -> int:
    """Parse the benchmark's options, run it, print JSON or its report."""
    module = importlib.import_module(f"elastream.bench.{args.name}")
    bench_args = benchmark_parser(args.name, module).parse_args(args.rest)
    result = module.run(bench_args)
    if bench_args.json:
        print(json.dumps(result, indent=2, allow_nan=False))
    else:
        from elastream.bench._common import make_console

        module.print_report(result, make_console())
    return 0
