"""``python3 -m benchmarks``: see :mod:`benchmarks.run`.

The benchmarks drive the installed daemon and its test clients, so they
run in the environment that has them (``tox -e bench``); a Python without
them gets one line saying so, not a traceback.
"""
import sys

try:
    from benchmarks.run import main
except ModuleNotFoundError as exc:
    sys.stderr.write(
        f"benchmarks: this Python ({sys.executable}) lacks the module "
        f"{exc.name!r}; run them with kuryr-supervisor and its test "
        "dependencies installed: `tox -e bench` (or "
        "`.tox/bench/bin/python -m benchmarks`)\n")
    sys.exit(2)

sys.exit(main())
