#!/usr/bin/env python3
"""The stand-aside benchmark: what the daemon costs the live server's users.

A real `tinyk3 serve` (the embedded default's checkpoint, starting profile
and far tier) serves a client that sends it chat requests at a steady rate,
open loop (one every --period-s, whether or not the last was answered).
Meanwhile the daemon is, in interleaved phases of --phase-s each:

- off: not running;
- stand_aside: `orchestrator run` on the shipped config.toml (the embedded
  table removed, pointed at this server), which maps the live load: it
  stands aside for the users;
- no_quiet: the same with `stand_aside_quiet_s = 0`: a run may start in any
  gap between two requests (what the quiet spell is for);
- no_stand_aside: the same config without the live-load names: it measures
  as if nobody used the server (the harm standing aside avoids).

The arms are ordered by a balanced Latin square (Williams): over four
rounds each arm comes first once and follows every other arm once, so
neither a drift of the machine's own load nor what one arm leaves behind
falls on one arm more than another. With --arms off,stand_aside (the
goal's two) they alternate, off first in even rounds and second in odd
ones, and each gets half of the wall time, not a quarter. A request belongs to the arm in force
when it was sent; left out are those sent in the first --settle-s of a
phase, or before every request sent in an earlier phase was answered (a
backlog the previous arm left in the server's queue is that arm's). It prints each arm's
median and p99 latency and the ratios to `off`, and exits 1 when the
stand_aside arm misses the goal (p50 within 1.1x, p99 within 1.5x of off).

    bash benches/stand_aside/run.sh [--rounds 4 --phase-s 120 ...]
"""

import argparse
import json
import math
import os
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ORCH = os.path.join(REPO, "target", "release", "orchestrator")
TINYK3 = os.path.join(REPO, "target", "release", "tinyk3")
ARMS = ["off", "stand_aside", "no_quiet", "no_stand_aside"]
GOAL = {"p50": 1.1, "p99": 1.5}
LIVE_NAMES = ("live_requests_processing", "live_requests_waiting", "live_requests_total")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def config_lines(text, key):
    return [l for l in text.splitlines() if l.startswith(key + " = ")]


def shipped_init_args():
    text = open(os.path.join(REPO, "config.toml")).read()
    line = config_lines(text, "init_args")[0]
    return json.loads(line.split(" = ", 1)[1])


def arm_config(work, arm, model, live_addr, far_addr, max_wait_s):
    """config.toml without [embedded], pointed at this live server, its
    paths under work/arm; no_stand_aside drops the live-load names."""
    text = open(os.path.join(REPO, "config.toml")).read()
    text = text[: text.index("\n[embedded]\n")] + "\n"
    d = os.path.join(work, arm)
    for sub in ("profiles", "work", "heat"):
        os.makedirs(os.path.join(d, sub), exist_ok=True)
    shutil.copy(os.path.join(work, "live.toml"), os.path.join(d, "profiles", "live.toml"))
    subs = [
        ('"target/release/tinyk3"', json.dumps(TINYK3)),
        ('dir = "experiments"', "dir = " + json.dumps(os.path.join(REPO, "experiments"))),
        ('"ledger/tinyk3-demo"', json.dumps(model)),
        ('"ledger/heat/expert_hist.json"', json.dumps(os.path.join(d, "heat", "expert_hist.json"))),
        ('"ledger/heat/expert_trace.bin"', json.dumps(os.path.join(d, "heat", "expert_trace.bin"))),
        ('"ledger/heat"', json.dumps(os.path.join(d, "heat"))),
        ('path = "ledger/orchestrator.db"', "path = " + json.dumps(os.path.join(d, "orchestrator.db"))),
        ('live_profile = "ledger/profiles/live.toml"',
         "live_profile = " + json.dumps(os.path.join(d, "profiles", "live.toml"))),
        ('work_dir = "ledger/work"', "work_dir = " + json.dumps(os.path.join(d, "work"))),
        ("127.0.0.1:8181", live_addr),
        ("127.0.0.1:9464", "127.0.0.1:%d" % free_port()),
        ("stand_aside_max_wait_s = 300", "stand_aside_max_wait_s = %d" % max_wait_s),
    ]
    for old, new in subs:
        if old not in text:
            sys.exit("config.toml no longer has %r; update benches/stand_aside" % old)
        text = text.replace(old, new)
    if arm == "no_quiet":
        if "stand_aside_quiet_s = 10" not in text:
            sys.exit("config.toml no longer sets stand_aside_quiet_s = 10; update benches/stand_aside")
        text = text.replace("stand_aside_quiet_s = 10", "stand_aside_quiet_s = 0")
    if arm == "no_stand_aside":
        kept = [l for l in text.splitlines() if not l.startswith(LIVE_NAMES)]
        text = "\n".join(kept) + "\n"
    path = os.path.join(d, "config.toml")
    open(path, "w").write(text)
    return path


