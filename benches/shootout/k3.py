"""Landscape C's engine: the real kimi-k3-in-c `bin/k3` on the tiny checkpoint.

`bash benches/shootout/run.sh` builds it when it is missing (scripts/kimi-k3.sh
from the vendored source, into ~/.cache) and exports what it printed: K3_BIN,
K3_MODEL, K3_TRUNK, K3_IDS, K3_EXPERT_BYTES, K3_TOP_K. Everything here mirrors
`examples/kimi-k3-in-c.toml`, so a point the tuners try is a profile the loop
could reach with that config: the bench argv is the example's (always
`--incremental`, `--spec N` only when the draft length is above zero), the
knobs are the two it reaches (the draft length and the trunk/cache split:
`rebalance_trunk_cache` in whole MB, the total fixed), and a cache keeps
top-k plus one spare slot (`cache_spare_slots = 1`).
"""

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

from stack import GB, MB, REPO, free_port, substitute

GEN = 8  # the example's --gen


@dataclass(frozen=True)
class Facts:
    """The engine and checkpoint `scripts/kimi-k3.sh` printed."""
    bin: str
    model: str
    trunk: str
    ids: str
    expert_bytes: int
    top_k: int

    @staticmethod
    def from_env(env=os.environ):
        missing = [k for k in ("K3_BIN", "K3_MODEL", "K3_TRUNK", "K3_IDS", "K3_EXPERT_BYTES", "K3_TOP_K")
                   if not env.get(k)]
        if missing:
            raise SystemExit(
                f"landscape C needs the kimi-k3-in-c engine, and {', '.join(missing)} is unset: run "
                "`bash benches/shootout/run.sh`, which builds it with scripts/kimi-k3.sh, or "
                "`eval \"$(KIMI_K3_SRC=DIR bash scripts/kimi-k3.sh)\"` and export the K3_* variables")
        return Facts(bin=env["K3_BIN"], model=env["K3_MODEL"], trunk=env["K3_TRUNK"], ids=env["K3_IDS"],
                     expert_bytes=int(env["K3_EXPERT_BYTES"]), top_k=int(env["K3_TOP_K"]))


def cache_slots(cache_gb: float, eb: int) -> int:
    return math.floor(cache_gb * GB / eb)


def cache_gb_holding(nbytes: int, eb: int) -> float:
    """As src/plan: bytes/1e9 nudged up until the engine's floor keeps every slot."""
    gb = nbytes / GB
    want = nbytes // eb
    while cache_slots(gb, eb) < want:
        gb = math.nextafter(gb, math.inf)
    return gb


@dataclass(frozen=True)
class K3Profile:
    """The knobs of one kimi-k3-in-c profile (the example's profile keys)."""
    budget_gb: float
    trunk_gb: float
    cache_gb: float
    draft_len: int
    expert_bytes: int
    threads: int = 2

    def key(self) -> str:
        return f"t{self.trunk_gb:.6f}/c{cache_slots(self.cache_gb, self.expert_bytes)}/d{self.draft_len}"

    def short(self) -> str:
        return (f"trunk {self.trunk_gb * 1000:.1f}MB cache {self.cache_gb * 1000:.1f}MB "
                f"draft {self.draft_len}")

    def to_toml(self) -> str:
        return (f"[memory]\nbudget_gb = {self.budget_gb!r}\ntrunk_gb = {self.trunk_gb!r}\n"
                f"cache_gb = {self.cache_gb!r}\n\n[speculative]\ndraft_len = {self.draft_len}\n\n"
                f"[compute]\nthreads = {self.threads}\n")

    def as_dict(self) -> dict:
        return {"trunk_gb": self.trunk_gb, "cache_gb": self.cache_gb,
                "cache_slots": cache_slots(self.cache_gb, self.expert_bytes), "draft_len": self.draft_len}


def starting_profile(facts: Facts) -> K3Profile:
    """The profile the repository's real-engine test starts the example from
    (tests/e2e/kimi_k3_real.rs): a trunk budget of 20 MB and a cache of 30 MB,
    each more than the tiny checkpoint's whole trunk (11 MB) and all its
    experts (25 MB), no speculation. No split starves anything from there:
    the landscape is expected to be nearly flat (its ground truth says how
    flat), which is what C tests."""
    return K3Profile(budget_gb=0.5, trunk_gb=0.02, cache_gb=0.03, draft_len=0,
                     expert_bytes=facts.expert_bytes)


