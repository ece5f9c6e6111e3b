"""How wide a noise floor is on the shoot-out's tinyk3 checkpoint.

Landscape B is meant to start "one to three floors" from the optimum, and
whether a loop can confirm a move there depends on how wide the floor is
on this checkpoint. This measures it the way the loop does: `orchestrator
trace` through the loop contestant's own config (`loop.write_config`: the
shipped bench argv through the engine clock, the shared far tier), one
profile run back to back, and the floor of every 20 consecutive pairs
(`floor_pairs`) by `Qn` (the judge's estimator, `src/judge/noise.rs`).

    python3 benches/shootout/floor_width.py [--runs 100] [--gen 8,64] [--threads 2,1]

Profiles: the slow start (landscape A's) and a fast one (warm set 128,
draft 8: B's starts are of this kind). `--gen` and `--threads` vary the
run's length and its threads (the shipped config's `--gen 8`, the
profile's `[compute] threads`), to see what a floor is made of. Needs the
release binaries (`cargo build --release -p orchestrator -p tinyk3`);
writes under `ledger/shootout/floor-width/`.
"""

import argparse
import csv
import math
import statistics
import subprocess
import sys
import time
import tomllib
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import loop  # noqa: E402
from stack import (ORCH, REPO, TINYK3, Proc, ensure_checkpoint, free_port, point,  # noqa: E402
                   starting_profile, substitute, wait_port)

# The pairs of one floor, as the shipped config measures it.
FLOOR_PAIRS = tomllib.loads((REPO / "config.toml").read_text())["measure"]["floor_pairs"]


def qn(x):
    """Rousseeuw & Croux's Qn scaled to σ, as src/judge/noise.rs computes it."""
    n = len(x)
    d = sorted(abs(a - b) for i, a in enumerate(x) for b in x[i + 1:])
    h = n // 2 + 1
    k = h * (h - 1) // 2
    small = [0.399, 0.994, 0.512, 0.844, 0.611, 0.857, 0.669, 0.872]
    dn = small[n - 2] if n <= 9 else (n / (n + 1.4) if n % 2 else n / (n + 3.8))
    return 2.219144465985076 * dn * d[k - 1]


def floors(spt):
    """Log ratios of consecutive pairs, and Qn of each window of 20 of them."""
    pairs = [math.log(spt[i + 1] / spt[i]) for i in range(0, len(spt) - 1, 2)]
    windows = [qn(pairs[i:i + FLOOR_PAIRS]) for i in range(0, len(pairs) - FLOOR_PAIRS + 1, FLOOR_PAIRS)]
    return pairs, windows


def config_with_gen(d: Path, ck: Path, gen: int) -> Path:
    """The loop contestant's config in `d`, its bench generating `gen` tokens a run."""
    cfg = loop.write_config(d, ck, d / "clock.log", "bandit", free_port(), free_port())
    cfg.write_text(substitute(cfg.read_text(), [('"--gen", "8",', f'"--gen", "{gen}",')]))
    return cfg


def trace(d: Path, ck: Path, profile, gen: int, runs: int):
    d.mkdir(parents=True)
    (d / "profiles").mkdir()
    cfg = config_with_gen(d, ck, gen)
    prof = d / "profile.toml"
    prof.write_text(profile.to_toml())
    (d / "profiles" / "live.toml").write_text(profile.to_toml())
    out = d / "trace.csv"
    t0 = time.time()
    subprocess.run([str(ORCH), "trace", "--config", str(cfg), "--runs", str(runs), "--profile", str(prof),
                    "--out", str(out), "--progress-every", "0", "--log", "error"], check=True)
    rows = list(csv.DictReader(out.open()))
    return [float(r["seconds_per_token"]) for r in rows], (time.time() - t0) / runs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=100, help="runs per profile and variant (even; >= 40)")
    ap.add_argument("--gen", default="8", help="tokens per run, comma-separated (shipped: 8)")
    ap.add_argument("--threads", default="2", help="engine threads, comma-separated (shipped: 2)")
    a = ap.parse_args()
    if a.runs < 2 * FLOOR_PAIRS or a.runs % 2:
        ap.error(f"--runs must be even and at least {2 * FLOOR_PAIRS} (one floor's pairs)")
    base = REPO / "ledger/shootout"
    ck = base / "ck-4x32-small"
    base.mkdir(parents=True, exist_ok=True)
    ensure_checkpoint(ck)
    out = base / "floor-width" / time.strftime("%Y%m%dT%H%M%S")
    out.mkdir(parents=True)
    port = free_port()
    es = Proc([str(TINYK3), "expert-server", "--model", str(ck), "--listen", f"127.0.0.1:{port}",
               "--warm-set", "1024"], out / "expert-server.log")
    try:
        wait_port(port, 30)
        start = starting_profile(ck, f"127.0.0.1:{port}")
        fast = point(start, "", pin_count=0, warm_set=128, draft_len=8, trunk_fraction=None)
        print(f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}; load {open('/proc/loadavg').read().split()[:3]}")
        print("| profile | gen | threads | runs | median s/token | wall s a run | Qn of all pairs | "
              "floors of 20 pairs: median [min, max] |")
        print("|---|---:|---:|---:|---:|---:|---:|---|")
        for name, p in [("slow start", start), ("warm 128, draft 8", fast)]:
            for gen in [int(g) for g in a.gen.split(",")]:
                for th in [int(t) for t in a.threads.split(",")]:
                    spt, wall = trace(out / f"{name.split(',')[0].replace(' ', '-')}-g{gen}-t{th}", ck,
                                      replace(p, threads=th), gen, a.runs)
                    pairs, w = floors(spt)
                    print(f"| {name} | {gen} | {th} | {len(spt)} | {statistics.median(spt):.4f} | {wall:.2f} | "
                          f"{qn(pairs):.3f} | {statistics.median(w):.3f} [{min(w):.3f}, {max(w):.3f}] |",
                          flush=True)
    finally:
        es.stop()
    print(f"load at the end {open('/proc/loadavg').read().split()[:3]}; traces in {out}")


if __name__ == "__main__":
    main()
