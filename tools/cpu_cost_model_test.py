#!/usr/bin/env python3
"""Tests of tools/cpu_cost_model.py (and the pieces it shares with the GPU model in
tools/ddp_cost_model.py): the ring and pipeline arithmetic, and predictions read from a sweep's
output directory laid out as //experiments:scaling and //experiments:sim_cluster write it."""

import csv
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.join(os.environ.get("TEST_SRCDIR", ""), os.environ.get("TEST_WORKSPACE", "dtrain"), "tools")
if not os.path.isdir(HERE):
    HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import cpu_cost_model as c  # noqa: E402
import ddp_cost_model as d  # noqa: E402

COLUMNS = ["implementation", "backend", "model", "world_size", "batch_size",
           "communication_efficiency"]


def metrics(step_s, steps, timeline=None, stalls_s=0.0):
    # A stall or two lengthens the epoch but not the median step.
    return {"epochs": [{"epoch_seconds": step_s * steps + stalls_s, "steps": steps,
                        "step_seconds_p50": step_s, "ddp_timeline": timeline}]}


def write_run(runs, slug, m):
    os.makedirs(runs, exist_ok=True)
    with open(os.path.join(runs, slug + ".json"), "w") as f:
        json.dump(m, f)


class SharedPiecesTest(unittest.TestCase):

    def test_ring_sends_two_n_minus_one_over_n_plus_latency(self):
        self.assertAlmostEqual(d.ring_seconds(1e6, 2, 1e9, 0.0), 1e-3)
        self.assertAlmostEqual(d.ring_seconds(1e6, 4, 1e9, 2e-3), 1.5e-3 + 2e-3)
        self.assertEqual(d.ring_seconds(1e9, 1, 1.0, 5.0), 0.0)

    def test_pipeline_runs_buckets_in_order_and_exposes_what_outlasts_backward(self):
        # Ready at 1 and 2, 3 s each: the second waits for the first (ends 4), ends at 7.
        self.assertEqual(d.pipeline([(1.0, 3.0), (2.0, 3.0)], backward_end=5.0), (6.0, 7.0, 2.0))
        # Hidden entirely.
        self.assertEqual(d.pipeline([(1.0, 1.0)], backward_end=5.0), (1.0, 2.0, 0.0))
        self.assertEqual(d.pipeline([], backward_end=5.0), (0.0, 5.0, 0.0))

    def test_rates_in_tc_units(self):
        self.assertEqual(c.rate_gbit("10gbit"), 10.0)
        self.assertEqual(c.rate_gbit("500mbit"), 0.5)
        self.assertIsNone(c.rate_gbit("fast"))


