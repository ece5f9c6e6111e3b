#!/usr/bin/env python3
"""Does the loop find the fast settings? The side-by-side of the loop and the tuners,
at one standard, on three landscapes.

    bash benches/shootout/run.sh                  # A, B and C: 3 seeds each, about 90 minutes
    bash benches/shootout/run.sh --landscapes A,B # pick landscapes
    bash benches/shootout/run.sh --quick          # 1 seed, tiny budgets: a smoke run

Per landscape (see README.md beside this file): its ground truth (a lattice
against its start), the contestants (each seed a fresh ledger/state, the
same engine-time budget; each tuner's best trial judged by `orchestrator
compare` whenever it changes), the evaluation (every recommendation
measured against the start, independently of the search), the table and
the goals. The exit status counts the goals: 1 when one is missed.
"""

import argparse
import json
import math
import os
import pickle
import random
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import k3  # noqa: E402
import landscapes  # noqa: E402
import plot  # noqa: E402
import standard  # noqa: E402
import truth  # noqa: E402
from compare import Judge  # noqa: E402
from loop import TinyStack, run_loop  # noqa: E402
from stack import (REPO, TINYK3, Engine, Proc, ensure_checkpoint, free_port, point,  # noqa: E402
                   starting_profile, tinyk3_argv, wait_port)
from tuners import TUNERS  # noqa: E402

CONTESTANTS = ["loop-bandit", "loop-model", "tpe", "random", "coordinate"]
LANDSCAPES = ["A", "B", "C"]


def load():
    return os.getloadavg()[0]


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--landscapes", default=",".join(LANDSCAPES),
                    help="which landscapes, comma-separated (A: slow start, B: near the optimum, "
                         "C: the real kimi-k3-in-c engine)")
    ap.add_argument("--quick", action="store_true",
                    help="a smoke run: 1 seed, 25 s budget, 60 s loop wall, tiny lattices")
    ap.add_argument("--seeds", type=int, default=3, help="seeds per landscape")
    ap.add_argument("--budget", type=float, default=60.0,
                    help="engine seconds per contestant and seed (a tuner's comparisons included)")
    ap.add_argument("--loop-wall", type=float, default=150.0,
                    help="wall seconds a loop runs at most (it also stops at the budget)")
    ap.add_argument("--gt-rounds", type=int, default=6, help="rounds of the ground-truth lattice")
    ap.add_argument("--eval-rounds", type=int, default=8, help="rounds of the recommendations' A/B")
    ap.add_argument("--final-rounds", type=int, default=16,
                    help="more rounds for each seed's final recommendations, pooled with their eval rounds")
    ap.add_argument("--contestants", default=",".join(CONTESTANTS))
    ap.add_argument("--out", default=str(REPO / "ledger/shootout/results"),
                    help="where the tables, plot and JSON go")
    ap.add_argument("--shipped-judge", action="store_true",
                    help="run the loop and compare with [measure] exactly as shipped (no loosened machine checks)")
    ap.add_argument("--keep", action="store_true", help="keep the per-seed ledgers and logs")
    a = ap.parse_args(argv)
    if a.quick:
        a.seeds, a.budget, a.loop_wall, a.gt_rounds, a.eval_rounds, a.final_rounds = 1, 25.0, 60.0, 2, 3, 3
    a.landscape_list = [x.strip().upper() for x in a.landscapes.split(",") if x.strip()]
    for x in a.landscape_list:
        if x not in LANDSCAPES:
            ap.error(f"unknown landscape {x!r}; choose from {', '.join(LANDSCAPES)}")
    a.contestant_list = [c for c in a.contestants.split(",") if c]
    for c in a.contestant_list:
        if c not in CONTESTANTS:
            ap.error(f"unknown contestant {c!r}; choose from {', '.join(CONTESTANTS)}")
    return a