def start(args, log):
    return subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def stop(p, timeout=90):
    """SIGTERM, then SIGKILL of the whole group if it lingers."""
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def wait_http(url, timeout=300):
    t0 = time.time()
    while time.time() - t0 < timeout:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    sys.exit("%s did not answer within %d s" % (url, timeout))


class Client:
    """Open-loop users: one request every `period` seconds, each on its own
    thread, timed from send to the whole answer."""

    def __init__(self, addr, period, max_tokens):
        self.url = "http://%s/v1/chat/completions" % addr
        self.period = period
        self.max_tokens = max_tokens
        self.arm = None  # (arm, phase index, phase start)
        self.records = []  # (arm, phase, sent, answered, status), absolute times
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.threads = []

    def one(self, n, tag):
        body = json.dumps({
            "messages": [{"role": "user", "content": "A user's question number %d." % n}],
            "max_tokens": self.max_tokens,
        }).encode()
        req = urllib.request.Request(self.url, body, {"Content-Type": "application/json"})
        t0 = time.time()
        try:
            with urllib.request.urlopen(req, timeout=600) as r:
                r.read()
                status = r.status
        except urllib.error.HTTPError as e:
            status = e.code
        except OSError:
            status = 0
        arm, phase = tag
        with self.lock:
            self.records.append((arm, phase, t0, time.time(), status))

    def run(self):
        n = 0
        next_at = time.time()
        while not self.stopping.is_set():
            now = time.time()
            if now < next_at:
                time.sleep(min(next_at - now, 0.05))
                continue
            arm, phase, _ = self.arm
            t = threading.Thread(target=self.one, args=(n, (arm, phase)), daemon=True)
            t.start()
            self.threads.append(t)
            n += 1
            next_at += self.period


def percentile(xs, q):
    """Nearest rank (no interpolation): the smallest x with at least q of
    the samples at or below it."""
    s = sorted(xs)
    return s[max(0, math.ceil(q * len(s)) - 1)]