class PredictionTest(unittest.TestCase):

    def setUp(self):
        self.dir = tempfile.mkdtemp()
        # 2 hosts x 1 rank at 8 Gb/s (1 GB/s): a 1 MB bucket launched at backward's end takes
        # 2(2-1)/2 * 1 MB / 1 GB/s = 1 ms, all exposed; a 4 MB one launched at 1 ms of a 10 ms
        # backward takes 4 ms and is hidden. Compute 20 ms per step: 20 / 21.
        timeline = {"backward_seconds": 0.010, "buckets": [
            {"bytes": 4000000, "launch_seconds": 0.001},
            {"bytes": 1000000, "launch_seconds": 0.010}]}
        runs = os.path.join(self.dir, "8gbit", "runs")
        write_run(runs, "dtrain_gloo_convnet_np2_bs32_sync_r0", metrics(0.025, 10, timeline))
        write_run(runs, "dtrain_gloo_convnet_np2_bs32_nosync_r0", metrics(0.020, 10))
        write_run(runs, "dtrain_gloo_convnet_np2_bs32_nosync_r1", metrics(0.030, 10, None, 1.0))
        write_run(runs, "dtrain_gloo_convnet_np2_bs32_nosync_r2", metrics(0.019, 10))
        write_run(runs, "pytorch_gloo_convnet_np2_bs32_sync_r0", metrics(0.030, 10))
        write_run(runs, "pytorch_gloo_convnet_np2_bs32_nosync_r0", metrics(0.027, 10))
        with open(os.path.join(self.dir, "combined.csv"), "w", newline="") as f:
            w = csv.DictWriter(f, ["link_rate", "measured_link_gbit", "hosts", "ranks_per_host"]
                               + COLUMNS)
            w.writeheader()
            base = {"link_rate": "8gbit", "measured_link_gbit": "", "hosts": 2,
                    "ranks_per_host": 1, "backend": "gloo", "model": "convnet",
                    "world_size": 2, "batch_size": 32}
            w.writerow(dict(base, implementation="dtrain", communication_efficiency=0.9))
            w.writerow(dict(base, implementation="pytorch", communication_efficiency=0.8))
            w.writerow(dict(base, implementation="dtrain", world_size=1,
                            communication_efficiency=1))

    def test_predicts_from_the_measured_runs(self):
        args = c.parse_args([self.dir, "--alpha_us", "0", "--comm_cpu_ms_per_mb", "0",
                             "--what_if_gbit", "8,80"])
        rows = c.analyse(args)
        self.assertEqual(len(rows), 1)  # ours, world size > 1 only
        r = rows[0]
        self.assertAlmostEqual(r["compute_s"], 0.020)  # median of the no-sync repeats
        self.assertEqual(r["gradient_bytes"], 5000000)
        p = r["prediction"]
        self.assertAlmostEqual(p["comm_s"], 0.005)
        self.assertAlmostEqual(p["exposed_s"], 0.001)
        self.assertAlmostEqual(p["efficiency"], 20 / 21)
        self.assertAlmostEqual(r["measured_over_predicted"], 0.9 * 21 / 20)
        # From median step times: 20 ms / 25 ms; PyTorch's beside it.
        self.assertAlmostEqual(r["measured_p50_efficiency"], 0.8)
        self.assertAlmostEqual(r["pytorch_efficiency"], 0.8)
        self.assertAlmostEqual(r["pytorch_p50_efficiency"], 0.9)
        # Ten times the rate: the last bucket takes 0.1 ms.
        self.assertAlmostEqual(r["what_if"]["80.0"], 20 / 20.1)

    def test_communication_cpu_comes_out_of_compute_once_cores_are_busy(self):
        args = c.parse_args([self.dir, "--comm_cpu_ms_per_mb", "3", "--cores", "2"])
        # 4 ranks on 2 busy cores, 3 ms each for 1 MB: 12 ms of CPU over 2 cores.
        self.assertAlmostEqual(c.cpu_seconds(1e6, 4, 0.020, args), 6e-3)
        # 1 rank: the idle core takes it.
        self.assertEqual(c.cpu_seconds(1e6, 1, 0.020, args), 0.0)
        rows = c.analyse(args)
        p = rows[0]["prediction"]
        # 2 ranks on 2 cores, 5 MB at 3 ms/MB each: 15 ms more per step.
        self.assertAlmostEqual(p["cpu_s"], 0.015)
        self.assertAlmostEqual(p["step_s"], 0.020 + p["exposed_s"] + 0.015)

    def test_two_ranks_per_host_with_shared_memory_rings_over_hosts(self):
        args = c.parse_args([self.dir, "--alpha_us", "0", "--shm_gbps", "1"])
        # 1 MB: shared memory 2 x 1 ms, then a ring over 2 hosts at 1 GB/s, 1 ms.
        self.assertAlmostEqual(c.allreduce_seconds(1e6, "gloo+shm", 2, 2, 8.0, args), 3e-3)
        # Without shared memory, one ring over 4 ranks: 1.5 ms.
        self.assertAlmostEqual(c.allreduce_seconds(1e6, "gloo", 2, 2, 8.0, args), 1.5e-3)

    def test_command_line(self):
        script = os.path.join(HERE, "cpu_cost_model.py")
        text = subprocess.run([sys.executable, script, self.dir], check=True,
                              capture_output=True, text=True).stdout
        self.assertTrue(text.startswith("PREDICTION from measured inputs"))
        self.assertIn("| 8gbit | 2x1 | gloo | convnet |", text)
        # The what-if rows say which sweep's measurements they start from.
        what_if = text[text.index("on other links"):]
        self.assertIn("| measured at | hosts x ranks |", what_if)
        self.assertIn("| 8gbit | 2x1 | gloo | convnet | ", what_if)
        m = json.loads(subprocess.run([sys.executable, script, self.dir, "--json"], check=True,
                                      capture_output=True, text=True).stdout)
        self.assertEqual(m["format"], "dtrain.cpu_cost_model.v1")
        self.assertEqual(len(m["rows"]), 1)
        bad = subprocess.run([sys.executable, script, tempfile.mkdtemp()],
                             capture_output=True, text=True)
        self.assertEqual(bad.returncode, 2)
        self.assertIn("neither combined.csv", bad.stderr)


if __name__ == "__main__":
    unittest.main()
