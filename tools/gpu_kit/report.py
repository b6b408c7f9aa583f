#!/usr/bin/env python3
"""The GPU evidence kit's report: reads what tools/gpu_kit/run.sh left in OUT
(steps.tsv, environment.txt, metrics/*.json, logs/) and prints one Markdown
report on stdout: the steps, the tests, the trainings (ours and PyTorch's side
by side), NCCL's bandwidth and host time per collective, and gpu_check.

    tools/gpu_kit/report.py --out OUT --mode gpu|cpu --seconds N > OUT/report.md

Standard library only: it runs with whatever Python the machine has.
"""

import argparse
import json
import os
import re
import sys

# Ours against PyTorch's samples per second, the goals: the ConvNet's
# small kernels leave a GPU waiting on the host, where C++ should show;
# ResNet-18 is bound by the device.
COMPARISONS = [
    ("convnet_1rank", "pytorch_convnet_1rank", 1.5),
    ("convnet_2ranks", "pytorch_convnet_2ranks", 1.5),
    ("resnet18_idx_1rank", "pytorch_resnet18_idx_1rank", 1.0),
    ("resnet18_idx_2ranks", "pytorch_resnet18_idx_2ranks", 1.0),
]


def read(path, default=""):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return default


def steps(out):
    rows = []
    for line in read(os.path.join(out, "steps.tsv")).splitlines():
        parts = line.split("\t")
        if len(parts) == 3:
            rows.append(parts)
    return rows


def metrics(out, name):
    text = read(os.path.join(out, "metrics", name + ".json"))
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def tests(log):
    """Per ctest test: (name, result, gtest cases passed, skipped, reasons)."""
    results = {}
    names = {}
    lines_of = {}
    for line in log.splitlines():
        m = re.match(r"\s*(\d+)/\d+ Test\s+#(\d+): (\S+) \.+\**\s*(\w+)", line)
        if m:
            names[m.group(2)] = m.group(3)
            results[m.group(2)] = m.group(4)
            continue
        m = re.match(r"(\d+): (.*)", line)
        if m:
            lines_of.setdefault(m.group(1), []).append(m.group(2))
    rows = []
    for number in sorted(names, key=int):
        body = lines_of.get(number, [])
        passed = sum(1 for x in body if x.startswith("[       OK ]"))
        skipped = [x for x in body if x.startswith("[  SKIPPED ]") and "ms)" in x]
        # gtest prints "<file>:<line>: Skipped", then the reason on the next line.
        reasons = sorted({body[i + 1].strip() for i, x in enumerate(body[:-1])
                          if x.endswith(": Skipped")})
        rows.append((names[number], results[number], passed, len(skipped),
                     "; ".join(r for r in reasons if r)[:200]))
    summary = next((x for x in log.splitlines() if "% tests passed" in x), "")
    return rows, summary.strip()


def last_json(text):
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{") and line.endswith("}"):
            try:
                return json.loads(line)
            except ValueError:
                continue
    return None


def fmt(x, digits=1):
    return "-" if x is None else f"{x:,.{digits}f}"


def training_row(name, m):
    if m is None:
        return f"| {name} | no metrics | | | | | |"
    epochs = m.get("epochs") or []
    if not epochs:
        return f"| {name} | no epochs | | | | | |"
    first, last = epochs[0].get("train_loss"), epochs[-1].get("train_loss")
    falls = ("falls" if last < first else "does NOT fall") if len(epochs) > 1 \
        else "1 epoch"
    world = (m.get("config") or {}).get("world_size")
    step_ms = (epochs[-1].get("step_seconds_mean") or 0) * 1000
    return (f"| {name} | {world} | {m.get('implementation', 'dtrain')} | "
            f"{fmt(first, 4)} -> {fmt(last, 4)} ({falls}) | "
            f"{fmt(epochs[-1].get('samples_per_second'))} | {fmt(step_ms, 2)} | "
            f"{'-' if m.get('ranks_identical') is None else m['ranks_identical']} |")