def main():
    a = parse_args()
    for b in (TINYK3, REPO / "target/release/orchestrator"):
        if not b.exists():
            sys.exit(f"{b} is missing: cargo build --release -p orchestrator -p tinyk3")
    facts = k3.Facts.from_env() if "C" in a.landscape_list else None

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    base = REPO / "ledger/shootout"
    run_dir = base / time.strftime("run-%Y%m%dT%H%M%S")
    run_dir.mkdir(parents=True)
    t_begin = time.time()
    loads = [(0.0, load())]
    # The commit the binaries were built from: read now, as a commit made
    # while the run goes on would be a different one.
    built_from = commit()

    def say(msg):
        print(f"[{time.time() - t_begin:6.0f} s, load {load():4.1f}] {msg}", flush=True)

    reports, es = {}, None
    try:
        tiny = None
        if {"A", "B"} & set(a.landscape_list):
            tiny, es = set_up_tiny(base, run_dir, a, say)
        if "A" in a.landscape_list:
            reports["A"] = run_landscape(tiny["A"], tiny["A_truth"], run_dir, a, say, loads)
        if "B" in a.landscape_list:
            key, gap, gap_ci, in_band = standard.choose_near_start(tiny["A_truth"][0], tiny["A_truth"][1])
            lb = landscapes.landscape_b(tiny["A"], tiny["pins"], key, gap, gap_ci, in_band)
            say(f"landscape B starts at {lb.why}")
            reports["B"] = run_landscape(lb, None, run_dir, a, say, loads)
        if "C" in a.landscape_list:
            lc = landscapes.landscape_c(facts, k3.K3Stack(facts), a.quick)
            reports["C"] = run_landscape(lc, None, run_dir, a, say, loads)
    finally:
        if es is not None:
            es.stop()
        if not a.keep:
            shutil.rmtree(run_dir, ignore_errors=True)

    wall = time.time() - t_begin
    header = (f"Shoot-out of {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: landscapes "
              f"{', '.join(reports)}; {a.seeds} seed(s) each, budget {a.budget:.0f} engine s per contestant "
              f"and seed, loops at most {a.loop_wall:.0f} wall s; load average "
              f"{min(x for _, x in loads):.1f}-{max(x for _, x in loads):.1f} (sampled between phases); "
              f"{wall / 60:.1f} min in all; commit {built_from}.")
    goals = [g for r in reports.values() for g in r["goals"]]
    missed = [g for g in goals if not g["met"]]
    goal_lines = ["Goals:"] + [f"- {g['line']}" for g in goals] + [
        f"- (not evaluated) {s}" for r in reports.values() for s in r["goals_skipped"]]
    goal_lines.append(f"{len(goals) - len(missed)} of {len(goals)} goals met"
                      + (f"; MISSED: {len(missed)}" if missed else "."))
    table = "\n\n".join([header] + [r["table_md"] for r in reports.values()] + ["\n".join(goal_lines)]) + "\n"
    doc = {"header": header, "landscapes": reports, "goals": goals, "wall_s": wall, "loads": loads,
           "args": {k: v for k, v in vars(a).items()}}
    (out / "shootout.json").write_text(json.dumps(doc, indent=1, default=str))
    (out / "table.md").write_text(table)
    plot.write_svg(out / "shootout.svg", doc)
    print()
    print(table)
    say(f"wrote {out / 'table.md'}, {out / 'shootout.svg'}, {out / 'shootout.json'}")
    if missed:
        print(f"{len(missed)} goal(s) missed:", *(f"  {g['line']}" for g in missed), sep="\n")
        sys.exit(1)


def commit():
    try:
        return subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def set_up_tiny(base, run_dir, a, say):
    """Landscapes A and B: the checkpoint, the far tier shared by every
    contestant, the start's heat and the tuners' pin list, and A's ground
    truth (B's start is chosen from it, so B needs it too)."""
    ck = base / "ck-4x32-small"
    ensure_checkpoint(ck)
    es_port = free_port()
    # The far tier, shared by every contestant: the embedded default's
    # expert server with its default capacity (expert_server_max_warm).
    es = Proc([str(TINYK3), "expert-server", "--model", str(ck), "--listen",
               f"127.0.0.1:{es_port}", "--warm-set", "1024"], run_dir / "expert-server.log")
    try:
        return set_up_on(ck, es, es_port, run_dir, a, say), es
    except BaseException:
        es.stop()
        raise


