"""`orchestrator compare` as the tuners' judge: one standard for every contestant.

Each time a tuner's best trial changes, the harness judges it against the
start with `orchestrator compare --candidate BEST --json`, through the same
configuration the loop runs with (its bench argv through the engine clock,
the judge, floors and confirmations as shipped), on a ledger of the tuner's
own for the seed (so a floor of the start, once measured, serves its later
comparisons, as the loop's ledger serves the loop). The comparisons' engine
runs go to a clock log of their own: their time is added to the tuner's.
A best trial becomes the tuner's confirmed recommendation when the
comparison's verdict is a confirmed win (`confirmed`: its A/B and its
confirmation both won), at the engine time the comparison ended.
"""

import hashlib
import json
import os
import subprocess
from pathlib import Path

from stack import ORCH, clock_total


class Judge:
    """`orchestrator compare` on one tuner's seed. `config_for(d, log)`
    writes the landscape's config into d with its bench argv logging to
    `log` and returns its path; the start is written as its live profile."""

    def __init__(self, d: Path, config_for, start):
        self.d = d
        d.mkdir(parents=True, exist_ok=True)
        (d / "profiles").mkdir(exist_ok=True)
        (d / "candidates").mkdir(exist_ok=True)
        self.log = d / "engine.log"
        self.log.touch()
        (d / "profiles/live.toml").write_text(start.to_toml())
        self.config = config_for(d, self.log)

    def spent(self):
        return clock_total(self.log)

    def compare(self, prof) -> dict:
        """Judges `prof` against the start; the comparison's JSON, reduced."""
        text = prof.to_toml()
        path = self.d / "candidates" / (hashlib.sha256(text.encode()).hexdigest()[:12] + ".toml")
        path.write_text(text)
        before = self.spent()
        env = dict(os.environ, ORCHESTRATOR_CONFIG=str(self.config))
        r = subprocess.run([str(ORCH), "compare", "--candidate", str(path), "--json"], env=env,
                           capture_output=True, text=True)
        with open(self.d / "compare.log", "a") as f:
            f.write(f"== {path.name} exit {r.returncode}\n{r.stderr}\n")
        if r.returncode == 2:
            raise SystemExit(f"orchestrator compare refused its input (exit 2): {r.stderr.strip()}")
        try:
            out = json.loads(r.stdout)
        except ValueError:
            # A comparison that could not run at all (exit 1 before any
            # output): recorded as not confirmed, with why.
            out = {"verdict": "failed", "confirmed": False, "effect_log_ratio": None,
                   "interval_log_ratio": None, "reason": r.stderr.strip()[-400:]}
        return {"profile": prof.short(), "key": prof.key(), "exit": r.returncode,
                "verdict": out.get("verdict"), "confirmed": bool(out.get("confirmed")),
                "effect": out.get("effect_log_ratio"), "interval": out.get("interval_log_ratio"),
                "engine_s": self.spent() - before}
