#!/usr/bin/env python3
"""The CPU twin of tools/gpu_cost_model.py: the step time and communication efficiency DDP should
reach on CPUs over a given network, predicted from what the scaling sweep's own runs measured, to
hold the measurements against (docs/PERFORMANCE.md, "Across hosts").

Usage: tools/cpu_cost_model.py DIR [--loopback_gbit 27] [--alpha_us 50] [--shm_gbps 40]
                               [--comm_cpu_ms_per_mb 3.1] [--cores N]
                               [--what_if_gbit 1,10,25,100] [--json]
DIR is a simulated-cluster output (//experiments:sim_cluster: combined.csv, <rate>/runs/) or a
scaling sweep's (results.csv, runs/).

The model, per synchronised step of our DDP (every configuration with world size > 1):
  - compute: the no-sync runs' median step time (step_seconds_p50; median over repeats: a shared
    machine stalls a process now and then for tens of milliseconds, which the median ignores);
  - gradients: the sync runs' ddp_timeline (the trainer's metrics JSON): each bucket's bytes and
    when it was launched after backward's first gradient, and when backward's last gradient came
    (medians over repeats);
  - each bucket's allreduce (tools/ddp_cost_model.py): a ring sends 2(n-1)/n of the bucket over its
    slowest link plus 2(n-1) steps of --alpha_us. Between hosts the slowest link is the host's
    shaped link, at what one TCP stream measured through it (sim_cluster's measured_link_gbit, else
    the nominal rate); on one host, loopback (--loopback_gbit). gloo: one ring over all n ranks.
    gloo+shm: shared memory inside each host (2 passes over the bucket at --shm_gbps) and a ring
    over the hosts;
  - buckets run one after another from their launch; exposed = what runs past backward's last
    gradient;
  - communication's own CPU time: --comm_cpu_ms_per_mb per rank for each MB it allreduces (copies
    into and out of buckets, Gloo's sums, the kernel's path through sockets, veth, bridge and tbf,
    thread wake-ups). The ranks of every simulated host share this machine's --cores: while they
    outnumber idle cores, that CPU time comes out of the computation, spread over the cores;
  - predicted step = compute + exposed + that CPU time; efficiency = compute / predicted step.
Measured efficiency is the sweep's (no-sync samples/s over sync samples/s, "vs no-comm"), and the
same from median step times (no-sync p50 over sync p50), for ours and, beside it, PyTorch's.
Ignored: the runs' start-up, stragglers, the optimizer step and data loading (in both compute and
step alike).
"""

import argparse
import csv
import glob
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ddp_cost_model import pipeline, ring_seconds  # noqa: E402

RATE_UNITS = {"kbit": 1e-6, "mbit": 1e-3, "gbit": 1.0, "tbit": 1e3}


def rate_gbit(text):
    """'10gbit' -> 10.0 (tc's units); None when it is not a rate."""
    t = str(text).strip().lower()
    for unit, scale in RATE_UNITS.items():
        if t.endswith(unit):
            try:
                return float(t[:-len(unit)]) * scale
            except ValueError:
                return None
    return None


def allreduce_seconds(nbytes, backend, hosts, ranks_per_host, link_gbit, args):
    """One bucket's allreduce over hosts x ranks_per_host ranks (see the module's docstring)."""
    n = hosts * ranks_per_host
    alpha = args.alpha_us * 1e-6
    link = (link_gbit if hosts > 1 else args.loopback_gbit) * 1e9 / 8
    if backend == "gloo+shm" and ranks_per_host > 1:
        shm = 2.0 * nbytes / (args.shm_gbps * 1e9) + 2 * alpha
        return shm + ring_seconds(nbytes, hosts, link, 2 * (hosts - 1) * alpha)
    return ring_seconds(nbytes, n, link, 2 * (n - 1) * alpha)


def load_runs(runs_dir, slug_prefix, sync):
    """The metrics JSONs of one configuration's sync or no-sync repeats."""
    pattern = os.path.join(runs_dir, "%s_%s_r*.json" % (slug_prefix, "sync" if sync else "nosync"))
    out = []
    for path in sorted(glob.glob(pattern)):
        try:
            with open(path) as f:
                out.append(json.load(f))
        except (OSError, ValueError):
            continue
    return out


def timeline(runs):
    """Medians over repeats of the last epoch's ddp_timeline: (bucket bytes, [launch s],
    backward s); None without one."""
    lines = [r["epochs"][-1].get("ddp_timeline") for r in runs if r.get("epochs")]
    lines = [t for t in lines if t and t.get("buckets")]
    if not lines:
        return None
    k = len(lines[0]["buckets"])
    lines = [t for t in lines if len(t["buckets"]) == k]
    sizes = [b["bytes"] for b in lines[0]["buckets"]]
    launch = [statistics.median(t["buckets"][i]["launch_seconds"] for t in lines)
              for i in range(k)]
    return sizes, launch, statistics.median(t["backward_seconds"] for t in lines)


