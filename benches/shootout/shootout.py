#!/usr/bin/env python3
"""Does the loop find the fast settings? The side-by-side of the loop and the tuners.

    bash benches/shootout/run.sh            # default: 3 seeds, under an hour
    bash benches/shootout/run.sh --quick    # 1 seed, a tiny budget: a smoke run

Phases (see README.md beside this file): set-up (checkpoint, far tier, heat,
pin list), ground truth (a lattice against the start), the contestants (each
seed a fresh ledger/state, the same engine-time budget), the evaluation (every
recommendation measured against the start, independently of the search), and
the table and plot.
"""

import argparse
import json
import math
import os
import random
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import truth  # noqa: E402
from loop import run_loop  # noqa: E402
from stack import (REPO, TINYK3, Engine, Proc, clock_total, ensure_checkpoint, free_port,  # noqa: E402
                   point, starting_profile, wait_port)
from tuners import TUNERS  # noqa: E402
import plot  # noqa: E402

CONTESTANTS = ["loop-bandit", "loop-model", "tpe", "random", "coordinate"]


def load():
    return os.getloadavg()[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="1 seed, 40 s budget, tiny lattice")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--budget", type=float, default=100.0, help="engine seconds per contestant and seed")
    ap.add_argument("--gt-rounds", type=int, default=6, help="rounds of the ground-truth lattice")
    ap.add_argument("--eval-rounds", type=int, default=8, help="rounds of the recommendations' A/B")
    ap.add_argument("--final-rounds", type=int, default=16,
                    help="more rounds for each seed's final recommendation, pooled with its eval rounds")
    ap.add_argument("--contestants", default=",".join(CONTESTANTS))
    ap.add_argument("--out", default=str(REPO / "ledger/shootout/results"),
                    help="where the table, plot and JSON go")
    ap.add_argument("--shipped-judge", action="store_true",
                    help="run the loop with [measure] exactly as shipped (no loosened machine checks)")
    ap.add_argument("--keep", action="store_true", help="keep the per-seed ledgers and logs")
    a = ap.parse_args()
    if a.quick:
        a.seeds, a.budget, a.gt_rounds, a.eval_rounds, a.final_rounds = 1, 40.0, 2, 3, 3
    contestants = [c for c in a.contestants.split(",") if c]
    for c in contestants:
        if c not in CONTESTANTS:
            ap.error(f"unknown contestant {c!r}; choose from {', '.join(CONTESTANTS)}")
    for b in (TINYK3, REPO / "target/release/orchestrator"):
        if not b.exists():
            ap.error(f"{b} is missing: cargo build --release -p orchestrator -p tinyk3")

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    base = REPO / "ledger/shootout"
    run_dir = base / time.strftime("run-%Y%m%dT%H%M%S")
    run_dir.mkdir(parents=True)
    loads = [(0.0, load())]
    t_begin = time.time()

    def say(msg):
        print(f"[{time.time() - t_begin:6.0f} s, load {load():4.1f}] {msg}", flush=True)

    ck = base / "ck-4x32-small"
    ensure_checkpoint(ck)
    es_port = free_port()
    # The far tier, shared by every contestant: the embedded default's
    # expert server with its default capacity (expert_server_max_warm).
    es = Proc([str(TINYK3), "expert-server", "--model", str(ck), "--listen",
               f"127.0.0.1:{es_port}", "--warm-set", "1024"], run_dir / "expert-server.log")
    try:
        wait_port(es_port, 30)
        start = starting_profile(ck, f"127.0.0.1:{es_port}")
        setup = Engine(ck, run_dir / "setup", run_dir / "setup.log", "setup")
        # Heat of the start for the tuners' pin list (the loop makes its own
        # from its own runs' heat, the same prompt, so the same ranking), and
        # the far tier brought to its steady state (it warms in the
        # background whatever warm_set says), so no contestant meets it colder.
        for _ in range(3):
            setup.run(start)
        setup.run(point(start, "", pin_count=0, warm_set=128, draft_len=0, trunk_fraction=None))
        pins = run_dir / "pins.txt"
        subprocess.run([str(TINYK3), "pins", str(ck), "--hist", str(setup.heat / "expert_hist.json"),
                        "--out", str(pins)], check=True, capture_output=True)
        say(f"set-up done: start = {start.short()}; far tier on :{es_port}")

        # ---- ground truth ----
        if a.quick:
            lattice = dict(pins=[0], warm=[0], draft=[0, 4], trunk=[None, 0.8])
        else:
            lattice = dict(pins=[0, 16], warm=[0, 128], draft=[0, 2, 4, 8], trunk=[None, 0.55, 0.8])
        grid = {}
        for pc in lattice["pins"]:
            for w in lattice["warm"]:
                for dl in lattice["draft"]:
                    for tf in lattice["trunk"]:
                        p = point(start, str(pins), pin_count=pc, warm_set=w, draft_len=dl, trunk_fraction=tf)
                        if p is not None and p != start:
                            grid[p.key()] = p
        gt_engine = Engine(ck, run_dir / "truth", run_dir / "truth.log", "truth")
        say(f"ground truth: {len(grid)} lattice points x {a.gt_rounds} rounds against the start")
        gt, gt_ref = truth.measure(gt_engine, start, grid, a.gt_rounds, seed=1,
                                   progress=lambda r, n: say(f"  ground truth round {r}/{n}"))
        loads.append((time.time() - t_begin, load()))
        opt_key = min((k for k in gt if gt[k]["median"] is not None), key=lambda k: gt[k]["median"])
        opt = gt[opt_key]["median"]
        say(f"grid optimum: {grid[opt_key].short()}: {math.exp(-opt):.2f}x the start "
            f"[{math.exp(-gt[opt_key]['hi']):.2f}, {math.exp(-gt[opt_key]['lo']):.2f}]; "
            f"start {statistics.median(gt_ref):.4f} s/token")

        # ---- contestants ----
        results = []
        for seed in range(1, a.seeds + 1):
            for c in contestants:
                say(f"{c}, seed {seed}: budget {a.budget:.0f} engine s")
                t0 = time.time()
                d = run_dir / f"{c}-{seed}"
                if c.startswith("loop-"):
                    r = run_loop(d, ck, start, c.split("-")[1], a.budget, say, a.shipped_judge)
                else:
                    eng = Engine(ck, d, d / "engine.log", c)
                    d.mkdir(parents=True, exist_ok=True)
                    (d / "engine.log").touch()
                    r = TUNERS[c](eng, start, str(pins), a.budget, seed)
                    r["wall_s"] = time.time() - t0
                r.update(contestant=c, seed=seed)
                results.append(r)
                loads.append((time.time() - t_begin, load()))
                say(f"  {c} seed {seed}: recommends {r['recommended'].short()}, claims "
                    f"{math.exp(-r['claimed']):.2f}x; {r['engine_s']:.0f} engine s, {r['wall_s']:.0f} wall s")

        # ---- evaluation: every recommendation, independently of the search ----
        recs = {}
        for r in results:
            for _t, p, _c, _i in r["trajectory"]:
                if p.key() != start.key():
                    recs[p.key()] = p
        ev_engine = Engine(ck, run_dir / "eval", run_dir / "eval.log", "eval")
        say(f"evaluation: {len(recs)} distinct recommended profiles x {a.eval_rounds} rounds against the start")
        ev, _ = truth.measure(ev_engine, start, recs, a.eval_rounds, seed=2,
                              progress=lambda r, n: say(f"  evaluation round {r}/{n}"))
        # The final recommendations, whose claims are judged, get more rounds:
        # a second measurement by the same procedure, pooled with the first.
        finals = {r["recommended"].key(): r["recommended"] for r in results
                  if r["recommended"].key() != start.key()}
        if finals and a.final_rounds > 0:
            say(f"final recommendations: {len(finals)} distinct profiles x {a.final_rounds} more rounds")
            more, _ = truth.measure(ev_engine, start, finals, a.final_rounds, seed=3,
                                    progress=lambda r, n: say(f"  final round {r}/{n}"))
            pool_rng = random.Random(4)
            for k in finals:
                ev[k] = truth.pool(ev[k], more[k], pool_rng)
        ev[start.key()] = {"median": 0.0, "lo": 0.0, "hi": 0.0, "n": 0, "log_ratios": []}
        loads.append((time.time() - t_begin, load()))

        import pickle
        with open(out / "raw.pkl", "wb") as f:  # to re-summarize without re-running
            pickle.dump({"results": results, "ev": ev, "gt": gt, "grid": grid, "opt_key": opt_key,
                         "start": start, "args": a, "loads": loads}, f)
        report = summarize(results, ev, gt, grid, opt_key, start, a, loads, time.time() - t_begin)
        (out / "shootout.json").write_text(json.dumps(report, indent=1))
        (out / "table.md").write_text(report["table_md"])
        plot.write_svg(out / "shootout.svg", report)
        print()
        print(report["table_md"])
        say(f"wrote {out / 'table.md'}, {out / 'shootout.svg'}, {out / 'shootout.json'}")
    finally:
        es.stop()
        if not a.keep:
            shutil.rmtree(run_dir, ignore_errors=True)


