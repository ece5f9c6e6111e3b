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

At one standard with the loop, each time a tool's best trial changes the
harness judges it with `orchestrator compare` against the start (`judge`,
see compare.py); the comparisons' engine time is the tool's too, within the
same budget. The best trial stays what the tool recommends (the old
columns); a comparison that confirms it as a win makes it the tool's
*confirmed* recommendation (the new ones).
"""

import math
import random
import statistics

from stack import clock_total

REPEATS = 2


class Space:
    """The knobs a landscape's tuners search, in the menu's steps, and how a
    point becomes a profile (`build(**knobs)`: None when the engine would
    refuse it). `initial`: the start's knobs (trunk_fraction None: its own
    split), where coordinate search begins. `coord`: autotune's short list
    per knob."""

    def __init__(self, domains, build, initial, coord):
        self.domains, self.build, self.initial, self.coord = domains, build, initial, coord

    def suggest(self, trial):
        """Optuna's suggestions over the domains (ints step, fractions 0.05)."""
        out = {}
        for k, (lo, hi, step) in self.domains.items():
            if isinstance(step, float):
                out[k] = trial.suggest_float(k, lo, hi, step=step)
            else:
                out[k] = trial.suggest_int(k, lo, hi, step=step)
        return out

    def draw(self, rng):
        out = {}
        for k, (lo, hi, step) in self.domains.items():
            n = int(round((hi - lo) / step))
            v = lo + step * rng.randint(0, n)
            out[k] = round(v, 2) if isinstance(step, float) else v
        return out


class Search:
    def __init__(self, name, engine, start, space, budget, judge=None):
        self.name, self.engine, self.start, self.space = name, engine, start, space
        self.budget = budget
        self.judge = judge
        # The best trial whenever it changes: (search engine s, profile,
        # claimed log ratio, None). Search time only (the old column).
        self.trajectory = []
        # Each best trial a comparison confirmed: (engine s, search and
        # comparisons, profile, its comparison's effect, its interval).
        self.confirmed = [(0.0, start, 0.0, (0.0, 0.0))]
        self.comparisons = []
        self.best = None  # (score_spt, profile)
        self.start_spt = None
        self.trials = 0

    def search_spent(self):
        return clock_total(self.engine.log)

    def spent(self):
        return self.search_spent() + (self.judge.spent() if self.judge else 0.0)

    def left(self):
        return self.spent() < self.budget

    def runs(self, prof):
        return [self.engine.run(prof) for _ in range(REPEATS)]

    def profile(self, **knobs):
        return self.space.build(**knobs)

    def measure_start(self):
        xs = [x for x in self.runs(self.start) if x]
        self.start_spt = self.score_of(xs)
        self.best = (self.start_spt, self.start)
        self.trajectory.append((self.search_spent(), self.start, 0.0, None))

    def score_of(self, xs):
        """Mean tokens/s over the repeats (llama-optimus), as seconds/token."""
        if not xs:
            return math.inf
        return 1.0 / statistics.mean(1.0 / x for x in xs)

    def new_best(self, spt, prof):
        self.best = (spt, prof)
        self.trajectory.append((self.search_spent(), prof, math.log(spt / self.start_spt), None))
        if self.judge is None or prof.key() == self.start.key():
            return
        c = self.judge.compare(prof, limit=max(self.budget - self.spent(), 0.0))
        c["engine_s_at"] = self.spent()
        self.comparisons.append(c)
        if c["confirmed"]:
            self.confirmed.append((c["engine_s_at"], prof, c["effect"], tuple(c["interval"])))

    def offer(self, spt, prof):
        self.trials += 1
        if spt < self.best[0]:
            self.new_best(spt, prof)

    def result(self):
        spt, prof = self.best
        last = self.confirmed[-1]
        return {"recommended": prof, "claimed": math.log(spt / self.start_spt),
                "claimed_interval": None, "trajectory": self.trajectory,
                "confirmed": self.confirmed, "confirmed_recommended": last[1],
                "confirmed_claim": last[2], "confirmed_interval": last[3],
                "comparisons": self.comparisons,
                "engine_s": self.spent(), "search_engine_s": self.search_spent(),
                "compare_engine_s": self.judge.spent() if self.judge else 0.0, "trials": self.trials}


def run_tpe(engine, start, space, budget, seed, judge=None):
    import optuna
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    s = Search("tpe", engine, start, space, budget, judge)
    s.measure_start()
    study = optuna.create_study(direction="maximize",
                                sampler=optuna.samplers.TPESampler(seed=seed))
    while s.left():
        t = study.ask()
        prof = s.profile(**space.suggest(t))
        xs = [x for x in s.runs(prof) if x] if prof else []
        spt = s.score_of(xs)
        study.tell(t, 0.0 if math.isinf(spt) else 1.0 / spt)
        if prof:
            s.offer(spt, prof)
    return s.result()


def run_random(engine, start, space, budget, seed, judge=None):
    rng = random.Random(seed)
    s = Search("random", engine, start, space, budget, judge)
    s.measure_start()
    while s.left():
        prof = s.profile(**space.draw(rng))
        if prof is None:
            s.trials += 1
            continue
        s.offer(s.score_of([x for x in s.runs(prof) if x]), prof)
    return s.result()


def run_coordinate(engine, start, space, budget, seed, judge=None):
    rng = random.Random(seed)
    s = Search("coordinate", engine, start, space, budget, judge)
    s.measure_start()
    cur = dict(space.initial)
    knobs = list(space.coord)
    rng.shuffle(knobs)
    while s.left():
        for knob in knobs:
            if not s.left():
                break
            values = sorted(set(space.coord[knob]) | ({cur[knob]} if cur[knob] is not None else set()))
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
            if s.best[1] != prof:
                s.new_best(meds[v], prof)
    return s.result()


TUNERS = {"tpe": run_tpe, "random": run_random, "coordinate": run_coordinate}
