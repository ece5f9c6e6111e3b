#!/usr/bin/env python3
"""Which per-run signal tells a burst of competing work from a steady load?

Runs `tinyk3 bench` (config.toml's bench argv, on the shoot-out's small
checkpoint and the demo's slow start) back to back under loads this script
makes itself: none, a steady 2, 8 or 16 busy loops, and bursts (8 busy loops
started just before a run and stopped just after it, every other run, on top
of nothing or of a steady load). Per run it records what each candidate
signal said:

  cpu_some    growth of /proc/pressure/cpu `some total` over wall time (0..1)
  cpu_full    the same for the `full` line (0 at system level on most kernels)
  mem_some    /proc/pressure/memory `some`
  stall_us_s  cpu `some` stall in microseconds per run second (unclamped)
  cpu_wall    the run's own CPU time (wait4 rusage, user + system) over its
              wall time: how many cores it got
  runnable    mean `procs_running` of /proc/stat, sampled every 10 ms

and prints, per condition, the median of each, so a signal that separates a
burst from the steady load under it stands out. Writes every run as CSV.

    cargo build --release -p tinyk3
    python3 benches/traces/pressure_signals.py --out ledger/pressure-signals.csv

The busy loops are this script's children, stopped by their own pids.
"""

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "shootout"))
import stack  # noqa: E402  (the shoot-out's checkpoint and argv)

BUSY = ["sh", "-c", "while :; do :; done"]


def psi(name):
    """(some total, full total) microseconds of /proc/pressure/NAME."""
    out = {"some": None, "full": None}
    try:
        for line in Path("/proc/pressure", name).read_text().splitlines():
            kind, *fields = line.split()
            for f in fields:
                if f.startswith("total="):
                    out[kind] = int(f[6:])
    except OSError:
        pass
    return out["some"], out["full"]


def procs_running():
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith("procs_running "):
            return int(line.split()[1])
    return 0


class Sampler(threading.Thread):
    def __init__(self):
        super().__init__(daemon=True)
        self.samples, self.stop = [], threading.Event()

    def run(self):
        while not self.stop.is_set():
            self.samples.append(procs_running())
            time.sleep(0.01)


def busy(n):
    return [subprocess.Popen(BUSY, stdout=subprocess.DEVNULL, start_new_session=True)
            for _ in range(n)]


def stop(procs):
    for p in procs:
        p.kill()
    for p in procs:
        p.wait()


def one_run(argv, out):
    c0, f0 = psi("cpu")
    m0, _ = psi("memory")
    s = Sampler()
    s.start()
    t0 = time.monotonic()
    child = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             env=dict(os.environ, OMP_WAIT_POLICY="passive"))
    _, status, ru = os.wait4(child.pid, 0)
    wall = time.monotonic() - t0
    s.stop.set()
    s.join()
    c1, f1 = psi("cpu")
    m1, _ = psi("memory")
    share = lambda a, b: None if a is None or b is None else (b - a) / (wall * 1e6)
    try:
        spt = float(json.loads(out.read_text())["seconds_per_token"])
    except (OSError, ValueError, KeyError):
        spt = None
    out.unlink(missing_ok=True)
    return {
        "wall_s": wall,
        "seconds_per_token": spt,
        "exit": os.waitstatus_to_exitcode(status),
        "cpu_some": share(c0, c1),
        "cpu_full": share(f0, f1),
        "mem_some": share(m0, m1),
        "stall_us_s": None if c0 is None else (c1 - c0) / wall,
        "cpu_wall": (ru.ru_utime + ru.ru_stime) / wall,
        "runnable": statistics.fmean(s.samples) if s.samples else None,
        "load1": float(Path("/proc/loadavg").read_text().split()[0]),
    }


CONDITIONS = {
    # name: (steady busy loops, burst busy loops on every other run)
    "quiet": (0, 0),
    "steady2": (2, 0),
    "steady8": (8, 0),
    "steady16": (16, 0),
    "burst8-on-quiet": (0, 8),
    "burst8-on-steady8": (8, 8),
    "burst8-on-steady16": (16, 8),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="CSV of every run")
    ap.add_argument("--runs", type=int, default=8, help="runs per condition")
    ap.add_argument("--conditions", default=",".join(CONDITIONS))
    a = ap.parse_args()
    work = stack.REPO / "ledger" / "pressure-signals"
    ck = work / "checkpoint"
    work.mkdir(parents=True, exist_ok=True)
    stack.ensure_checkpoint(ck)
    profile = stack.starting_profile(ck, "")
    out = work / "out.json"
    argv = stack.bench_argv(ck, profile, out, work / "heat")
    rows = []
    for name in a.conditions.split(","):
        steady_n, burst_n = CONDITIONS[name]
        steady = busy(steady_n)
        try:
            time.sleep(2 if steady_n else 0)  # let the steady load settle
            one_run(argv, out)  # a warmup under this load, not recorded
            for i in range(a.runs):
                burst = burst_n > 0 and i % 2 == 1
                extra = busy(burst_n) if burst else []
                try:
                    r = one_run(argv, out)
                finally:
                    stop(extra)
                r.update(condition=name, run=i, burst=int(burst), steady=steady_n)
                rows.append(r)
                print(f"{name} run {i} burst={int(burst)} wall {r['wall_s']:.2f} s "
                      f"cpu_some {r['cpu_some']:.3f} cpu/wall {r['cpu_wall']:.2f} "
                      f"runnable {r['runnable']:.1f}", file=sys.stderr)
        finally:
            stop(steady)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    cols = ["condition", "run", "steady", "burst", "wall_s", "seconds_per_token", "exit",
            "cpu_some", "cpu_full", "mem_some", "stall_us_s", "cpu_wall", "runnable", "load1"]
    with open(a.out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols)
        w.writeheader()
        w.writerows(rows)
    summary(rows)


def summary(rows):
    sig = ["wall_s", "cpu_some", "cpu_full", "mem_some", "stall_us_s", "cpu_wall", "runnable",
           "load1"]
    print("| condition | runs | " + " | ".join(sig) + " |")
    print("|---|---|" + "---|" * len(sig))
    groups = {}
    for r in rows:
        label = r["condition"] + (" (burst runs)" if r["burst"] else
                                  " (between bursts)" if "burst" in r["condition"] else "")
        groups.setdefault(label, []).append(r)
    for label, rs in groups.items():
        med = lambda k: statistics.median(r[k] for r in rs if r[k] is not None)
        print(f"| {label} | {len(rs)} | " + " | ".join(
            f"{med(k):.0f}" if k == "stall_us_s" else f"{med(k):.3f}" for k in sig) + " |")


if __name__ == "__main__":
    main()
