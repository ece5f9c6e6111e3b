"""The orchestrator daemon as a contestant, with an auto-approver beside it.

The daemon is the real `orchestrator run` on the repository's `config.toml`,
changed only where the harness has to (each substitution must find its text,
or the harness stops):

- paths (ledger, live profile, work dir, heat) go to a fresh directory per
  seed; the checkpoint is the shootout's (so `expert_bytes` is its expert's);
- the bench argv goes through the engine clock (`engine_clock.py`);
- the stack is not embedded: the harness runs `tinyk3 serve` (the served
  model and the live surface) and shares one `tinyk3 expert-server` (the far
  tier) with every contestant, so all of them meet the same far tier;
- `interval_s` 30 -> 1 (the wait between cycles is no engine time, but it is
  wall time the hour cannot spare); `proposer` is the contestant's;
- the metrics port is a free one;
- `max_discarded_blocks` 8 -> 1000 (see LOOSENED below; `--shipped-judge`
  keeps it).

Everything in `[measure]` (the judge, floors, confirmations) is as shipped.

The auto-approver is what an attentive operator does: it polls `stage list
--json` and runs `stage approve ID` on each staged win as it appears, then
restarts `tinyk3 serve` on the new live profile (the server reads its profile
only at start; the bench reads the live profile at every run). The daemon
never approves anything itself.

Engine time is the engine clock's sum for bench runs plus the recorded wall
time of surface runs (a `remeasure` A/A of the live server, which no bench
argv carries), read from the ledger. The daemon's own time (model calls,
SQLite, planning, the interval) is not counted, as for the tuners it is
their Python and Optuna.
"""

import json
import math
import os
import sqlite3
import subprocess
import time
import tomllib
from pathlib import Path

from stack import (CLOCK_ARGV, EXPERT_BYTES, ORCH, REPO, TINYK3, Proc, Profile, clock_total, free_port,
                   substitute, wait_http)


# The machine check the repository's own tests loosen on a loaded machine
# (tests/e2e/report_cli.rs). Before the contention gate this also lifted the absolute
# `max_pressure` 0.97: at load 15 on 2 cores every run was "under pressure"
# (PSI near 100%), every block was discarded and every floor ended
# `inconclusive` (2026-12-01, --quick at load 15: both loops spent their whole
# budget on one such floor). The judge now discards a block only for a burst
# above its floor's contention (`max_contention_rise`), so that key is as
# shipped. --shipped-judge keeps this one as shipped too.
LOOSENED = [
    ("max_discarded_blocks = 8", "max_discarded_blocks = 1000"),
]


def write_config(d: Path, ck: Path, log: Path, proposer: str, serve_port: int, metrics_port: int,
                 shipped_judge: bool = False):
    text = (REPO / "config.toml").read_text()
    text = text[: text.index("[embedded]")]
    q = json.dumps
    text = substitute(text, [
        ('path = "ledger/orchestrator.db"', f"path = {q(str(d / 'orchestrator.db'))}"),
        ('dir = "experiments"', f"dir = {q(str(REPO / 'experiments'))}"),
        ('live_profile = "ledger/profiles/live.toml"', f"live_profile = {q(str(d / 'profiles/live.toml'))}"),
        ('work_dir = "ledger/work"', f"work_dir = {q(str(d / 'work'))}"),
        ("expert_bytes = 1572864", f"expert_bytes = {EXPERT_BYTES}"),
        ('"target/release/tinyk3", "bench", "ledger/tinyk3-demo",',
         ", ".join(q(x) for x in [*CLOCK_ARGV, str(log), "--", str(TINYK3), "bench", str(ck)]) + ","),
        ('"--dump-cache-trace", "ledger/heat",', f'"--dump-cache-trace", {q(str(d / "heat"))},'),
        ('base_url = "http://127.0.0.1:8181"\n', f'base_url = "http://127.0.0.1:{serve_port}"\n'),
        ('url = "http://127.0.0.1:8181/metrics"', f'url = "http://127.0.0.1:{serve_port}/metrics"'),
        ('heat = "ledger/heat/expert_hist.json"', f"heat = {q(str(d / 'heat/expert_hist.json'))}"),
        ('heat_trace = "ledger/heat/expert_trace.bin"', f"heat_trace = {q(str(d / 'heat/expert_trace.bin'))}"),
        ('"target/release/tinyk3", "serve", "ledger/tinyk3-demo",', f'{q(str(TINYK3))}, "serve", {q(str(ck))},'),
        ('base_url = "http://127.0.0.1:8181/v1"', f'base_url = "http://127.0.0.1:{serve_port}/v1"'),
        ("interval_s = 30", "interval_s = 1"),
        ('proposer = "model"', f'proposer = "{proposer}"'),
        ('metrics_listen = "127.0.0.1:9464"', f'metrics_listen = "127.0.0.1:{metrics_port}"'),
    ])
    if not shipped_judge:
        text = substitute(text, LOOSENED)
    (d / "config.toml").write_text(text)
    return d / "config.toml"


