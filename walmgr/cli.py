"""walmgr command line.  The daemon lands with issue 5; until then it says so."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="walmgr",
        description="WAL File Manager: tracks WAL objects and deletes the ones no partition references. "
        "Not implemented yet: no subcommands exist in this version.",
    )
    parser.parse_args(argv)
    print("walmgr: no subcommands in this version (the WAL File Manager is not built yet)", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