def set_up_on(ck, es, es_port, run_dir, a, say):
    wait_port(es_port, 30)
    start = starting_profile(ck, f"127.0.0.1:{es_port}")
    argv = tinyk3_argv(ck)
    setup = Engine(argv, run_dir / "setup", run_dir / "setup.log", "setup")
    # Heat of the start for the tuners' pin list (the loop makes its own
    # from its own runs' heat, the same prompt, so the same ranking), and
    # the far tier brought to its steady state (it warms in the background
    # whatever warm_set says), so no contestant meets it colder.
    for _ in range(3):
        setup.run(start)
    setup.run(point(start, "", pin_count=0, warm_set=128, draft_len=0, trunk_fraction=None))
    pins = run_dir / "pins.txt"
    subprocess.run([str(TINYK3), "pins", str(ck), "--hist", str(setup.heat / "expert_hist.json"),
                    "--out", str(pins)], check=True, capture_output=True)
    say(f"set-up done: start = {start.short()}; far tier on :{es_port}")
    la = landscapes.landscape_a(argv, TinyStack(ck, a.shipped_judge), start, str(pins), a.quick)
    return {"A": la, "pins": str(pins), "A_truth": ground_truth(la, run_dir, a, say)}


def ground_truth(L, run_dir, a, say):
    eng = Engine(L.engine_argv, run_dir / L.name / "truth", run_dir / L.name / "truth.log", "truth")
    say(f"{L.name}: ground truth: {len(L.lattice)} lattice points x {a.gt_rounds} rounds against the start")
    gt, ref = truth.measure(eng, L.start, L.lattice, a.gt_rounds, seed=1,
                            progress=lambda r, n: say(f"  {L.name} ground truth round {r}/{n}"))
    opt_key = min((k for k in gt if gt[k]["median"] is not None), key=lambda k: gt[k]["median"])
    g = gt[opt_key]
    say(f"{L.name}: grid optimum {L.lattice[opt_key].short()}: {math.exp(-g['median']):.2f}x the start "
        f"[{math.exp(-g['hi']):.2f}, {math.exp(-g['lo']):.2f}]; start {statistics.median(ref):.4f} s/token")
    return gt, opt_key, statistics.median(ref)


def run_landscape(L, gt_done, run_dir, a, say, loads):
    t0 = time.time()
    gt, opt_key, start_spt = gt_done or ground_truth(L, run_dir, a, say)
    loads.append((time.time() - t0, load()))
    contestants = [c for c in a.contestant_list
                   if not c.startswith("loop-") or c.split("-", 1)[1] in L.stack.proposers]
    results = []
    for seed in range(1, a.seeds + 1):
        for c in contestants:
            say(f"{L.name}: {c}, seed {seed}: budget {a.budget:.0f} engine s")
            ts = time.time()
            d = run_dir / L.name / f"{c}-{seed}"
            if c.startswith("loop-"):
                r = run_loop(d, L.stack, L.start, c.split("-", 1)[1], a.budget, a.loop_wall, say)
            else:
                eng = Engine(L.engine_argv, d, d / "engine.log", c)
                (d / "engine.log").touch()
                judge = Judge(d / "compare", L.compare_config, L.start)
                r = TUNERS[c](eng, L.start, L.space, a.budget, seed, judge)
                r["wall_s"] = time.time() - ts
            r.update(contestant=c, seed=seed)
            results.append(r)
            loads.append((time.time() - t0, load()))
            conf = r["confirmed_recommended"]
            say(f"  {c} seed {seed}: recommends {r['recommended'].short()}, claims "
                f"{math.exp(-r['claimed']):.2f}x; confirmed {conf.short() if conf.key() != L.start.key() else 'no change'}; "
                f"{r['engine_s']:.0f} engine s, {r['wall_s']:.0f} wall s")

    # ---- evaluation: every recommendation, independently of the search ----
    recs = {}
    for r in results:
        for _t, p, _c, _i in r["trajectory"] + r["confirmed"]:
            if p.key() != L.start.key():
                recs[p.key()] = p
    ev_engine = Engine(L.engine_argv, run_dir / L.name / "eval", run_dir / L.name / "eval.log", "eval")
    say(f"{L.name}: evaluation: {len(recs)} distinct recommended profiles x {a.eval_rounds} rounds")
    ev, _ = truth.measure(ev_engine, L.start, recs, a.eval_rounds, seed=2,
                          progress=lambda r, n: say(f"  {L.name} evaluation round {r}/{n}"))
    # The final recommendations, whose claims are judged, get more rounds:
    # a second measurement by the same procedure, pooled with the first.
    finals = {p.key(): p for r in results for p in (r["recommended"], r["confirmed_recommended"])
              if p.key() != L.start.key()}
    if finals and a.final_rounds > 0:
        say(f"{L.name}: final recommendations: {len(finals)} distinct profiles x {a.final_rounds} more rounds")
        more, _ = truth.measure(ev_engine, L.start, finals, a.final_rounds, seed=3,
                                progress=lambda r, n: say(f"  {L.name} final round {r}/{n}"))
        pool_rng = random.Random(4)
        for k in finals:
            ev[k] = truth.pool(ev[k], more[k], pool_rng)
    ev[L.start.key()] = {"median": 0.0, "lo": 0.0, "hi": 0.0, "n": 0, "log_ratios": []}
    loads.append((time.time() - t0, load()))
    try:
        with open(run_dir / f"raw-{L.name}.pkl", "wb") as f:  # to re-summarize without re-running
            pickle.dump({"results": results, "ev": ev, "gt": gt, "opt_key": opt_key}, f)
    except (OSError, pickle.PicklingError, TypeError, AttributeError):
        pass
    report = summarize(L, results, ev, gt, opt_key, start_spt, a, time.time() - t0)
    say(f"{L.name}: done in {(time.time() - t0) / 60:.1f} min")
    return report