def samples_per_second(m):
    if not m or not m.get("epochs"):
        return None
    return m["epochs"][-1].get("samples_per_second")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--mode", choices=("gpu", "cpu"), required=True)
    p.add_argument("--seconds", type=int, default=0)
    a = p.parse_args()
    out = a.out
    w = sys.stdout.write

    w(f"# GPU evidence kit: {a.mode} run, {a.seconds} s\n\n")
    if a.mode == "cpu":
        w("A rehearsal on a machine without a GPU (`run.sh --cpu`): the GPU "
          "steps must say there is no GPU; the numbers are CPU numbers.\n\n")
    w("## Machine\n\n```\n" + read(os.path.join(out, "environment.txt")) +
      "```\n\n")

    w("## Steps\n\n| step | status | seconds |\n| --- | --- | --- |\n")
    for name, status, seconds in steps(out):
        shown = {"0": "ok", "no-gpu": "no GPU (as it must)"}.get(
            status, f"FAILED ({status})")
        w(f"| {name} | {shown} | {seconds} |\n")
    w("\n")

    rows, summary = tests(read(os.path.join(out, "logs", "tests.log")))
    w("## Tests (ctest, every test that touches CUDA or NCCL)\n\n")
    w(f"{summary or 'no ctest summary (see logs/tests.log)'}\n\n")
    if rows:
        w("| test | result | gtest cases passed | skipped | skip reasons |\n"
          "| --- | --- | --- | --- | --- |\n")
        for name, result, passed, skipped, reasons in rows:
            w(f"| {name} | {result} | {passed} | {skipped} | {reasons} |\n")
        w("\n")

    w("## Trainings\n\n| run | ranks | implementation | train loss, first -> "
      "last epoch | samples/s (last epoch) | step ms | ranks identical |\n"
      "| --- | --- | --- | --- | --- | --- | --- |\n")
    names = sorted(f[:-5] for f in os.listdir(os.path.join(out, "metrics"))
                   if f.endswith(".json")) if os.path.isdir(
                       os.path.join(out, "metrics")) else []
    for name in names:
        w(training_row(name, metrics(out, name)) + "\n")
    w("\n")

    w("## Ours against PyTorch (same data, model, batch and flags)\n\n"
      "| run | ours samples/s | PyTorch samples/s | ours / PyTorch | goal |\n"
      "| --- | --- | --- | --- | --- |\n")
    for ours, theirs, goal in COMPARISONS:
        a_sps = samples_per_second(metrics(out, ours))
        b_sps = samples_per_second(metrics(out, theirs))
        ratio = a_sps / b_sps if a_sps and b_sps else None
        verdict = "" if ratio is None else (" (met)" if ratio >= goal
                                            else " (NOT met)")
        w(f"| {ours} | {fmt(a_sps)} | {fmt(b_sps)} | {fmt(ratio, 2)} | "
          f">= {goal}{verdict} |\n")
    w("\n")

    w("## NCCL allreduce: bus bandwidth and host time per collective\n\n")
    for name in ("bandwidth_1rank", "bandwidth_1rank_blocking",
                 "bandwidth_2ranks_shared"):
        result = last_json(read(os.path.join(out, "logs", name + ".log")))
        w(f"### {name}\n\n")
        if result is None:
            w("no result (see logs/" + name + ".log)\n\n")
            continue
        w(f"{result.get('ranks')} rank(s) on {result.get('gpus')} GPU(s), "
          f"max busbw {fmt(result.get('max_busbw_GBps'), 2)} GB/s\n\n"
          "| bytes | time us | host us | algbw GB/s | busbw GB/s | correct |\n"
          "| --- | --- | --- | --- | --- | --- |\n")
        for r in result.get("results", []):
            w(f"| {r['bytes']} | {fmt(r['time_us'])} | {fmt(r.get('host_us'))} "
              f"| {fmt(r['algbw_GBps'], 2)} | {fmt(r['busbw_GBps'], 2)} | "
              f"{r['correct']} |\n")
        w("\n")

    check = [x for x in read(os.path.join(out, "logs", "gpu_check.log"))
             .splitlines() if x.startswith(("PASS", "FAIL", "All"))]
    w("## tools/gpu_check.sh\n\n```\n" + "\n".join(check or ["no output"]) +
      "\n```\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
