#!/usr/bin/env python3
"""Tests of tools/gpu_cost_model.py: the architecture it counts, its buckets, the ring formula, and
the shape of its predictions (none of which says anything about real GPUs)."""

import json
import os
import subprocess
import sys
import unittest

HERE = os.path.join(os.environ.get("TEST_SRCDIR", ""), os.environ.get("TEST_WORKSPACE", "dtrain"), "tools")
if not os.path.isdir(HERE):
    HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import gpu_cost_model as g  # noqa: E402


class ArchitectureTest(unittest.TestCase):

    def test_counts_resnet18_as_torchvision_builds_it(self):
        layers = g.resnet18_layers()
        # tools/model_summary --model=resnet18 --num_classes=1000 says 11,689,512; torchvision's
        # model card says 1.81 GFLOPS (multiply-accumulates) at 224x224.
        self.assertEqual(sum(n for _, ps, _ in layers for _, n in ps), 11689512)
        self.assertEqual(sum(m for _, _, m in layers), 1814073344)
        self.assertEqual(len([p for _, ps, _ in layers for p in ps]), 62)

    def test_gradients_come_in_reverse_registration_order_within_backward(self):
        ready = g.gradient_ready_times(g.resnet18_layers(), backward_ms=10.0)
        self.assertEqual([r[0] for r in ready[:2]], ["fc.bias", "fc.weight"])
        self.assertEqual(ready[-1][0], "conv1.weight")
        self.assertAlmostEqual(ready[-1][2], 10.0)
        times = [t for _, _, t in ready]
        self.assertEqual(times, sorted(times))


class BucketTest(unittest.TestCase):

    def test_first_bucket_cap_then_the_rest_closing_once_reached(self):
        ready = [("a", 3, 1.0), ("b", 3, 2.0), ("c", 5, 3.0), ("d", 1, 4.0), ("e", 1, 5.0)]
        self.assertEqual(g.buckets(ready, first_cap_bytes=2, cap_bytes=6),
                         [(3, 1.0, ["a"]), (8, 3.0, ["b", "c"]), (2, 5.0, ["d", "e"])])

    def test_default_buckets_hold_every_gradient_once(self):
        ready = g.gradient_ready_times(g.resnet18_layers(), 1.0)
        bs = g.buckets(ready, 1 << 20, 25 << 20)
        self.assertEqual(sum(b for b, _, _ in bs), 4 * 11689512)
        self.assertEqual(sorted(p for _, _, ps in bs for p in ps), sorted(r[0] for r in ready))
        self.assertEqual(len(bs), 3)


class RingTest(unittest.TestCase):

    def test_bandwidth_and_latency_terms(self):
        # 2(n-1)/n * B / busbw: 8 GPUs, 100 MB at 100 GB/s is 1.75 ms; no latency.
        self.assertAlmostEqual(g.allreduce_ms(100e6, 8, 100.0, 0, 0, 8), 1.75)
        # One node: 2(n-1) * alpha_intra.
        self.assertAlmostEqual(g.allreduce_ms(0, 8, 100.0, 5, 30, 8), 2 * 7 * 5e-3)
        # 16 GPUs on 2 nodes: 2(16-2) intra hops, 2(2-1) network hops.
        self.assertAlmostEqual(g.allreduce_ms(0, 16, 100.0, 5, 30, 8), (28 * 5 + 2 * 30) * 1e-3)
        self.assertEqual(g.allreduce_ms(1e9, 1, 1.0, 5, 30, 8), 0.0)

    def test_busbw_is_nvlink_in_a_node_and_the_nic_across_nodes(self):
        args = g.parse_args([])
        self.assertEqual(g.busbw_for(8, 25.0, args), 200.0)
        self.assertAlmostEqual(g.busbw_for(16, 25.0, args), 2.5)
        self.assertAlmostEqual(g.busbw_for(16, 100.0, args), 10.0)


class PredictionTest(unittest.TestCase):

    def test_one_gpu_is_compute_alone(self):
        r = g.predict(g.parse_args(["--compute_ms", "30"]), 1, None)
        self.assertEqual((r["step_ms"], r["exposed_ms"], r["efficiency"]), (30.0, 0.0, 1.0))

    def test_efficiency_falls_with_gpus_and_slower_networks(self):
        args = g.parse_args([])
        for _, nic in g.FABRICS[1:]:
            eff = [g.predict(args, n, nic)["efficiency"] for n in g.GPU_COUNTS]
            self.assertEqual(eff, sorted(eff, reverse=True))
        for n in (16, 256):
            self.assertLess(g.predict(args, n, 25.0)["efficiency"],
                            g.predict(args, n, 100.0)["efficiency"])

    def test_communication_hidden_by_a_long_backward_is_not_exposed(self):
        # A backward far longer than every allreduce hides all but the last bucket's.
        args = g.parse_args(["--compute_ms", "1000", "--alpha_intra_us", "0"])
        r = g.predict(args, 8, None)
        last_bucket = 15853824
        self.assertAlmostEqual(r["exposed_ms"], g.allreduce_ms(last_bucket, 8, 200.0, 0, 0, 8))

    def test_command_line_marks_the_output_as_a_prediction(self):
        script = os.path.join(HERE, "gpu_cost_model.py")
        text = subprocess.run([sys.executable, script], check=True, capture_output=True,
                              text=True).stdout
        self.assertTrue(text.startswith("PREDICTION (cost model, not measured)"))
        self.assertEqual(text.count("\n| 256 |"), 2)
        m = json.loads(subprocess.run([sys.executable, script, "--json"], check=True,
                                      capture_output=True, text=True).stdout)
        self.assertTrue(m["prediction"])
        # NVLink for 1 to 8 GPUs (one node), each network for 16 to 256.
        self.assertEqual(len(m["rows"]), 4 + 2 * 5)
        bad = subprocess.run([sys.executable, script, "--backward_share", "2"],
                             capture_output=True, text=True)
        self.assertEqual(bad.returncode, 2)


if __name__ == "__main__":
    unittest.main()