def point(start: K3Profile, top_k: int, *, draft_len: int, trunk_fraction) -> K3Profile | None:
    """A point as the menu's planners build it from the start (trunk_fraction
    None: the start's split). None when the engine would refuse it (a cache
    under top-k + 1 slots)."""
    pool = round(start.trunk_gb * GB) + round(start.cache_gb * GB)
    if trunk_fraction is None:
        trunk = round(start.trunk_gb * GB)
    else:
        trunk = min(round(trunk_fraction * pool / MB) * MB, pool // MB * MB)
    cache = pool - trunk
    if cache // start.expert_bytes < top_k + 1:
        return None
    return K3Profile(budget_gb=start.budget_gb, trunk_gb=trunk / GB,
                     cache_gb=cache_gb_holding(cache, start.expert_bytes), draft_len=draft_len,
                     expert_bytes=start.expert_bytes, threads=start.threads)


def bench_argv(facts: Facts, p: K3Profile, out: Path, heat: Path) -> list:
    """examples/kimi-k3-in-c.toml's [stack.bench] argv rendered for profile p."""
    argv = [facts.bin, facts.model, "--ids", facts.ids, "--gen", str(GEN), "--incremental",
            "--cache-gb", repr(p.cache_gb), "--trunk", facts.trunk, "--trunk-gb", repr(p.trunk_gb),
            "--threads", str(p.threads), "--dump-cache-trace", str(heat), "--out", str(out)]
    if p.draft_len > 0:
        argv += ["--spec", str(p.draft_len)]
    return argv


def read_profile(path: Path, expert_bytes: int) -> K3Profile:
    import tomllib
    t = tomllib.loads(path.read_text())
    return K3Profile(budget_gb=t["memory"]["budget_gb"], trunk_gb=t["memory"]["trunk_gb"],
                     cache_gb=t["memory"]["cache_gb"], draft_len=t.get("speculative", {}).get("draft_len", 0),
                     expert_bytes=expert_bytes, threads=t.get("compute", {}).get("threads", 2))


def write_config(d: Path, facts: Facts, clock_argv: list, log: Path) -> Path:
    """examples/kimi-k3-in-c.toml with what a user must change (paths, the
    expert slot, the metrics port) and what the shoot-out must (the bench
    argv through the engine clock, `interval_s` 60 -> 1); the judge, its
    floors and confirmations as shipped. Each substitution must find its text."""
    text = (REPO / "examples/kimi-k3-in-c.toml").read_text()
    q = json.dumps
    text = substitute(text, [
        ('path = "../ledger/kimi-k3-in-c/orchestrator.db"', f"path = {q(str(d / 'orchestrator.db'))}"),
        ('dir = "../experiments"', f"dir = {q(str(REPO / 'experiments'))}"),
        ('live_profile = "profiles/kimi-k3-in-c.toml"', f"live_profile = {q(str(d / 'profiles/live.toml'))}"),
        ('work_dir = "../ledger/kimi-k3-in-c/work"', f"work_dir = {q(str(d / 'work'))}"),
        ("expert_bytes = 17555456", f"expert_bytes = {facts.expert_bytes}"),
        ('"bin/k3", "/srv/k3model",',
         ", ".join(q(x) for x in [*clock_argv, str(log), "--", facts.bin, facts.model]) + ","),
        ('"--ids", "1008,10484,318,15383,387",', f'"--ids", {q(facts.ids)},'),
        ('"--trunk", "/srv/k3trunk",', f'"--trunk", {q(facts.trunk)},'),
        ('"--dump-cache-trace", "../ledger/kimi-k3-in-c/heat",', f'"--dump-cache-trace", {q(str(d / "heat"))},'),
        ('create_dirs = ["../ledger/kimi-k3-in-c/heat"]', f"create_dirs = [{q(str(d / 'heat'))}]"),
        ('heat = "../ledger/kimi-k3-in-c/heat/expert_hist.json"', f"heat = {q(str(d / 'heat/expert_hist.json'))}"),
        ('heat_trace = "../ledger/kimi-k3-in-c/heat/expert_trace.bin"',
         f"heat_trace = {q(str(d / 'heat/expert_trace.bin'))}"),
        ("interval_s = 60", "interval_s = 1"),
        ('metrics_listen = "127.0.0.1:9464"', f'metrics_listen = "127.0.0.1:{free_port()}"'),
    ])
    (d / "config.toml").write_text(text)
    return d / "config.toml"


class K3Stack:
    """Landscape C for the loop: the example's config (its proposer is the
    bandit: the engine is a command line with no served model to ask, so
    there is no `loop-model` on C) and no server to run."""

    proposers = ("bandit",)

    def __init__(self, facts: Facts):
        self.facts = facts

    def config(self, d: Path, log: Path, proposer: str, _serve_port: int) -> Path:
        assert proposer == "bandit", "examples/kimi-k3-in-c.toml has no served model"
        from stack import CLOCK_ARGV
        return write_config(d, self.facts, CLOCK_ARGV, log)

    def read_live(self, path: Path):
        return read_profile(path, self.facts.expert_bytes)

    def serve(self, _d: Path, _port: int):
        return None
