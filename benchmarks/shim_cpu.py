"""Benchmark 10 — the Python shim's CPU per call: script vs installed file.

The runtime execs the shim once per CNI call, so its start-up is paid on
every pod. ``shim.py`` copied as a script is compiled on every run; the file
``[cni_install]`` writes (:mod:`kuryr_supervisor.cni.shimbuild`) carries its
bytecode and skips that. Both are exec'd through their shebang
(``/usr/bin/python3 -IS``) with ``CNI_COMMAND=VERSION`` (answered locally,
no daemon: start-up and the shim's own work only), alternating call by call
so a noisy neighbour slows both alike. CPU is the child's user + system
time (``RUSAGE_CHILDREN``); wall is exec to exit.

No goal: the installed file's figures are quoted against the script's.
"""
from __future__ import annotations

import resource
import subprocess
import time
from pathlib import Path

from benchmarks.context import Context, Outcome
from benchmarks.stats import Figure, summarize
from kuryr_supervisor.cni import install

NAME = "shim-cpu"
INTERPRETER = "/usr/bin/python3 -IS"


def forms(directory: Path) -> dict[str, Path]:
    """The script as it was installed before, and the installed file."""
    source = Path(install.SHIM_SOURCE).read_text(encoding="utf-8")
    texts = {"script": f"#!{INTERPRETER}\n{source.partition(chr(10))[2]}".encode(),
             "installed": install.shim_script(interpreter=INTERPRETER)}
    paths = {}
    for name, data in texts.items():
        path = directory / f"kuryr-cni-{name}"
        path.write_bytes(data)
        path.chmod(0o755)
        paths[name] = path
    return paths


def once(path: Path) -> tuple[float, float]:
    """(CPU, wall) seconds of one VERSION call."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([str(path)], env={"CNI_COMMAND": "VERSION", "PATH": "/usr/bin:/bin"},
                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, check=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return cpu, wall


def run(ctx: Context) -> Outcome:
    count = ctx.scale(300, 20)
    paths = forms(ctx.ws.tmp)
    for path in paths.values():            # page cache, once
        once(path)
    cpu: dict[str, list[float]] = {name: [] for name in paths}
    wall: dict[str, list[float]] = {name: [] for name in paths}
    names = list(paths)
    for i in range(count):
        for name in names if i % 2 == 0 else names[::-1]:
            c, w = once(paths[name])
            cpu[name].append(c)
            wall[name].append(w)
    stats = {name: {"cpu": summarize(cpu[name]), "wall": summarize(wall[name])}
             for name in paths}
    ref, new = stats["script"], stats["installed"]
    label = "shim.py as a script"
    figures = [
        Figure(NAME, f"installed Python shim: CPU per call, median (n={count})",
               new["cpu"]["median"] * 1000, "ms", ref["cpu"]["median"] * 1000, label),
        Figure(NAME, f"installed Python shim: wall per call, median (n={count})",
               new["wall"]["median"] * 1000, "ms", ref["wall"]["median"] * 1000, label),
        Figure(NAME, "shim.py as a script: CPU per call, median",
               ref["cpu"]["median"] * 1000, "ms"),
    ]
    return Outcome(figures, raw={"cpu_s": cpu, "wall_s": wall, "summary_s": stats},
                   notes=[f"{count} alternating VERSION calls of each form through "
                          f"'#!{INTERPRETER}'; CPU = the child's user + system time."])
