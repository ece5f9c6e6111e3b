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
import signal
import subprocess
import time
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

    def compare(self, prof, limit=float("inf")) -> dict:
        """Judges `prof` against the start; the comparison's JSON, reduced.
        `limit`: the engine seconds the tuner has left. A comparison still
        measuring when its runs have spent them is stopped (SIGTERM: it
        records its cycle `aborted`), as the loop is stopped at its budget."""
        text = prof.to_toml()
        name = hashlib.sha256(text.encode()).hexdigest()[:12]
        path = self.d / "candidates" / f"{name}.toml"
        path.write_text(text)
        before = self.spent()
        env = dict(os.environ, ORCHESTRATOR_CONFIG=str(self.config))
        out_path = self.d / "candidates" / f"{name}.json"
        stopped = False
        with open(out_path, "w") as out, open(self.d / "compare.log", "a") as err:
            err.write(f"== {path.name}\n")
            err.flush()
            p = subprocess.Popen([str(ORCH), "compare", "--candidate", str(path), "--json"], env=env,
                                 stdout=out, stderr=err)
            while p.poll() is None:
                time.sleep(0.25)
                if not stopped and self.spent() - before >= limit:
                    p.send_signal(signal.SIGTERM)
                    stopped = True
            err.write(f"== exit {p.returncode}{' (stopped at the budget)' if stopped else ''}\n")
        if p.returncode == 2:
            raise SystemExit(f"orchestrator compare refused its input (exit 2); see {self.d / 'compare.log'}")
        try:
            out = json.loads(out_path.read_text())
        except ValueError:
            # A comparison that could not run at all (exit 1 before any
            # output): not confirmed.
            out = {"verdict": "failed", "confirmed": False}
        return {"profile": prof.short(), "key": prof.key(), "exit": p.returncode, "stopped": stopped,
                "verdict": out.get("verdict"), "confirmed": bool(out.get("confirmed")) and not stopped,
                "effect": out.get("effect_log_ratio"), "interval": out.get("interval_log_ratio"),
                "engine_s": self.spent() - before}