def read_profile(path: Path) -> Profile:
    t = tomllib.loads(path.read_text())
    pins = t["pins"]["file"]
    if pins:
        pins = str((path.parent / pins).resolve())
    return Profile(budget_gb=t["memory"]["budget_gb"], trunk_gb=t["memory"]["trunk_gb"],
                   cache_gb=t["memory"]["cache_gb"], pins_file=pins, pin_count=t["pins"]["count"],
                   far_addr=t["far"]["addr"], warm_set=t["far"]["warm_set"],
                   draft_len=t["speculative"]["draft_len"], threads=t["compute"]["threads"])


def ro(db: Path):
    return sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)


def surface_seconds(db: Path) -> float:
    if not db.exists():
        return 0.0
    try:
        with ro(db) as c:
            return c.execute("SELECT COALESCE(SUM(r.duration_s), 0) FROM runs r JOIN experiments e "
                             "ON r.experiment_id = e.id WHERE e.method = 'surface'").fetchone()[0]
    except sqlite3.Error:
        return 0.0


def waiting_converged(db: Path) -> bool:
    """Whether the daemon waits converged now: nothing on its live profile is
    expected to tell it anything new, so it runs no engine until a change
    (an approval would be one; the approver found nothing staged)."""
    if not db.exists():
        return False
    try:
        with ro(db) as c:
            return c.execute("SELECT COUNT(*) FROM waits WHERE ended_at IS NULL "
                             "AND kind = 'converged'").fetchone()[0] > 0
    except sqlite3.Error:
        return False


def diagnose(db: Path) -> dict:
    """Where the loop's engine time went, by kind of experiment, from its
    ledger: over the whole run (`by_kind`) and over the runs that started
    after its last approval (`after_last_by_kind`, `{}` when it approved
    nothing), the part the engine-share goal counts."""
    q = """
      SELECT CASE WHEN e.confirmation_of IS NOT NULL THEN 'confirmation A/B'
                  WHEN e.menu_id = 'remeasure' AND e.proposal_id IS NULL THEN 'noise floor (A/A)'
                  WHEN e.menu_id = 'remeasure' THEN 'remeasure (proposed A/A)'
                  WHEN EXISTS (SELECT 1 FROM realizations z WHERE z.experiment_id = e.id)
                       THEN 'realization A/B'
                  ELSE e.menu_id || ' A/B' END AS kind,
             e.id, COALESCE(v.kind, '-'),
             (SELECT COUNT(*) FROM runs r WHERE r.experiment_id = e.id AND r.started_at >= ?),
             (SELECT COALESCE(SUM(r.duration_s), 0) FROM runs r
               WHERE r.experiment_id = e.id AND r.started_at >= ?)
      FROM experiments e LEFT JOIN verdicts v ON v.experiment_id = e.id"""

    def by_kind(c, since):
        out = {}
        for kind, _id, verdict, n, secs in c.execute(q, (since, since)):
            if n == 0:
                continue
            k = out.setdefault(kind, {"experiments": 0, "runs": 0, "engine_s": 0.0, "verdicts": {}})
            k["experiments"] += 1
            k["runs"] += n
            k["engine_s"] += secs
            k["verdicts"][verdict] = k["verdicts"].get(verdict, 0) + 1
        return out

    with ro(db) as c:
        out = by_kind(c, "")
        last = c.execute("SELECT MAX(decided_at) FROM stages WHERE state = 'approved'").fetchone()[0]
        after = by_kind(c, last) if last else {}
        cycles = c.execute("SELECT COUNT(*) FROM cycles").fetchone()[0]
        rejected = c.execute("SELECT COUNT(*) FROM verdicts WHERE kind = 'rejected'").fetchone()[0]
    return {"by_kind": out, "after_last_by_kind": after, "cycles": cycles, "rejected_cycles": rejected}


def orch(cfg: Path, *args, check=True):
    env = dict(os.environ, ORCHESTRATOR_CONFIG=str(cfg))
    return subprocess.run([str(ORCH), *args], env=env, capture_output=True, text=True, check=check)


class TinyStack:
    """Landscapes A and B: the repository's config.toml on the shoot-out's
    checkpoint, with `tinyk3 serve` for the served model and the surface."""

    def __init__(self, ck: Path, shipped_judge: bool):
        self.ck, self.shipped_judge = ck, shipped_judge
        self.proposers = ("bandit", "model")

    def config(self, d: Path, log: Path, proposer: str, serve_port: int) -> Path:
        return write_config(d, self.ck, log, proposer, serve_port, free_port(), self.shipped_judge)

    def read_live(self, path: Path):
        return read_profile(path)

    def serve(self, d: Path, port: int):
        s = Proc([str(TINYK3), "serve", str(self.ck), "--profile", str(d / "profiles/live.toml"),
                  "--listen", f"127.0.0.1:{port}", "--context-tokens", "256"], d / "serve.log")
        wait_http(f"http://127.0.0.1:{port}/health", 180)
        return s


