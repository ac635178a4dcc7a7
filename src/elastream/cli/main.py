"""``elastream`` command line entry point (subcommands: demo, bench, datagen, placement, policies, query).

Each subcommand lives in its own module under :mod:`elastream.cli`; this one
only parses the first word and dispatches. Runs in the caller's thread.

Example::

    elastream policies
    elastream demo
    elastream bench overhead --tuples 100000 --json
    elastream placement chain --processes 2
"""

from __future__ import annotations

import argparse
import sys


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with one sub-parser per subcommand."""
    from elastream.cli import bench, datagen, demo, placement, query

    parser = argparse.ArgumentParser(prog="elastream", description="elastic stream processing engine")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("policies", help="list the registered scheduling policies")
    demo.add_parser(sub)
    bench.add_parser(sub)
    placement.add_parser(sub)
    datagen.add_parser(sub)
    query.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` and run the chosen subcommand; returns the exit code.

    Example: ``main(["policies"]) == 0``
    """
    args = build_parser().parse_args(argv)
    if args.command == "policies":
        from elastream.policies import available

        print("\n".join(available()))
        return 0
    return int(args.handler(args))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
