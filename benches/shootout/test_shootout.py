"""Tests of the harness's own pieces: python3 -m unittest benches/shootout/test_shootout.py

The end-to-end check is `bash benches/shootout/run.sh --quick` (a few
minutes); these take a second and need no engine.
"""

import math
import random
import sys
import tempfile
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import stack  # noqa: E402
import truth  # noqa: E402
from loop import substitute, write_config  # noqa: E402
from plot import step_value  # noqa: E402


class EngineClock(unittest.TestCase):
    def run_clock(self, *cmd):
        import subprocess
        with tempfile.TemporaryDirectory() as d:
            log = Path(d) / "log"
            r = subprocess.run(["python3", str(stack.CLOCK), str(log), "--", *cmd])
            return r.returncode, log.read_text().splitlines()

    def test_counts_the_wall_time_of_each_run(self):
        code, lines = self.run_clock("sleep", "0.3")
        self.assertEqual(code, 0)
        self.assertEqual(len(lines), 1)
        wall = float(lines[0].split()[1])
        self.assertGreaterEqual(wall, 0.3)
        self.assertLess(wall, 2.0)

    def test_passes_the_exit_code_on_and_still_counts(self):
        code, lines = self.run_clock("sh", "-c", "exit 4")
        self.assertEqual(code, 4)
        self.assertEqual(lines[0].split()[2], "4")

    def test_a_missing_program_is_127(self):
        code, lines = self.run_clock("/nonexistent/engine")
        self.assertEqual(code, 127)

    def test_totals_add_up(self):
        with tempfile.TemporaryDirectory() as d:
            log = Path(d) / "log"
            log.write_text("1.0 0.5 0 a\n2.0 1.25 0 b\n")
            self.assertAlmostEqual(stack.clock_total(log), 1.75)
            self.assertEqual(stack.clock_total(Path(d) / "none"), 0.0)


class Planners(unittest.TestCase):
    """The harness's knob space must be the one the menu's planners reach."""

    def setUp(self):
        self.start = stack.Profile(budget_gb=0.04, trunk_gb=0.0063, cache_gb=0.0126, pins_file="",
                                   pin_count=0, far_addr="127.0.0.1:1", warm_set=0, draft_len=0)

    def test_start_split_is_unchanged(self):
        p = stack.point(self.start, "", pin_count=0, warm_set=0, draft_len=0, trunk_fraction=None)
        self.assertEqual(p.trunk_gb, 0.0063)
        self.assertEqual(stack.cache_slots(p.cache_gb), 32)

    def test_trunk_in_whole_mb_total_fixed(self):
        p = stack.point(self.start, "", pin_count=0, warm_set=0, draft_len=0, trunk_fraction=0.55)
        self.assertEqual(p.trunk_gb, 0.010)  # round(0.55 * 18.9 MB) = 10 MB
        self.assertEqual(round(p.trunk_gb * 1e9) + round(p.cache_gb * 1e9), 18_900_000)

    def test_pins_come_out_of_the_cache(self):
        p = stack.point(self.start, "/p", pin_count=16, warm_set=0, draft_len=0, trunk_fraction=None)
        self.assertEqual(stack.cache_slots(p.cache_gb), 16)
        self.assertEqual(p.pins_file, "/p")

    def test_a_cache_under_top_k_is_refused(self):
        self.assertIsNone(stack.point(self.start, "", pin_count=0, warm_set=0, draft_len=0,
                                      trunk_fraction=1.0))
        self.assertIsNone(stack.point(self.start, "/p", pin_count=32, warm_set=0, draft_len=0,
                                      trunk_fraction=None))

    def test_argv_is_config_toml_template(self):
        p = stack.point(self.start, "/p", pin_count=16, warm_set=64, draft_len=4, trunk_fraction=None)
        argv = stack.bench_argv(Path("/ck"), p, Path("/o.json"), Path("/h"))
        s = " ".join(argv)
        self.assertIn("--pins /p --pin-count 16", s)
        self.assertIn("--far 127.0.0.1:1 --far-warm-set 64", s)
        self.assertIn("--incremental --spec 4", s)
        p0 = stack.point(self.start, "", pin_count=0, warm_set=0, draft_len=0, trunk_fraction=None)
        s0 = " ".join(stack.bench_argv(Path("/ck"), p0, Path("/o.json"), Path("/h")))
        self.assertNotIn("--pins", s0)
        self.assertNotIn("--incremental", s0)  # the start decodes without a KV cache, as shipped


class Config(unittest.TestCase):
    def test_every_substitution_finds_its_text(self):
        with tempfile.TemporaryDirectory() as d:
            cfg = write_config(Path(d), Path("/ck"), Path(d) / "log", "bandit", 1234, 1235)
            text = cfg.read_text()
            self.assertNotIn("[embedded]", text)
            self.assertIn('proposer = "bandit"', text)
            self.assertIn("engine_clock.py", text)
            self.assertNotIn("ledger/tinyk3-demo", text)
            # the judge is as shipped
            for line in ("min_pairs = 4", "max_pairs = 16", "floor_pairs = 20", "confidence = 0.10"):
                self.assertIn(line, text)

    def test_a_missing_text_stops_the_harness(self):
        with self.assertRaises(SystemExit):
            substitute("abc", [("xyz", "q")])


class Truth(unittest.TestCase):
    def test_median_ci_brackets_the_median(self):
        rng = random.Random(1)
        xs = [rng.gauss(-1.0, 0.1) for _ in range(12)]
        med, lo, hi = truth.median_ci(xs, rng)
        self.assertLessEqual(lo, med)
        self.assertLessEqual(med, hi)
        self.assertLess(hi - lo, 0.3)

    def test_pooling_two_measurements_uses_every_round(self):
        rng = random.Random(1)
        a = {"log_ratios": [-2.0, -2.2, -1.9], "median": -2.0}
        b = {"log_ratios": [-1.7, -1.8], "median": -1.75}
        p = truth.pool(a, b, rng)
        self.assertEqual(p["n"], 5)
        self.assertEqual(p["median"], -1.9)
        self.assertLessEqual(p["lo"], p["median"])
        self.assertGreaterEqual(p["hi"], p["median"])
        self.assertEqual(a["log_ratios"], [-2.0, -2.2, -1.9], "the first is not changed")

    def test_ratio_against_the_reference_cancels_drift(self):
        class Fake:
            """A test double for the engine: a profile's speed times a machine that slows down."""
            def __init__(self):
                self.t = 0

            def run(self, p):
                self.t += 1
                return p * (1 + 0.01 * self.t)

        res, _ = truth.measure(Fake(), 1.0, {"half": 0.5, "same": 1.0}, rounds=5, seed=3, ref_every=1)
        self.assertAlmostEqual(math.exp(res["half"]["median"]), 0.5, delta=0.01)
        self.assertAlmostEqual(math.exp(res["same"]["median"]), 1.0, delta=0.01)

    def test_trajectory_is_a_step_function(self):
        traj = [(0.0, 0.0), (10.0, -1.0), (30.0, -2.0)]
        self.assertEqual(step_value(traj, 5), 0.0)
        self.assertEqual(step_value(traj, 10), -1.0)
        self.assertEqual(step_value(traj, 99), -2.0)


if __name__ == "__main__":
    unittest.main()
