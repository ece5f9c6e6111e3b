"""One standard for every contestant: the shoot-out's accounting, pure (no engine).

- `held_time`: the engine time from which a contestant's current
  recommendation is at 90% of the optimum's gain and stays there. The old
  column counts any recommendation; the new one counts a recommendation only
  from the moment it is *confirmed* (the loop's staged and approved win; a
  tuner's best trial once `orchestrator compare` confirmed it as a win), and
  only while the confirmed claim's interval holds the true speed.
- `choose_near_start`: landscape B's start, from landscape A's ground truth.
- `after_last_approval`: the loop's engine share once it stopped changing
  the live profile.
- `evaluate_goals`: the goals, per landscape; a missed goal makes the
  harness exit non-zero.

Log ratios throughout: a profile's true speed is the median log of its
seconds/token over the start's (negative is faster); the optimum's is `opt`.
"""

import math
import random
import statistics
from dataclasses import dataclass

from truth import median_ci

NINETY = 0.9
# B's start is this much slower than the grid optimum (its speed 10-25% below).
NEAR_BAND = (0.10, 0.25)
MAX_ENGINE_SHARE_AFTER = 0.10


def share(true_log, opt):
    """The share of the optimum's gain (in log speed) a profile holds."""
    return true_log / opt if opt < 0 else float("nan")


def holds(interval, true_median, eps=1e-12):
    """A claim's interval (log ratios) holds the true median."""
    lo, hi = interval
    return lo - eps <= true_median <= hi + eps


def held_time(points, truth, opt, need_claim=False):
    """`points`: [(t, key, claim, interval)] in time order, each the
    recommendation current from engine time t on. A point counts when its
    true speed holds >= 90% of the optimum's gain and, with `need_claim`,
    when its claim's interval holds that truth. Returns (held, first): the
    time from which the current recommendation counts to the end (None:
    never, or it stopped counting), and the first time any did."""
    held = first = None
    for t, key, _claim, interval in points:
        tl = truth.get(key, {}).get("median")
        good = tl is not None and share(tl, opt) >= NINETY
        if need_claim:
            good = good and interval is not None and holds(interval, tl)
        if good and first is None:
            first = t
        if good and held is None:
            held = t
        elif not good:
            held = None
    return held, first


def choose_near_start(truth, opt_key, band=NEAR_BAND):
    """Landscape B's start from landscape A's ground truth (`truth`: key ->
    that point's summary from `truth.measure`, with its per-round
    `log_ratios` against A's start, or None).

    A point's gap to the optimum is the median of its per-round log ratios
    minus the optimum's in the same round (both runs sit between the same
    two reference runs, so the round's own drift cancels), with a 95%
    bootstrap interval of that median. Of the points whose gap lies in the
    band (10-25% slower), the one *surest* to be slower: the largest lower
    bound of its interval (ties: nearest the middle of the band in log
    speed, then key). Why not simply the point nearest the band's middle:
    at 6 rounds a point's truth has an interval of ±15-20%, so the point
    whose median happened to land mid-band was, in the run of record
    (2026-12-05), 1% from the optimum by B's own ground truth, and B had no
    gain left to find.

    Returns (key, gap, (lo, hi), in_band), all log ratios; with no point in
    the band, the point whose gap is nearest the band and in_band False."""
    opt = truth[opt_key]
    lo_b, hi_b = math.log1p(band[0]), math.log1p(band[1])
    mid = (lo_b + hi_b) / 2
    rng = random.Random(0)  # the choice is reproducible from the truth alone
    rows = []
    for k, v in sorted(truth.items()):
        if k == opt_key or v is None or v["median"] is None:
            continue
        xs, os_ = v["log_ratios"], opt["log_ratios"]
        if len(xs) == len(os_):
            gap, g_lo, g_hi = median_ci([x - o for x, o in zip(xs, os_)], rng)
        else:  # a run failed in some round: the rounds do not pair, bound the gap unpaired
            gap = v["median"] - opt["median"]
            g_lo, g_hi = v["lo"] - opt["hi"], v["hi"] - opt["lo"]
        rows.append((k, gap, (g_lo, g_hi)))
    if not rows:
        raise ValueError("the ground truth has no point but the optimum")
    in_band = [r for r in rows if lo_b <= r[1] <= hi_b]
    if in_band:
        k, gap, ci = min(in_band, key=lambda r: (-r[2][0], abs(r[1] - mid), r[0]))
        return k, gap, ci, True
    k, gap, ci = min(rows, key=lambda r: (min(abs(r[1] - lo_b), abs(r[1] - hi_b)), r[0]))
    return k, gap, ci, False