def secs(t):
    return "never" if t is None or math.isinf(t) else f"{t:.0f} s"


def frac(true_log, opt):
    return true_log / opt if opt < 0 else float("nan")


def summarize(results, ev, gt, grid, opt_key, start, a, loads, wall):
    opt = gt[opt_key]["median"]
    rows = []
    for r in results:
        rec = r["recommended"]
        e = ev[rec.key()]
        # Engine time at which the current recommendation reached 90% of the
        # optimum's gain (in log speed) and held it to the end of the budget;
        # `t90_first` is the first time it reached it at all (a tuner may
        # later switch to a luckier-looking, truly slower trial).
        t90 = t90_first = None
        traj = []
        for t, p, c, iv in r["trajectory"]:
            tl = ev[p.key()]["median"]
            traj.append((t, tl))
            good = tl is not None and frac(tl, opt) >= 0.9
            if good and t90_first is None:
                t90_first = t
            if good and t90 is None:
                t90 = t
            elif not good:
                t90 = None
        ci = r["claimed_interval"]
        claim_hi = ci[1] if ci else r["claimed"]
        rows.append({
            "contestant": r["contestant"], "seed": r["seed"], "recommended": rec.short(),
            "recommended_knobs": rec.as_dict(),
            "true": e["median"], "true_lo": e["lo"], "true_hi": e["hi"], "claimed": r["claimed"],
            "claimed_interval": ci, "regret": e["median"] - opt, "improvement_share": frac(e["median"], opt),
            "t90": t90, "t90_first": t90_first, "slower_than_start": e["lo"] is not None and e["lo"] > 0,
            "slower_than_claimed": e["median"] is not None and e["median"] > claim_hi + 1e-12,
            "engine_s": r["engine_s"], "wall_s": r["wall_s"], "trajectory": traj,
            "diagnosis": r.get("diagnosis"), "approvals": r.get("approvals"),
            "trials": r.get("trials"),
        })
    x = lambda l: f"{math.exp(-l):.2f}x" if l is not None else "-"  # noqa: E731
    lines = [
        f"Shootout of {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: {a.seeds} seed(s), "
        f"budget {a.budget:.0f} engine s each; load average {min(l for _, l in loads):.1f}-"
        f"{max(l for _, l in loads):.1f} (sampled between phases); {wall / 60:.1f} min in all.",
        f"Grid optimum: {grid[opt_key].short()} = {x(opt)} the start "
        f"[{x(gt[opt_key]['hi'])}, {x(gt[opt_key]['lo'])}] ({len(grid)} lattice points, "
        f"{a.gt_rounds} rounds). 90% of its improvement = {math.exp(-0.9 * opt):.2f}x. "
        f"Recommendations: {a.eval_rounds} rounds each, the final ones {a.eval_rounds + a.final_rounds}.",
        "",
        "| contestant | seed | recommended | true speed-up [95%] | claimed | regret vs optimum | share of optimum's gain | engine s to 90%: held (first) | slower than start | slower than claimed | engine s | wall s |",
        "|---|---:|---|---|---|---:|---:|---:|---|---|---:|---:|",
    ]
    for w in rows:
        ci = w["claimed_interval"]
        claimed = x(w["claimed"]) + (f" [{x(ci[1])}, {x(ci[0])}]" if ci else "")
        lines.append(
            f"| {w['contestant']} | {w['seed']} | {w['recommended']} | {x(w['true'])} "
            f"[{x(w['true_hi'])}, {x(w['true_lo'])}] | {claimed} | {100 * math.expm1(w['regret']):+.0f}% | "
            f"{100 * w['improvement_share'] + 0:.0f}% | {secs(w['t90'])} ({secs(w['t90_first'])}) | "
            f"{'YES' if w['slower_than_start'] else 'no'} | {'YES' if w['slower_than_claimed'] else 'no'} | "
            f"{w['engine_s']:.0f} | {w['wall_s']:.0f} |")
    lines += ["", "| contestant | median true speed-up | median regret | median engine s to 90%, held (seeds that got there) | truly slower than start | truly slower than claimed |",
              "|---|---|---:|---|---:|---:|"]
    summary = {}
    for c in dict.fromkeys(w["contestant"] for w in rows):
        ws = [w for w in rows if w["contestant"] == c]
        t90s = [w["t90"] for w in ws if w["t90"] is not None]
        med_t90 = statistics.median([w["t90"] if w["t90"] is not None else math.inf for w in ws])
        summary[c] = {"t90_median": med_t90, "reached": len(t90s), "seeds": len(ws),
                      "true_median": statistics.median(w["true"] for w in ws),
                      "slower_than_start": sum(w["slower_than_start"] for w in ws),
                      "slower_than_claimed": sum(w["slower_than_claimed"] for w in ws)}
        lines.append(
            f"| {c} | {x(summary[c]['true_median'])} | {100 * math.expm1(statistics.median(w['regret'] for w in ws)):+.0f}% | "
            f"{secs(med_t90)} ({len(t90s)}/{len(ws)}) | "
            f"{summary[c]['slower_than_start']}/{len(ws)} | {summary[c]['slower_than_claimed']}/{len(ws)} |")
    if "tpe" in summary:
        tpe = summary["tpe"]["t90_median"]
        for c in ("loop-bandit", "loop-model"):
            if c not in summary:
                continue
            s = summary[c]
            ok_t = not math.isinf(s["t90_median"]) and s["t90_median"] <= 0.5 * tpe
            lines.append("")
            lines.append(
                f"Time target, {c}: 90% of the optimum's gain in <= 1/2 of TPE's engine time "
                f"({secs(s['t90_median'])} vs TPE {secs(tpe)}): {'met' if ok_t else 'NOT met'}; "
                f"nothing truly slower than the start: {'met' if s['slower_than_start'] == 0 else 'NOT met'}; "
                f"claim within its interval of the truth: {'met' if s['slower_than_claimed'] == 0 else 'NOT met'}.")
    for w in rows:
        if w["diagnosis"]:
            lines += ["", f"Where {w['contestant']} seed {w['seed']} spent its engine time "
                      f"({w['diagnosis']['cycles']} cycles, {w['diagnosis']['rejected_cycles']} rejected proposals):", "",
                      "| kind | experiments | runs | engine s | verdicts |", "|---|---:|---:|---:|---|"]
            for k, v in sorted(w["diagnosis"]["by_kind"].items(), key=lambda kv: -kv[1]["engine_s"]):
                lines.append(f"| {k} | {v['experiments']} | {v['runs']} | {v['engine_s']:.0f} | "
                             f"{', '.join(f'{a} {b}' for a, b in sorted(v['verdicts'].items()))} |")
    return {"rows": rows, "summary": summary, "optimum": opt, "optimum_profile": grid[opt_key].short(),
            "grid": {k: {"profile": grid[k].short(), "median": v["median"], "lo": v["lo"], "hi": v["hi"]}
                     for k, v in gt.items()},
            "budget": a.budget, "seeds": a.seeds, "loads": loads, "wall_s": wall,
            "table_md": "\n".join(lines) + "\n"}


if __name__ == "__main__":
    main()