def secs(t):
    return "never" if t is None or math.isinf(t) else f"{t:.1f} s"


def x(lg):
    return f"{math.exp(-lg):.2f}x" if lg is not None else "-"


def points(traj):
    return [(t, p.key(), c, iv) for t, p, c, iv in traj]


def row_of(L, r, ev, opt):
    rec, conf = r["recommended"], r["confirmed_recommended"]
    e, ce = ev[rec.key()], ev[conf.key()]
    t90, t90_first = standard.held_time(points(r["trajectory"]), ev, opt)
    t90c, t90c_first = standard.held_time(points(r["confirmed"]), ev, opt, need_claim=True)
    ci = r["claimed_interval"]
    claim_hi = ci[1] if ci else r["claimed"]
    cci = r["confirmed_interval"]
    recs = []
    for _t, p, _c, iv in r["confirmed"][1:]:
        t = ev.get(p.key(), {})
        recs.append({"profile": p.short(), "true": t.get("median"), "lo": t.get("lo"), "hi": t.get("hi"),
                     "claim_interval": iv})
    loop = r["contestant"].startswith("loop-")
    return {
        "contestant": r["contestant"], "seed": r["seed"], "recommended": rec.short(),
        "recommended_knobs": rec.as_dict(),
        "true": e["median"], "true_lo": e["lo"], "true_hi": e["hi"], "claimed": r["claimed"],
        "claimed_interval": ci, "regret": e["median"] - opt, "share": standard.share(e["median"], opt),
        "t90": t90, "t90_first": t90_first, "t90_confirmed": t90c, "t90_confirmed_first": t90c_first,
        "slower_than_start": e["lo"] is not None and e["lo"] > 0,
        "slower_than_claimed": e["median"] is not None and e["median"] > claim_hi + 1e-12,
        "confirmed": conf.short() if conf.key() != L.start.key() else "no change",
        "confirmed_true": ce["median"], "confirmed_true_lo": ce["lo"], "confirmed_true_hi": ce["hi"],
        "confirmed_claim": r["confirmed_claim"], "confirmed_interval": cci,
        "confirmed_share": standard.share(ce["median"], opt),
        "confirmed_slower_than_start": ce["lo"] is not None and ce["lo"] > 0,
        "confirmed_overclaims": ce["median"] is not None and ce["median"] > cci[1] + 1e-12,
        "recs": recs,
        "after_last": standard.after_last_approval(r) if loop else None,
        "engine_s": r["engine_s"], "wall_s": r["wall_s"], "converged_at": r.get("converged_at"),
        "compare_engine_s": r.get("compare_engine_s"), "comparisons": r.get("comparisons"),
        "trajectory": [(t, ev[p.key()]["median"]) for t, p, _c, _i in r["trajectory"]],
        "confirmed_trajectory": [(t, ev[p.key()]["median"]) for t, p, _c, _i in r["confirmed"]],
        "diagnosis": r.get("diagnosis"), "approvals": r.get("approvals"), "trials": r.get("trials"),
    }



