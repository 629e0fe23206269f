"""Command line for TAs: ``python -m grader <verb>`` from the repository root.

Verbs:
  release    regenerate notebooks/ex01 (the student release) from solutions/ex01
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grader", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="verb", required=True)
    sub.add_parser("release", help="regenerate notebooks/ex01 from solutions/ex01")
    args = parser.parse_args(argv)

    if args.verb == "release":
        from .release import generate_release

        dest = generate_release()
        names = sorted(p.name for p in dest.glob("*.ipynb"))
        print(f"released {len(names)} notebooks to {dest}:")
        for n in names:
            print(f"  {n}")
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
