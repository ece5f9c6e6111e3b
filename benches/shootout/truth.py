"""True speed: interleaved runs of many profiles against one reference.

Each round runs every profile once, in a fresh random order, with a run of
the reference (the start) before the first profile, after every
`ref_every`-th one and after the last. A profile's ratio in that round is its
seconds/token over the geometric mean of the two reference runs around it,
so slow drifts of the machine (load from other work) cancel. Its true speed
is the median of its per-round log ratios, with a 95% percentile-bootstrap
interval of that median. The same procedure measures the grid (the ground
truth) and, afterwards, every profile a contestant recommended.
"""

import math
import random
import statistics


def median_ci(xs, rng, n_boot=2000, level=0.95):
    if not xs:
        return None, None, None
    med = statistics.median(xs)
    if len(xs) == 1:
        return med, med, med
    boots = sorted(statistics.median(rng.choices(xs, k=len(xs))) for _ in range(n_boot))
    lo = boots[int((1 - level) / 2 * n_boot)]
    hi = boots[int((1 + level) / 2 * n_boot) - 1]
    return med, lo, hi


def measure(engine, reference, profiles, rounds, seed, ref_every=6, progress=None):
    """profiles: {key: Profile}. Returns {key: {"log_ratios": [...], ...}} and the
    reference's own seconds/token runs."""
    rng = random.Random(seed)
    logs = {k: [] for k in profiles}
    ref_runs = []
    keys = list(profiles)
    for r in range(rounds):
        rng.shuffle(keys)
        pending = []  # (key, spt) since the last reference run
        last_ref = engine.run(reference)
        if last_ref:
            ref_runs.append(last_ref)
        for i, k in enumerate(keys):
            spt = engine.run(profiles[k])
            pending.append((k, spt))
            if (i + 1) % ref_every == 0 or i == len(keys) - 1:
                ref = engine.run(reference)
                if ref:
                    ref_runs.append(ref)
                refs = [x for x in (last_ref, ref) if x]
                if refs:
                    g = math.exp(sum(math.log(x) for x in refs) / len(refs))
                    for kk, s in pending:
                        if s:
                            logs[kk].append(math.log(s / g))
                pending, last_ref = [], ref
        if progress:
            progress(r + 1, rounds)
    return {k: summary(xs, rng) for k, xs in logs.items()}, ref_runs


def summary(xs, rng):
    """A profile's per-round log ratios with their median and interval."""
    med, lo, hi = median_ci(xs, rng)
    return {"log_ratios": xs, "median": med, "lo": lo, "hi": hi, "n": len(xs)}


def pool(first, more, rng):
    """One profile measured twice by `measure` (the same procedure, the same
    reference): its per-round log ratios pooled, the median and interval
    recomputed over all of them. A final recommendation gets more rounds
    than the profiles on the way because the claim is judged against it:
    at 8 rounds a fast profile's truth moved 22% between two measurements
    (benches/shootout/README.md)."""
    return summary(list(first["log_ratios"]) + list(more["log_ratios"]), rng)