def step_seconds(runs):
    """Median over repeats of the last epoch's median step time (step_seconds_p50)."""
    per = [r["epochs"][-1]["step_seconds_p50"] for r in runs
           if r.get("epochs") and r["epochs"][-1].get("step_seconds_p50")]
    return statistics.median(per) if per else None


def p50_efficiency(runs_dir, prefix):
    """No-sync over sync median step time, or None."""
    sync = step_seconds(load_runs(runs_dir, prefix, sync=True))
    nosync = step_seconds(load_runs(runs_dir, prefix, sync=False))
    return nosync / sync if sync and nosync else None


def cpu_seconds(nbytes, ranks, compute, args):
    """Step time the ranks' communication CPU takes from their computation: each rank spends
    --comm_cpu_ms_per_mb per MB; idle cores absorb what they can over the step."""
    total = ranks * args.comm_cpu_ms_per_mb * 1e-3 * nbytes / 1e6
    idle = max(0, args.cores - ranks) * compute
    return max(0.0, total - idle) / args.cores


def predict(compute, tl, backend, hosts, ranks_per_host, link_gbit, args):
    sizes, launch, backward = tl
    comm, _, exposed = pipeline(
        [(t, allreduce_seconds(b, backend, hosts, ranks_per_host, link_gbit, args))
         for b, t in zip(sizes, launch)], backward)
    cpu = cpu_seconds(sum(sizes), hosts * ranks_per_host, compute, args)
    step = compute + exposed + cpu
    return {"comm_s": comm, "exposed_s": exposed, "cpu_s": cpu, "step_s": step,
            "efficiency": compute / step}


def rows_of(directory):
    """The result rows with where their runs are: (row, runs dir, hosts, ranks/host, link Gb/s)."""
    combined = os.path.join(directory, "combined.csv")
    if os.path.exists(combined):
        with open(combined) as f:
            for row in csv.DictReader(f):
                measured = row.get("measured_link_gbit") or ""
                try:
                    link = float(measured)
                except ValueError:
                    link = rate_gbit(row["link_rate"])
                yield (row, os.path.join(directory, row["link_rate"], "runs"), int(row["hosts"]),
                       int(row["ranks_per_host"]), link)
        return
    with open(os.path.join(directory, "results.csv")) as f:
        for row in csv.DictReader(f):
            yield row, os.path.join(directory, "runs"), 1, int(row["world_size"]), None


def slug_prefix(row):
    """A result row's run files without '_sync_r0.json' (experiments/sweep.cc's Slug)."""
    return "%s_%s_%s_np%s_bs%s" % (row["implementation"], row["backend"], row["model"],
                                   row["world_size"], row["batch_size"])


def measured_efficiency(row):
    """The sweep's communication efficiency of a result row, or None."""
    eff = row.get("communication_efficiency") or ""
    return float(eff) if eff not in ("", "nan") else None


def analyse(args):
    out = []
    # The model predicts plain gradient averaging: rows of other DDP
    # communication hooks (scaling --comm_hooks) are left out.
    rows = [r for r in rows_of(args.dir)
            if (r[0].get("comm_hook") or "allreduce") == "allreduce"]
    # PyTorch's measured efficiency beside ours, by configuration.
    theirs = {}
    for row, runs_dir, _, _, _ in rows:
        if row["implementation"] == "pytorch":
            theirs[(row.get("link_rate"), row["model"], row["world_size"])] = (
                measured_efficiency(row), p50_efficiency(runs_dir, slug_prefix(row)))
    for row, runs_dir, hosts, rph, link in rows:
        n = int(row["world_size"])
        if row["implementation"] != "dtrain" or n <= 1:
            continue
        prefix = slug_prefix(row)
        pytorch, pytorch_p50 = theirs.get((row.get("link_rate"), row["model"],
                                           row["world_size"]), (None, None))
        compute = step_seconds(load_runs(runs_dir, prefix, sync=False))
        tl = timeline(load_runs(runs_dir, prefix, sync=True))
        if compute is None or tl is None:
            continue
        p = predict(compute, tl, row["backend"], hosts, rph, link or args.loopback_gbit, args)
        measured = measured_efficiency(row)
        out.append({
            "link_rate": row.get("link_rate", "loopback"), "link_gbit": link, "hosts": hosts,
            "ranks_per_host": rph, "backend": row["backend"], "model": row["model"],
            "world_size": n, "batch_size": int(row["batch_size"]),
            "gradient_bytes": sum(tl[0]), "buckets": len(tl[0]),
            "compute_s": compute, "backward_s": tl[2], "prediction": p,
            "measured_efficiency": measured,
            "measured_over_predicted": measured / p["efficiency"] if measured else None,
            "measured_p50_efficiency": p50_efficiency(runs_dir, prefix),
            "pytorch_efficiency": pytorch,
            "pytorch_p50_efficiency": pytorch_p50,
            "what_if": {str(g): predict(compute, tl, row["backend"], max(hosts, 2), rph, g,
                                        args)["efficiency"] for g in args.what_if_gbit},
        })
    return out