def run_loop(d: Path, stack, start, proposer: str, budget: float, wall_cap: float, log_fn):
    """The daemon until it spent `budget` engine seconds or ran `wall_cap`
    wall seconds, whichever comes first (a loop that waits once converged
    spends little engine time, so the wall cap ends its run, and what it
    spends waiting is measured). `stack`:
    `TinyStack` or `k3.K3Stack`."""
    d.mkdir(parents=True)
    (d / "profiles").mkdir()
    (d / "profiles/live.toml").write_text(start.to_toml())
    log = d / "engine.log"
    log.touch()
    serve_port = free_port()
    cfg = stack.config(d, log, proposer, serve_port)
    db = d / "orchestrator.db"

    serve = stack.serve(d, serve_port)
    t0 = time.time()
    daemon = Proc([str(ORCH), "run"], d / "daemon.log",
                  env=dict(os.environ, ORCHESTRATOR_CONFIG=str(cfg)))
    trajectory = [(0.0, start, 0.0, (0.0, 0.0))]
    claimed, lo, hi = 0.0, 0.0, 0.0
    approvals = []
    spent = 0.0
    polls = 0
    converged_at = None
    try:
        while True:
            time.sleep(0.5)
            spent = clock_total(log) + surface_seconds(db)
            if spent >= budget or time.time() - t0 >= wall_cap or daemon.p.poll() is not None:
                break
            polls += 1
            if not db.exists() or polls % 4:
                continue  # the approver looks every 2 s: its processes compete with the engine
            r = orch(cfg, "stage", "list", "--json", check=False)
            if r.returncode != 0:
                continue
            staged = json.loads(r.stdout or "[]")
            # Converged with nothing to approve: the daemon waits for a
            # change. It runs on to the wall cap all the same, so the engine
            # time it spends after its last approval is measured over the
            # wall time that remains, not assumed to be nil (until
            # 2026-12-05 the harness stopped it here, and the share divided
            # by the wall time up to convergence only).
            if not staged and converged_at is None and waiting_converged(db):
                converged_at = {"engine_s": spent, "wall_s": time.time() - t0}
                log_fn(f"    converged at {spent:.0f} s engine: it waits to the wall cap")
            for st in sorted(staged, key=lambda s: s["id"]):
                a = orch(cfg, "stage", "approve", str(st["id"]), "--by", "shootout-auto-approver",
                         check=False)
                if a.returncode != 0:
                    continue  # expired by the approval before it
                claimed += st["effect_log_ratio"]
                lo += st["interval_log_ratio"][0]
                hi += st["interval_log_ratio"][1]
                prof = stack.read_live(d / "profiles/live.toml")
                at = clock_total(log) + surface_seconds(db)
                trajectory.append((at, prof, claimed, (lo, hi)))
                approvals.append({"stage": st["id"], "experiment": st.get("menu_id", st.get("experiment")),
                                  "parameters": st.get("parameters"),
                                  "effect": st["effect_log_ratio"], "engine_s": at,
                                  "wall_s": time.time() - t0})
                log_fn(f"    approved stage {st['id']} ({st.get('menu_id')} "
                       f"{json.dumps(st.get('parameters'))}): effect {100 * math.expm1(st['effect_log_ratio']):+.1f}% "
                       f"at {at:.0f} s engine; live now {prof.short()}")
                if serve is not None:
                    serve.stop()
                    serve = stack.serve(d, serve_port)
    finally:
        # The run ends here: what the daemon does while it stops is not
        # the contestant's time.
        wall = time.time() - t0
        spent = clock_total(log) + surface_seconds(db)
        daemon.stop(timeout=120)
        if serve is not None:
            serve.stop()
    diag = diagnose(db) if db.exists() else {}
    live = stack.read_live(d / "profiles/live.toml")
    # The loop's approvals are its confirmed recommendations: both the old
    # and the new columns read the same trajectory.
    return {"recommended": live, "claimed": claimed, "claimed_interval": (lo, hi),
            "trajectory": trajectory, "confirmed": trajectory, "confirmed_recommended": live,
            "confirmed_claim": claimed, "confirmed_interval": (lo, hi),
            "engine_s": spent, "wall_s": wall, "approvals": approvals, "converged_at": converged_at,
            "diagnosis": diag, "surface_s": surface_seconds(db)}
