"""The tuners people use today, each measuring the way its tool does.

- TPE (Optuna's TPESampler), as llama-optimus drives it: each trial runs the
  bench `repeat` times and scores the mean tokens/s (llama-optimus passes
  `-r repeat` to llama-bench and reads its `avg_ts`, the mean over the
  repetitions; `--repeat` defaults to 2: BrunoArsioli/llama-optimus,
  src/llama_optimus/cli.py and core.py `run_llama_bench_with_csv`); a failed
  trial scores 0.0 tokens/s, as there; the best trial is recommended.
- Random search over the same space, same measurement, best trial.
- Coordinate search as the kimi-k3-in-c fork's autotune does it
  (benchmarks/autotune.py in /work/shared/vendor/kimi-k3-in-c): one knob at a
  time over its candidate values, `--repeats` runs each (default 2), the
  order alternated between repeats, the candidate with the lowest *median*
  seconds/token kept, then the next knob; passes repeat while budget lasts.

Every tool first measures the start with the same repeats (its own baseline,
against which its claim is made), and every run goes through the engine clock.
A point the engine would refuse (a cache under top-k slots) is a failed trial
that costs no engine time.
"""

import math
import random
import statistics

from stack import clock_total, point

PINS = list(range(0, 129, 16))
WARM = list(range(0, 257, 32))
DRAFT = list(range(0, 9))
TRUNK = [round(0.05 * i, 2) for i in range(21)]
REPEATS = 2


class Search:
    def __init__(self, name, engine, start, pins_file, budget):
        self.name, self.engine, self.start, self.pins_file = name, engine, start, pins_file
        self.budget = budget
        self.trajectory = []  # (engine_s, profile, claimed log ratio, None interval)
        self.best = None  # (score_spt, profile)
        self.start_spt = None
        self.trials = 0

    def spent(self):
        return clock_total(self.engine.log)

    def left(self):
        return self.spent() < self.budget

    def runs(self, prof):
        return [self.engine.run(prof) for _ in range(REPEATS)]

    def profile(self, pin_count, warm_set, draft_len, trunk_fraction):
        return point(self.start, self.pins_file, pin_count=pin_count, warm_set=warm_set,
                     draft_len=draft_len, trunk_fraction=trunk_fraction)

    def measure_start(self):
        xs = [x for x in self.runs(self.start) if x]
        self.start_spt = self.score_of(xs)
        self.best = (self.start_spt, self.start)
        self.trajectory.append((self.spent(), self.start, 0.0, None))

    def score_of(self, xs):
        """Mean tokens/s over the repeats (llama-optimus), as seconds/token."""
        if not xs:
            return math.inf
        return 1.0 / statistics.mean(1.0 / x for x in xs)

    def offer(self, spt, prof):
        self.trials += 1
        if spt < self.best[0]:
            self.best = (spt, prof)
            self.trajectory.append((self.spent(), prof, math.log(spt / self.start_spt), None))

    def result(self):
        spt, prof = self.best
        return {"recommended": prof, "claimed": math.log(spt / self.start_spt),
                "claimed_interval": None, "trajectory": self.trajectory,
                "engine_s": self.spent(), "trials": self.trials}


def run_tpe(engine, start, pins_file, budget, seed):
    import optuna
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    s = Search("tpe", engine, start, pins_file, budget)
    s.measure_start()
    study = optuna.create_study(direction="maximize",
                                sampler=optuna.samplers.TPESampler(seed=seed))
    while s.left():
        t = study.ask()
        prof = s.profile(t.suggest_int("pin_count", 0, 128, step=16),
                         t.suggest_int("warm_set", 0, 256, step=32),
                         t.suggest_int("draft_len", 0, 8),
                         t.suggest_float("trunk_fraction", 0.0, 1.0, step=0.05))
        xs = [x for x in s.runs(prof) if x] if prof else []
        spt = s.score_of(xs)
        study.tell(t, 0.0 if math.isinf(spt) else 1.0 / spt)
        if prof:
            s.offer(spt, prof)
    return s.result()


def run_random(engine, start, pins_file, budget, seed):
    rng = random.Random(seed)
    s = Search("random", engine, start, pins_file, budget)
    s.measure_start()
    while s.left():
        prof = s.profile(rng.choice(PINS), rng.choice(WARM), rng.choice(DRAFT), rng.choice(TRUNK))
        if prof is None:
            s.trials += 1
            continue
        s.offer(s.score_of([x for x in s.runs(prof) if x]), prof)
    return s.result()


# autotune sweeps a short candidate list per knob
COORD = {
    "pin_count": [0, 16, 32, 64, 128],
    "warm_set": [0, 64, 128, 256],
    "draft_len": [0, 1, 2, 4, 8],
    "trunk_fraction": [0.1, 0.3, 0.5, 0.7, 0.9],
}


def run_coordinate(engine, start, pins_file, budget, seed):
    rng = random.Random(seed)
    s = Search("coordinate", engine, start, pins_file, budget)
    s.measure_start()
    cur = {"pin_count": 0, "warm_set": 0, "draft_len": 0, "trunk_fraction": None}
    knobs = list(COORD)
    rng.shuffle(knobs)
    best_med = s.start_spt
    while s.left():
        for knob in knobs:
            if not s.left():
                break
            values = sorted(set(COORD[knob]) | ({cur[knob]} if cur[knob] is not None else set()))
            cands = []
            for v in values:
                prof = s.profile(**dict(cur, **{knob: v}))
                if prof is not None:
                    cands.append((v, prof))
            samples = {v: [] for v, _ in cands}
            for rep in range(REPEATS):
                order = cands if rep % 2 == 0 else cands[::-1]
                for v, prof in order:
                    if not s.left():
                        break
                    x = engine.run(prof)
                    if x:
                        samples[v].append(x)
            meds = {v: statistics.median(xs) for v, xs in samples.items() if xs}
            if not meds:
                continue
            v = min(meds, key=meds.get)
            s.trials += len(cands)
            cur[knob] = v
            prof = s.profile(**cur)
            # autotune keeps the sweep's winner; its claim is that median
            best_med = meds[v]
            if s.best[1] != prof:
                s.best = (best_med, prof)
                s.trajectory.append((s.spent(), prof, math.log(best_med / s.start_spt), None))
    return s.result()


TUNERS = {"tpe": run_tpe, "random": run_random, "coordinate": run_coordinate}