def markdown(rows, args):
    lines = [
        "PREDICTION from measured inputs: `tools/cpu_cost_model.py %s`" % " ".join(
            a for a in sys.argv[1:] if a != "--json"),
        "",
        "| link | hosts x ranks | backend | model | MB/step | compute ms | backward ms | "
        "allreduce ms | exposed ms | CPU ms | predicted | measured | measured/predicted | "
        "measured (p50) | PyTorch measured | PyTorch (p50) |",
        "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]

    def pct(x):
        return "%.0f%%" % (100 * x) if x else "-"

    for r in rows:
        p = r["prediction"]
        lines.append("| %s | %dx%d | %s | %s | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.0f%% "
                     "| %s | %s | %s | %s | %s |" % (
                         r["link_rate"], r["hosts"], r["ranks_per_host"], r["backend"],
                         r["model"], r["gradient_bytes"] / 1e6, r["compute_s"] * 1e3,
                         r["backward_s"] * 1e3, p["comm_s"] * 1e3, p["exposed_s"] * 1e3,
                         p["cpu_s"] * 1e3, 100 * p["efficiency"], pct(r["measured_efficiency"]),
                         "%.2f" % r["measured_over_predicted"]
                         if r["measured_over_predicted"] else "-",
                         pct(r["measured_p50_efficiency"]), pct(r["pytorch_efficiency"]),
                         pct(r["pytorch_p50_efficiency"])))
    if rows and args.what_if_gbit:
        lines += ["", "Predicted efficiency of the same runs on other links (hosts as measured, "
                  "at least 2):", "",
                  # Each row predicts from the compute its own sweep measured: with
                  # several rates, one row per rate that measured it.
                  "| measured at | hosts x ranks | backend | model | " +
                  " | ".join("%g Gb/s" % g for g in args.what_if_gbit) + " |",
                  "|---|---|---|---|" + "---:|" * len(args.what_if_gbit)]
        for r in rows:
            lines.append("| %s | %dx%d | %s | %s | %s |" % (
                r["link_rate"], max(r["hosts"], 2), r["ranks_per_host"], r["backend"], r["model"],
                " | ".join("%.0f%%" % (100 * r["what_if"][str(g)]) for g in args.what_if_gbit)))
    return "\n".join(lines)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dir", help="sim_cluster or scaling output directory")
    p.add_argument("--loopback_gbit", type=float, default=27.0,
                   help="one TCP stream on loopback, Gb/s (sim_cluster's unshaped link check)")
    p.add_argument("--alpha_us", type=float, default=50.0, help="per ring step, microseconds")
    p.add_argument("--shm_gbps", type=float, default=40.0,
                   help="shared-memory reduction inside a host, GB/s")
    p.add_argument("--comm_cpu_ms_per_mb", type=float, default=3.1,
                   help="CPU ms a rank spends per MB it allreduces (2 processes on loopback here: "
                   "docs/PERFORMANCE.md, 'Across hosts')")
    p.add_argument("--cores", type=int, default=os.cpu_count() or 1,
                   help="cores the ranks of every simulated host share (default: this machine's)")
    p.add_argument("--what_if_gbit", default="1,10,25,100",
                   help="link rates to predict the same runs at ('' for none)")
    p.add_argument("--json", action="store_true", help="one JSON object instead of Markdown")
    args = p.parse_args(argv)
    try:
        args.what_if_gbit = [float(x) for x in args.what_if_gbit.split(",") if x.strip()]
    except ValueError:
        p.error("--what_if_gbit: want comma-separated Gb/s")
    if (args.loopback_gbit <= 0 or args.alpha_us < 0 or args.shm_gbps <= 0
            or args.comm_cpu_ms_per_mb < 0 or args.cores < 1
            or any(g <= 0 for g in args.what_if_gbit)):
        p.error("want --loopback_gbit > 0, --alpha_us >= 0, --shm_gbps > 0, "
                "--comm_cpu_ms_per_mb >= 0, --cores >= 1, rates > 0")
    if not (os.path.exists(os.path.join(args.dir, "combined.csv"))
            or os.path.exists(os.path.join(args.dir, "results.csv"))):
        p.error("%s has neither combined.csv (sim_cluster) nor results.csv (scaling)" % args.dir)
    return args


def main(argv):
    args = parse_args(argv)
    rows = analyse(args)
    if args.json:
        print(json.dumps({"format": "dtrain.cpu_cost_model.v1", "inputs": {
            k: v for k, v in vars(args).items() if k != "json"}, "rows": rows}))
    else:
        print(markdown(rows, args))
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