def kind_rows(by_kind):
    """A diagnosis table's rows, the costliest kind first."""
    return [f"| {k} | {v['experiments']} | {v['runs']} | {v['engine_s']:.1f} | "
            f"{', '.join(f'{a} {b}' for a, b in sorted(v['verdicts'].items()))} |"
            for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1]["engine_s"])]

def summarize(L, results, ev, gt, opt_key, start_spt, a, wall):
    opt = gt[opt_key]["median"]
    rows = [row_of(L, r, ev, opt) for r in results]
    lines = [
        f"### Landscape {L.name}: {L.title}",
        "",
        f"Start: {L.start.short()} ({L.why}), {start_spt:.4f} s/token. Grid optimum: "
        f"{L.lattice[opt_key].short()} = {x(opt)} the start [{x(gt[opt_key]['hi'])}, {x(gt[opt_key]['lo'])}] "
        f"({len(L.lattice)} lattice points, {a.gt_rounds} rounds); 90% of its gain = {math.exp(-0.9 * opt):.2f}x. "
        f"Landscape wall time {wall / 60:.1f} min.",
        "",
        "| contestant | seed | recommended | true speed-up [95%] | claimed | share of optimum's gain "
        "| engine s to 90%, any recommendation: held (first) | confirmed recommendation | its true speed-up "
        "| its claim | engine s to a confirmed 90%: held (first) | slower than start | slower than claimed "
        "| engine s (comparisons) | wall s |",
        "|---|---:|---|---|---|---:|---:|---|---|---|---:|---|---|---:|---:|",
    ]
    for w in rows:
        ci, cci = w["claimed_interval"], w["confirmed_interval"]
        claimed = x(w["claimed"]) + (f" [{x(ci[1])}, {x(ci[0])}]" if ci else "")
        cclaim = x(w["confirmed_claim"]) + f" [{x(cci[1])}, {x(cci[0])}]" if w["confirmed"] != "no change" else "-"
        comp = f" ({w['compare_engine_s']:.0f})" if w["compare_engine_s"] is not None else ""
        lines.append(
            f"| {w['contestant']} | {w['seed']} | {w['recommended']} | {x(w['true'])} "
            f"[{x(w['true_hi'])}, {x(w['true_lo'])}] | {claimed} | {100 * w['share']:.0f}% | "
            f"{secs(w['t90'])} ({secs(w['t90_first'])}) | {w['confirmed']} | {x(w['confirmed_true'])} | {cclaim} | "
            f"{secs(w['t90_confirmed'])} ({secs(w['t90_confirmed_first'])}) | "
            f"{'YES' if w['slower_than_start'] else 'no'} | {'YES' if w['slower_than_claimed'] else 'no'} | "
            f"{w['engine_s']:.0f}{comp} | {w['wall_s']:.0f} |")
    lines += ["", "| contestant | median true speed-up | median regret | median engine s to 90%, any recommendation "
              "(seeds) | median engine s to a confirmed 90% (seeds) | truly slower than start | truly slower than "
              "claimed | confirmed: slower than start | confirmed: slower than claimed | engine s after the last "
              "approval / that wall time |",
              "|---|---|---:|---|---|---:|---:|---:|---:|---|"]
    summary = {}
    for c in dict.fromkeys(w["contestant"] for w in rows):
        ws = [w for w in rows if w["contestant"] == c]
        inf = lambda k: [w[k] if w[k] is not None else math.inf for w in ws]  # noqa: E731
        s = summary[c] = {
            "t90_median": statistics.median(inf("t90")), "reached": sum(w["t90"] is not None for w in ws),
            "t90_confirmed_median": statistics.median(inf("t90_confirmed")),
            "reached_confirmed": sum(w["t90_confirmed"] is not None for w in ws), "seeds": len(ws),
            "true_median": statistics.median(w["true"] for w in ws),
            "regret_median": statistics.median(w["regret"] for w in ws),
            "slower_than_start": sum(w["slower_than_start"] for w in ws),
            "slower_than_claimed": sum(w["slower_than_claimed"] for w in ws),
            "confirmed_slower_than_start": sum(w["confirmed_slower_than_start"] for w in ws),
            "confirmed_overclaims": sum(w["confirmed_overclaims"] for w in ws),
        }
        after = ", ".join(f"{w['after_last']['engine_s']:.0f}/{w['after_last']['wall_s']:.0f} s "
                          f"({100 * w['after_last']['share']:.0f}%)" for w in ws if w["after_last"]) or "-"
        n = len(ws)
        lines.append(
            f"| {c} | {x(s['true_median'])} | {100 * math.expm1(s['regret_median']):+.0f}% | "
            f"{secs(s['t90_median'])} ({s['reached']}/{n}) | {secs(s['t90_confirmed_median'])} "
            f"({s['reached_confirmed']}/{n}) | {s['slower_than_start']}/{n} | {s['slower_than_claimed']}/{n} | "
            f"{s['confirmed_slower_than_start']}/{n} | {s['confirmed_overclaims']}/{n} | {after} |")
    goals, skipped = standard.evaluate_goals(L.name, rows)
    lines += ["", f"Goals on {L.name}:"] + [f"- {g.line()}" for g in goals] + [f"- (not evaluated) {s}"
                                                                                for s in skipped]
    rates = standard.tuner_rates(rows)
    if L.name in ("B", "C") and rates:
        lines += ["", "Tuners' rates (share of seeds): truly slower than the start / claim above the truth; "
                      "for the best trial as the tool gives it, then for its confirmed recommendation:"]
        for c, rt in rates.items():
            lines.append(f"- {c}: {rt['slower_than_start']:.0%} / {rt['overclaims']:.0%}; confirmed "
                         f"{rt['confirmed_slower_than_start']:.0%} / {rt['confirmed_overclaims']:.0%}")
    for w in rows:
        if w["diagnosis"]:
            lines += ["", f"Where {w['contestant']} seed {w['seed']} spent its engine time on {L.name} "
                      f"({w['diagnosis']['cycles']} cycles, {w['diagnosis']['rejected_cycles']} of them rejected):",
                      "", "| kind | experiments | runs | engine s | verdicts |", "|---|---:|---:|---:|---|"]
            lines += kind_rows(w["diagnosis"]["by_kind"])
            after = w["diagnosis"].get("after_last_by_kind")
            if after:
                lines += ["", "Of which after its last approval (runs started after it; a run's wall time, "
                              "where the share above counts the engine clock's):",
                          "", "| kind | experiments | runs | engine s | verdicts |", "|---|---:|---:|---:|---|"]
                lines += kind_rows(after)
        if w["comparisons"]:
            verdicts = {}
            for cmp in w["comparisons"]:
                key = ("stopped at the budget" if cmp.get("stopped") else
                       "confirmed win" if cmp["confirmed"] else cmp["verdict"] or "failed")
                verdicts[key] = verdicts.get(key, 0) + 1
            lines += ["", f"{w['contestant']} seed {w['seed']} on {L.name}: {len(w['comparisons'])} comparison(s), "
                      f"{w['compare_engine_s']:.0f} engine s: "
                      + ", ".join(f"{k} {v}" for k, v in sorted(verdicts.items()))]
    return {"name": L.name, "title": L.title, "start": L.start.short(), "why": L.why,
            "rows": rows, "summary": summary, "optimum": opt, "optimum_profile": L.lattice[opt_key].short(),
            "grid": {k: {"profile": L.lattice[k].short(), "median": v["median"], "lo": v["lo"], "hi": v["hi"]}
                     for k, v in gt.items()},
            "budget": a.budget, "seeds": a.seeds, "wall_s": wall,
            "goals": [dict(vars(g), line=g.line()) for g in goals], "goals_skipped": skipped,
            "tuner_rates": rates, "table_md": "\n".join(lines) + "\n"}


if __name__ == "__main__":
    main()
