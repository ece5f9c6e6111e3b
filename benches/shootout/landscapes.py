"""The three landscapes: where each starts, the knobs its tuners search, its lattice.

- A, the demo's slow start: tinyk3 (`stack.py`) from the demo's slow start
  scaled to the shoot-out's checkpoint. Its first good move (a draft) is a
  x3.5 effect that no search can miss.
- B, near the optimum: the same engine and knob space, started from the
  lattice point of A's ground truth whose true speed is 10-25% below the
  grid optimum's (`standard.choose_near_start`): every remaining
  difference is meant to be one to three noise floors, where keeping the
  best trial seen recommends noise (on this checkpoint a floor of such a
  start is 11-15%, so it is one to two: `floor_width.py`).
- C, the real engine: kimi-k3-in-c's `bin/k3` on the tiny checkpoint
  (`k3.py`), its two knobs (the draft length, the trunk/cache split) from a
  start where no split starves anything: expected nearly flat (its ground
  truth says how flat), where the right answer is to recommend no change.

A and B share one knob space, anchored at A's start (the trunk + cache pool
every split and pin count is paid from, as the planners do from the demo's
live profile), so B's lattice is A's lattice measured against B's start.
"""

import math
from dataclasses import dataclass, field

import k3
from stack import point
from tuners import Space

TINY_DOMAINS = {"pin_count": (0, 128, 16), "warm_set": (0, 256, 32), "draft_len": (0, 8, 1),
                "trunk_fraction": (0.0, 1.0, 0.05)}
# autotune sweeps a short candidate list per knob
TINY_COORD = {
    "pin_count": [0, 16, 32, 64, 128],
    "warm_set": [0, 64, 128, 256],
    "draft_len": [0, 1, 2, 4, 8],
    "trunk_fraction": [0.1, 0.3, 0.5, 0.7, 0.9],
}
K3_DOMAINS = {"draft_len": (0, 8, 1), "trunk_fraction": (0.0, 1.0, 0.05)}
K3_COORD = {"draft_len": [0, 1, 2, 4, 8], "trunk_fraction": [0.1, 0.3, 0.5, 0.7, 0.9]}


@dataclass
class Landscape:
    name: str
    title: str
    engine_argv: object  # (profile, out, heat) -> argv
    stack: object  # loop.TinyStack or k3.K3Stack
    start: object
    space: Space
    lattice: dict = field(default_factory=dict)  # key -> profile, the start excluded
    knobs: dict = field(default_factory=dict)  # key -> the knobs that built it
    why: str = ""

    def compare_config(self, d, log):
        """The config `orchestrator compare` judges the tuners with: the loop's."""
        from stack import free_port
        return self.stack.config(d, log, "bandit", free_port())


def tiny_lattice(anchor, pins_file, quick):
    if quick:
        axes = dict(pins=[0], warm=[0], draft=[0, 4], trunk=[None, 0.8])
    else:
        axes = dict(pins=[0, 16], warm=[0, 128], draft=[0, 2, 4, 8], trunk=[None, 0.55, 0.8])
    lattice, knobs = {}, {}
    for pc in axes["pins"]:
        for w in axes["warm"]:
            for dl in axes["draft"]:
                for tf in axes["trunk"]:
                    k = dict(pin_count=pc, warm_set=w, draft_len=dl, trunk_fraction=tf)
                    p = point(anchor, pins_file, **k)
                    if p is not None:
                        lattice.setdefault(p.key(), p)
                        knobs.setdefault(p.key(), k)
    return lattice, knobs


def tiny_space(anchor, pins_file, initial):
    return Space(TINY_DOMAINS, lambda **k: point(anchor, pins_file, **k), initial, TINY_COORD)


def landscape_a(argv, stack, anchor, pins_file, quick):
    lattice, knobs = tiny_lattice(anchor, pins_file, quick)
    lattice.pop(anchor.key(), None)
    initial = dict(pin_count=0, warm_set=0, draft_len=0, trunk_fraction=None)
    return Landscape("A", "the demo's slow start (tinyk3)", argv, stack, anchor,
                     tiny_space(anchor, pins_file, initial), lattice, knobs,
                     "tinyk3/profiles/slow-start.toml scaled to the shoot-out's checkpoint")


def landscape_b(a, pins_file, start_key, gap, gap_ci, in_band):
    """B from A: the same space and lattice, started at A's lattice point
    `start_key` (chosen by `standard.choose_near_start`, with its gap to the
    optimum and that gap's interval, log ratios)."""
    start = a.lattice[start_key]
    lattice = {k: p for k, p in a.lattice.items() if k != start_key}
    lattice[a.start.key()] = a.start  # going back is a move too; the truth says how slow
    knobs = dict(a.knobs)
    why = (f"A's lattice point {start.short()}, {100 * math.expm1(gap):.0f}% slower than "
           f"A's grid optimum by A's ground truth [{100 * math.expm1(gap_ci[0]):.0f}%, "
           f"{100 * math.expm1(gap_ci[1]):.0f}%], the in-band point surest to be slower"
           + ("" if in_band else " (no point lay 10-25% below the optimum: the nearest one)"))
    return Landscape("B", "near the optimum (tinyk3)", a.engine_argv, a.stack, start,
                     tiny_space(a.start, pins_file, dict(knobs[start_key])), lattice, knobs, why)


def landscape_c(facts, stack, quick):
    start = k3.starting_profile(facts)
    build = lambda **kn: k3.point(start, facts.top_k, **kn)  # noqa: E731
    axes = dict(draft=[0, 4], trunk=[None, 0.8]) if quick else dict(draft=[0, 2, 4, 8],
                                                                    trunk=[None, 0.2, 0.6, 0.8])
    lattice, knobs = {}, {}
    for dl in axes["draft"]:
        for tf in axes["trunk"]:
            k = dict(draft_len=dl, trunk_fraction=tf)
            p = build(**k)
            if p is not None and p.key() != start.key():
                lattice.setdefault(p.key(), p)
                knobs.setdefault(p.key(), k)
    space = Space(K3_DOMAINS, build, dict(draft_len=0, trunk_fraction=None), K3_COORD)
    argv = lambda p, out, heat: k3.bench_argv(facts, p, out, heat)  # noqa: E731
    return Landscape("C", "the real engine (kimi-k3-in-c bin/k3)", argv, stack, start, space, lattice, knobs,
                     "the start of tests/e2e/kimi_k3_real.rs: trunk 20 MB, cache 30 MB, no draft")
