"""Run the benchmarks: ``python -m bench [name ...] [--short]``.

Each module ``bench/bench_<name>.py`` defines ``run(short: bool) -> None`` that
prints its figures. Without names, every benchmark runs in turn.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from pathlib import Path


def main() -> int:
    here = Path(__file__).parent
    names = sorted(m.name[len("bench_"):] for m in pkgutil.iter_modules([str(here)]) if m.name.startswith("bench_"))
    parser = argparse.ArgumentParser(prog="python -m bench")
    parser.add_argument("names", nargs="*", choices=[*names, []], help="benchmarks to run (default: all)")
    parser.add_argument("--short", action="store_true", help="a quick run with small sizes (sanity only)")
    args = parser.parse_args()
    failed = 0
    for name in args.names or names:
        print(f"\n=== bench {name} ===", flush=True)
        module = importlib.import_module(f"bench.bench_{name}")
        try:
            module.run(short=args.short)
        except Exception as exc:  # report and go on with the others
            print(f"bench {name} failed: {type(exc).__name__}: {exc}", file=sys.stderr)
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
