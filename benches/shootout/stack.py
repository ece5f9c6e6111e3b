"""The engine under test: checkpoint, profiles, bench argv, engine runs.

Everything here mirrors the shipped `config.toml` and the planners in
`src/plan/`, so a point the tuners try is a profile the loop could reach:

- the bench argv is `config.toml`'s `[stack.bench]` template with its three
  optional groups (pins, far, speculation), the same flags and the same
  `--prompt`/`--gen`;
- `trunk_fraction` splits (trunk_gb + cache_gb) as `rebalance_trunk_cache`
  does (trunk in whole MB), pins are paid out of the cache as `rerank_pins`
  does, and a cache must keep top-k slots.
"""

import hashlib
import json
import math
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CLOCK = REPO / "benches" / "shootout" / "engine_clock.py"
# The clock runs under this interpreter itself, not a `python3` found on PATH:
# pyenv's shim took 0.9 s a start at load 15 here, the interpreter with -S -E
# 0.2 s. It is outside the engine time either way, but inside the hour.
CLOCK_ARGV = [sys.executable, "-S", "-E", str(CLOCK)]
TINYK3 = REPO / "target" / "release" / "tinyk3"
ORCH = REPO / "target" / "release" / "orchestrator"

PROMPT = "The experts of the far tier"  # config.toml's bench prompt
GEN = 8  # config.toml's --gen
GB = 1e9
MB = 1_000_000

# The checkpoint: the demo's shape (32 experts a layer, top-4, 1 draft layer,
# seed 1) made small enough that one bench run of the slow start takes about
# a second on this 2-core machine under load (the demo's own 8 x 32 with
# d_dense 1536 took 7-10 s a run at load 10-12 here, 2026-12-01).
INIT_ARGS = [
    "--seed", "1", "--layers", "4", "--experts", "32", "--d-model", "128",
    "--d-expert", "256", "--d-dense", "768", "--vocab", "8192",
]
N_EXPERTS_TOTAL = 4 * 32
TOP_K = 4
EXPERT_BYTES = 3 * 128 * 256 * 4  # gate/up/down f32: 393216


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ensure_checkpoint(dir_: Path) -> None:
    if (dir_ / "manifest.json").exists():
        return
    subprocess.run([str(TINYK3), "init", "--out", str(dir_), *INIT_ARGS], check=True,
                   stdout=subprocess.DEVNULL)


def trunk_bytes(ck: Path) -> int:
    return json.loads((ck / "manifest.json").read_text())["trunk"]["bytes"]


def cache_slots(cache_gb: float) -> int:
    return math.floor(cache_gb * GB / EXPERT_BYTES)


def cache_gb_holding(nbytes: int) -> float:
    """As src/plan: bytes/1e9 nudged up until the engine's floor keeps every slot."""
    gb = nbytes / GB
    want = nbytes // EXPERT_BYTES
    while cache_slots(gb) < want:
        gb = math.nextafter(gb, math.inf)
    return gb


@dataclass(frozen=True)
class Profile:
    """The knobs of one tinyk3 profile (the orchestrator's profile keys)."""
    budget_gb: float
    trunk_gb: float
    cache_gb: float
    pins_file: str  # absolute path or ""
    pin_count: int
    far_addr: str
    warm_set: int
    draft_len: int
    threads: int = 2

    def key(self) -> str:
        """Identity by what the engine sees: the pinned rows' content, not the file name."""
        pins = ""
        if self.pin_count > 0:
            rows = pin_rows(Path(self.pins_file))[: self.pin_count]
            pins = hashlib.sha256("\n".join(sorted(rows)).encode()).hexdigest()[:12]
        return (f"t{self.trunk_gb:.6f}/c{cache_slots(self.cache_gb)}/p{self.pin_count}:{pins}"
                f"/w{self.warm_set}/d{self.draft_len}")

    def short(self) -> str:
        return (f"trunk {self.trunk_gb * 1000:.1f}MB cache {cache_slots(self.cache_gb)} "
                f"pins {self.pin_count} warm {self.warm_set} draft {self.draft_len}")

    def to_toml(self) -> str:
        return (
            f"[memory]\nbudget_gb = {self.budget_gb!r}\ntrunk_gb = {self.trunk_gb!r}\n"
            f"cache_gb = {self.cache_gb!r}\n\n[pins]\nfile = {json.dumps(self.pins_file)}\n"
            f"count = {self.pin_count}\n\n[far]\naddr = {json.dumps(self.far_addr)}\n"
            f"warm_set = {self.warm_set}\n\n[speculative]\ndraft_len = {self.draft_len}\n\n"
            f"[compute]\nthreads = {self.threads}\n"
        )

    def as_dict(self) -> dict:
        return {"trunk_gb": self.trunk_gb, "cache_gb": self.cache_gb,
                "cache_slots": cache_slots(self.cache_gb), "pin_count": self.pin_count,
                "warm_set": self.warm_set, "draft_len": self.draft_len}


def pin_rows(path: Path) -> list:
    lines = [l.strip() for l in path.read_text().splitlines() if l.strip()]
    return [" ".join(l.split()[:2]) for l in lines[1:]]