def after_last_approval(run):
    """The loop's engine time after its last approval and the wall time
    that remained (from its start when it approved nothing), with their
    ratio. `run`: its `approvals` ({engine_s, wall_s} each, both from the
    loop's start), `engine_s` and `wall_s` at its end."""
    last = run["approvals"][-1] if run.get("approvals") else {"engine_s": 0.0, "wall_s": 0.0}
    engine = max(run["engine_s"] - last["engine_s"], 0.0)
    wall = max(run["wall_s"] - last["wall_s"], 0.0)
    return {"engine_s": engine, "wall_s": wall, "share": engine / wall if wall > 0 else float("inf")}


@dataclass
class Goal:
    landscape: str
    contestant: str
    goal: str
    met: bool
    detail: str

    def line(self):
        return f"{self.landscape}, {self.contestant}: {self.goal}: {'met' if self.met else 'NOT MET'} ({self.detail})"


def _median(xs):
    return statistics.median(xs) if xs else float("nan")


def _secs(t):
    return "never" if t is None or math.isinf(t) else f"{t:.1f} s"


def evaluate_goals(name, rows):
    """The goals of landscape `name` ("A", "B" or "C") over its rows (one
    per contestant and seed; see `shootout.summarize`), for each loop
    contestant that ran. A goal that needs a contestant that did not run
    (TPE, for A) is not evaluated and says so in a line of its own."""
    goals, skipped = [], []
    by = {}
    for r in rows:
        by.setdefault(r["contestant"], []).append(r)
    loops = [c for c in by if c.startswith("loop-")]
    tpe = by.get("tpe", [])
    for c in loops:
        ls = by[c]
        if name == "A":
            if not tpe:
                skipped.append(f"A, {c}: the time and speed goals need TPE, which did not run")
            else:
                lt = _median([r["t90_confirmed"] if r["t90_confirmed"] is not None else math.inf for r in ls])
                tt = _median([r["t90_confirmed"] if r["t90_confirmed"] is not None else math.inf for r in tpe])
                met = not math.isinf(lt) and (math.isinf(tt) or lt <= 0.5 * tt)
                goals.append(Goal(name, c, "time to a confirmed 90% <= 1/2 of TPE's, same standard", met,
                                  f"median {_secs(lt)} vs TPE {_secs(tt)}"))
                lf = _median([r["true"] for r in ls])
                t_lo = _median([r["true_hi"] for r in tpe])  # the slower end of TPE's truth
                goals.append(Goal(name, c, "final true speed >= TPE's lower interval bound", lf <= t_lo + 1e-12,
                                  f"median {math.exp(-lf):.2f}x vs TPE's lower bound {math.exp(-t_lo):.2f}x"))
        else:
            recs = [x for r in ls for x in r["recs"] if x["true"] is not None]
            slower = [x for x in recs if x["lo"] is not None and x["lo"] > 0]
            goals.append(Goal(name, c, "recommends nothing truly slower than its start", not slower,
                              f"{len(slower)} of {len(recs)} recommendations"))
            claims = [x for x in recs if x["claim_interval"] is not None]
            off = [x for x in claims if not holds(x["claim_interval"], x["true"])]
            goals.append(Goal(name, c, "every claim within its interval of the truth", not off,
                              f"{len(off)} of {len(claims)} claims outside"))
            if name == "B":
                sh = _median([r["share"] for r in ls])
                goals.append(Goal(name, c, "confirms at least half of the remaining gain", sh >= 0.5,
                                  f"median {sh:.0%} of the optimum's gain"))
        shares = [r["after_last"]["share"] for r in ls]
        worst = max(shares) if shares else float("nan")
        goals.append(Goal(name, c, "engine time after its last approval <= 10% of that remaining wall time",
                          bool(shares) and worst <= MAX_ENGINE_SHARE_AFTER,
                          "per seed " + ", ".join(f"{s:.0%}" for s in shares)))
    return goals, skipped


def tuner_rates(rows):
    """Per tuner: the share of seeds whose recommendation is truly slower
    than the start, and whose claim overstates the truth (the raw best
    trial as the tool gives it, and the confirmed one)."""
    out = {}
    for c in dict.fromkeys(r["contestant"] for r in rows):
        if c.startswith("loop-"):
            continue
        ws = [r for r in rows if r["contestant"] == c]
        n = len(ws)
        out[c] = {
            "seeds": n,
            "slower_than_start": sum(r["slower_than_start"] for r in ws) / n,
            "overclaims": sum(r["slower_than_claimed"] for r in ws) / n,
            "confirmed_slower_than_start": sum(r["confirmed_slower_than_start"] for r in ws) / n,
            "confirmed_overclaims": sum(r["confirmed_overclaims"] for r in ws) / n,
        }
    return out
