"""``python3 -m drills [--short] [--seed N] [--shim go|python] [--source DIR]
[--from REV] [DRILL ...]``: run the drills, print each report, exit 1 if any
invariant was violated. ``--shim``, ``--source`` and ``--from`` reach the
drills that take them (chaos: the shim and the tree whose daemon runs;
upgrade: the earlier release)."""
from __future__ import annotations

import argparse
import importlib
import inspect
import logging
import sys
import time
from pathlib import Path

from drills import DRILLS
from drills.common import Report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m drills",
                                     description=__doc__)
    parser.add_argument("--short", action="store_true",
                        help="the quick versions the test suite runs")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of the random choices (kills, fuzz cases)")
    parser.add_argument("--shim", choices=["go", "python"], default=None,
                        help="the kuryr-cni the runtime runs (chaos: go by default)")
    parser.add_argument("--source", type=Path, default=None,
                        help="chaos: run the daemon and shim of this tree (e.g. a "
                             "`git archive REV | tar -x -C DIR` of an earlier release)")
    parser.add_argument("--from", dest="from_rev", default=None, metavar="REV",
                        help="upgrade: the earlier release, a git revision")
    parser.add_argument("drills", nargs="*", choices=[*DRILLS, []],
                        metavar="DRILL", help=f"any of {', '.join(DRILLS)}")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING,
                        format="%(asctime)s %(name)s %(message)s")
    reports: list[Report] = []
    for name in args.drills or DRILLS:
        module = importlib.import_module(f"drills.{name}")
        accepted = inspect.signature(module.run).parameters
        extra = {key: value for key, value in (
            ("shim", args.shim), ("source", args.source), ("from_rev", args.from_rev))
            if value is not None and key in accepted}
        start = time.monotonic()
        try:
            report = module.run(short=args.short, seed=args.seed, **extra)
        except Exception as exc:  # noqa: BLE001 - one drill's crash is a failure
            logging.exception("drill %s crashed", name)
            report = Report(name, failures=[f"drill crashed: {exc!r}"])
        report.figures.setdefault("drill seconds", round(time.monotonic() - start, 1))
        print(report.render(), flush=True)
        reports.append(report)
    failed = [r.name for r in reports if not r.ok]
    print(f"drills: {len(reports) - len(failed)} passed, {len(failed)} failed"
          + (f" ({', '.join(failed)})" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