def daemon_summary(work, arm):
    """The arm's daemon: its cycle lines (deferred; stopped by the phase's
    end), and the engine runs its ledger holds (those users interrupted)."""
    log = os.path.join(work, arm + ".log")
    text = open(log, errors="replace").read() if os.path.exists(log) else ""
    lines = [l for l in text.splitlines() if re.match(r"^cycle\s+\d+", l)]
    deferred = sum(1 for l in lines if "  deferred " in l)
    stopped = sum(1 for l in lines if "  aborted " in l)
    db = sqlite3.connect(os.path.join(work, arm, "orchestrator.db"))
    runs, interrupted = db.execute(
        "SELECT count(*), count(*) FILTER (WHERE live_requests > 0) FROM runs").fetchone()
    db.close()
    return "%d (%d; %d)" % (len(lines), deferred, stopped), "%d (%d)" % (runs, interrupted)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=8, help="a multiple of 4 keeps the order balanced")
    ap.add_argument("--phase-s", type=float, default=120)
    ap.add_argument("--settle-s", type=float, default=5)
    ap.add_argument("--period-s", type=float, default=5.0, help="seconds between two users' requests")
    ap.add_argument("--max-tokens", type=int, default=8, help="tokens each user's request asks for")
    ap.add_argument("--max-wait-s", type=int, default=60,
                    help="[daemon] stand_aside_max_wait_s of both daemon arms (the shipped 300 s would "
                         "defer less than once per phase)")
    ap.add_argument("--work", help="working directory (default: a temp dir, removed unless --keep)")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--arms", default=",".join(ARMS),
                    help="the arms to run: all four, or off,stand_aside alone (the goal's two, "
                         "alternated ABBA: twice the requests per arm in the same wall time)")
    a = ap.parse_args()
    arms = a.arms.split(",")
    if sorted(arms) not in (sorted(ARMS), ["off", "stand_aside"]):
        sys.exit("--arms %s: give all of %s, or off,stand_aside" % (a.arms, ",".join(ARMS)))
    arms = [x for x in ARMS if x in arms]
    for b in (ORCH, TINYK3):
        if not os.access(b, os.X_OK):
            sys.exit("%s is missing: cargo build --release -p orchestrator -p tinyk3" % b)

    # The code measured: the checkout's commit when the run starts.
    commit = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    work = a.work or tempfile.mkdtemp(prefix="stand-aside-")
    os.makedirs(work, exist_ok=True)
    model = os.path.join(work, "model")
    if not os.path.exists(os.path.join(model, "manifest.json")):
        subprocess.run([TINYK3, "init", "--out", model] + shipped_init_args(), check=True,
                       stdout=subprocess.DEVNULL)
    far_addr = "127.0.0.1:%d" % free_port()
    live_addr = "127.0.0.1:%d" % free_port()
    start_profile = open(os.path.join(REPO, "tinyk3", "profiles", "slow-start.toml")).read()
    open(os.path.join(work, "live.toml"), "w").write(start_profile.replace("127.0.0.1:7070", far_addr))
    configs = {arm: arm_config(work, arm, model, live_addr, far_addr, a.max_wait_s)
               for arm in ARMS[1:]}

    logs = {name: open(os.path.join(work, name + ".log"), "ab")
            for name in ["expert-server", "serve"] + ARMS[1:]}
    far = start([TINYK3, "expert-server", "--model", model, "--listen", far_addr,
                 "--warm-set", "1024"], logs["expert-server"])
    serve = start([TINYK3, "serve", model, "--profile", os.path.join(work, "live.toml"),
                   "--listen", live_addr, "--context-tokens", "256"], logs["serve"])
    load_before = os.getloadavg()
    uptime_before = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    client = None
    try:
        wait_http("http://%s/health" % live_addr)
        client = Client(live_addr, a.period_s, a.max_tokens)
        client.arm = ("warmup", -1, time.time())
        runner = threading.Thread(target=client.run, daemon=True)
        runner.start()
        time.sleep(a.settle_s * 2)
        phase = 0
        starts = []
        for r in range(a.rounds):
            # Williams' square: for four 0 1 3 2, each next row one up;
            # for two, 0 1 then 1 0 (ABBA).
            steps = (0, 1, 3, 2) if len(arms) == 4 else (0, 1)
            order = [arms[(r + k) % len(arms)] for k in steps]
            for arm in order:
                daemon = None
                if arm != "off":
                    daemon = start([ORCH, "--config", configs[arm], "run"], logs[arm])
                client.arm = (arm, phase, time.time())
                starts.append(client.arm[2])
                print("round %d/%d: %s for %.0f s" % (r + 1, a.rounds, arm, a.phase_s), flush=True)
                time.sleep(a.phase_s)
                if daemon is not None:
                    stop(daemon)
                phase += 1
        client.arm = ("cooldown", phase, time.time())
        client.stopping.set()
        runner.join()
        for t in client.threads:
            t.join(700)
    finally:
        if client is not None:
            client.stopping.set()
        for p in (serve, far):
            stop(p, 30)
        for f in logs.values():
            f.close()
    load_after = os.getloadavg()
    uptime_after = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()

    rows = {}
    records = client.records
    # A phase's requests count from its settle time, or from when every
    # request sent before the phase began was answered, whichever is later.
    counted_from = []
    for begun in starts:
        drained = max([r[3] for r in records if r[2] < begun], default=begun)
        counted_from.append(max(begun + a.settle_s, drained))
    for arm in arms:
        kept = [r for r in records if r[0] == arm and r[2] >= counted_from[r[1]]]
        ok = [r[3] - r[2] for r in kept if r[4] == 200]
        rows[arm] = {
            "sent": len(kept),
            "failed": len(kept) - len(ok),
            "p50": percentile(ok, 0.50) if ok else float("nan"),
            "p99": percentile(ok, 0.99) if ok else float("nan"),
            "max": max(ok) if ok else float("nan"),
        }
    print()
    print("stand_aside benchmark, %s, commit %s" % (time.strftime("%Y-%m-%d %H:%M %Z"), commit))
    print("command: bash benches/stand_aside/run.sh %s" % " ".join(sys.argv[1:]))
    print("users: one request every %.1f s, max_tokens %d; %d rounds of %.0f s per arm (requests sent in "
          "a phase's first %.0f s, or before the previous phases' were all answered, left out)"
          % (a.period_s, a.max_tokens, a.rounds, a.phase_s, a.settle_s))
    print("load before: %s" % uptime_before)
    print("load after:  %s" % uptime_after)
    print()
    print("| arm | daemon cycles (deferred; stopped) | engine runs (users came) | requests | failed "
          "| p50 s | p99 s | max s | p50 / off | p99 / off |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    off = rows["off"]
    for arm in arms:
        row = rows[arm]
        cycles, runs = ("-", "-") if arm == "off" else daemon_summary(work, arm)
        print("| %s | %s | %s | %d | %d | %.3f | %.3f | %.3f | %.2f | %.2f |" % (
            arm, cycles, runs, row["sent"], row["failed"], row["p50"], row["p99"], row["max"],
            row["p50"] / off["p50"], row["p99"] / off["p99"]))
    sa = rows["stand_aside"]
    p50, p99 = sa["p50"] / off["p50"], sa["p99"] / off["p99"]
    met = p50 <= GOAL["p50"] and p99 <= GOAL["p99"] and sa["failed"] == 0
    print()
    print("goal (stand_aside against off): p50 within %.1fx: %.2f; p99 within %.1fx: %.2f; %s"
          % (GOAL["p50"], p50, GOAL["p99"], p99, "met" if met else "MISSED"))
    print("work dir: %s" % work)
    if not a.work and not a.keep:
        shutil.rmtree(work, ignore_errors=True)
    sys.exit(0 if met else 1)


if __name__ == "__main__":
    main()