def starting_profile(ck: Path, far_addr: str) -> Profile:
    """The demo's slow start (tinyk3/profiles/slow-start.toml) scaled to this
    checkpoint: the same 44% of the trunk resident (0.05 of 0.1136 GB), a
    cache of a quarter of the experts, budget twice the RAM it holds,
    nothing pinned or warm, no speculation, the far tier configured."""
    share = 0.05 / 0.113577984
    trunk = round(share * trunk_bytes(ck) / 1e5) * 1e5  # 0.0063 GB
    cache = cache_gb_holding(N_EXPERTS_TOTAL // 4 * EXPERT_BYTES)
    cache = round(cache, 4)  # 0.0126: a person's number, still 32 slots
    assert cache_slots(cache) == N_EXPERTS_TOTAL // 4
    return Profile(budget_gb=0.04, trunk_gb=trunk / GB, cache_gb=cache, pins_file="",
                   pin_count=0, far_addr=far_addr, warm_set=0, draft_len=0)


def point(start: Profile, pins_file: str, *, pin_count: int, warm_set: int, draft_len: int,
          trunk_fraction) -> Profile | None:
    """A point of the knob space as the menu's planners build it from the
    start (trunk_fraction None: the start's own split). None when the engine
    would refuse it (a cache under top-k slots)."""
    pool = round(start.trunk_gb * GB) + round(start.cache_gb * GB)
    if trunk_fraction is None:
        trunk = round(start.trunk_gb * GB)
    else:
        trunk = min(round(trunk_fraction * pool / MB) * MB, pool // MB * MB)
    cache = pool - trunk - pin_count * EXPERT_BYTES
    if cache < 0 or cache // EXPERT_BYTES < TOP_K:
        return None
    return Profile(budget_gb=start.budget_gb, trunk_gb=trunk / GB, cache_gb=cache_gb_holding(cache),
                   pins_file=pins_file if pin_count > 0 else "", pin_count=pin_count,
                   far_addr=start.far_addr, warm_set=warm_set, draft_len=draft_len)


def bench_argv(ck: Path, p: Profile, out: Path, heat_dir: Path) -> list:
    """config.toml's [stack.bench] argv rendered for profile p."""
    argv = [str(TINYK3), "bench", str(ck), "--prompt", PROMPT, "--gen", str(GEN),
            "--cache-gb", repr(p.cache_gb), "--trunk-gb", repr(p.trunk_gb),
            "--threads", str(p.threads), "--dump-cache-trace", str(heat_dir), "--out", str(out)]
    if p.pin_count > 0:
        argv += ["--pins", p.pins_file, "--pin-count", str(p.pin_count)]
    if p.far_addr:
        argv += ["--far", p.far_addr, "--far-warm-set", str(p.warm_set)]
    if p.draft_len > 0:
        argv += ["--incremental", "--spec", str(p.draft_len)]
    return argv


class Engine:
    """Runs the bench through the engine clock; each run appends to `log`.
    `argv(profile, out, heat_dir)` renders the landscape's bench command
    (`bench_argv` here, `k3.bench_argv` for the real engine)."""

    def __init__(self, argv, work: Path, log: Path, tag: str):
        self.argv, self.work, self.log, self.tag = argv, work, log, tag
        self.heat = work / "heat"
        work.mkdir(parents=True, exist_ok=True)
        self.heat.mkdir(exist_ok=True)  # kimi-k3-in-c dumps only into an existing directory
        self.n = 0

    def run(self, p):
        """seconds_per_token of one run, or None when the engine refused or failed."""
        self.n += 1
        out = self.work / f"out-{os.getpid()}-{self.n}.json"
        argv = [*CLOCK_ARGV, str(self.log), "--", *self.argv(p, out, self.heat)]
        env = dict(os.environ, OMP_WAIT_POLICY="passive", SHOOTOUT_TAG=self.tag)
        r = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           text=True, timeout=600)
        try:
            if r.returncode != 0:
                return None
            return float(json.loads(out.read_text())["seconds_per_token"])
        except (OSError, ValueError, KeyError):
            return None
        finally:
            out.unlink(missing_ok=True)


def tinyk3_argv(ck: Path):
    """The tinyk3 bench command of checkpoint `ck`, for an [`Engine`]."""
    return lambda p, out, heat: bench_argv(ck, p, out, heat)


def substitute(text, pairs):
    """Each (old, new) replaced once; a text no longer found stops the
    harness rather than silently running another configuration."""
    for old, new in pairs:
        if old not in text:
            raise SystemExit(f"the configuration no longer contains {old!r}: update benches/shootout/")
        text = text.replace(old, new, 1)
    return text


def clock_total(log: Path) -> float:
    """Engine seconds recorded in a clock log."""
    try:
        return sum(float(l.split()[1]) for l in log.read_text().splitlines() if l.strip())
    except FileNotFoundError:
        return 0.0


class Proc:
    """A child process of the harness, stopped by its own pid."""

    def __init__(self, argv, log: Path, env=None, cwd=None):
        self.log = open(log, "ab")
        self.p = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT, env=env,
                                  cwd=cwd, start_new_session=True)

    def stop(self, timeout=30):
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.p.pid, 9)
                self.p.wait()
        self.log.close()


def wait_http(url: str, timeout: float) -> None:
    import urllib.request
    end = time.time() + timeout
    while time.time() < end:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.3)
    raise RuntimeError(f"{url} not healthy after {timeout} s")


def wait_port(port: int, timeout: float) -> None:
    end = time.time() + timeout
    while time.time() < end:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout} s")
