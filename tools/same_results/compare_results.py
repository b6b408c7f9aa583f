"""Compares two folders of train outputs (same_results.sh): weights and checkpoints byte for byte,
metrics JSON and JSON lines without timings and paths. Prints one line per output; exit 1 if any
differs."""

import hashlib
import json
import os
import re
import sys

# Keys whose values are timings, rates, addresses or resident memory: they differ between any two
# runs.
TIMING = re.compile(r"(seconds|per_second|histogram|ddp_timeline|metrics_url|rss|pss|^time$|_s$)")


def strip(value, dirs):
    if isinstance(value, dict):
        return {k: strip(v, dirs) for k, v in value.items()
                if not TIMING.search(k) or k == "timeout_seconds"}
    if isinstance(value, list):
        return [strip(v, dirs) for v in value]
    if isinstance(value, str):
        for d in dirs:
            value = value.replace(d.rstrip("/") + "/", "")
    return value


def digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def same(a, b, dirs):
    name = os.path.basename(a)
    if name.endswith(".safetensors"):
        return digest(a) == digest(b)
    if name.endswith(".json"):
        with open(a) as fa, open(b) as fb:
            return strip(json.load(fa), dirs) == strip(json.load(fb), dirs)
    if name.endswith(".jsonl"):
        with open(a) as fa, open(b) as fb:
            return ([strip(json.loads(l), dirs) for l in fa] ==
                    [strip(json.loads(l), dirs) for l in fb])
    if name.endswith(".ck"):
        files = sorted(os.listdir(a))
        return files == sorted(os.listdir(b)) and all(
            digest(os.path.join(a, f)) == digest(os.path.join(b, f)) for f in files)
    return None


def main(argv):
    if len(argv) != 3:
        print("usage: compare_results.py BEFORE_DIR AFTER_DIR", file=sys.stderr)
        return 2
    before, after = argv[1], argv[2]
    differ = 0
    for name in sorted(os.listdir(before)):
        a, b = os.path.join(before, name), os.path.join(after, name)
        if not os.path.exists(b):
            print(f"missing {name}")
            differ += 1
            continue
        result = same(a, b, (before, after))
        if result is None:
            continue
        print(("same      " if result else "DIFFERENT ") + name)
        differ += not result
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
