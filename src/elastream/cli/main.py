"""``elastream`` command line entry point (subcommands: demo, bench, policies)."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` and run the chosen subcommand; returns the exit code."""
    parser = argparse.ArgumentParser(prog="elastream", description="elastic stream processing engine")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("policies", help="list the registered scheduling policies")
    args = parser.parse_args(argv)
    if args.command == "policies":
        from elastream.policies import available

        print("\n".join(available()))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
