"""experiments/sim_cluster.sh's combined CSV: every link rate's results.csv
rows (scaling's, docs/FORMATS.md), with link_rate, measured_link_gbit (empty
where the link check measured nothing), hosts and ranks_per_host in front.
Exits 1 with "no results" when no file has a row. scaling --cluster_table
prints it as a table.

    sim_cluster_combine.py HOSTS OUT RATE MEASURED RESULTS_CSV
        [RATE MEASURED RESULTS_CSV ...]
"""
import csv
import sys


def main(argv):
    hosts, out, rest = int(argv[0]), argv[1], argv[2:]
    rows = []
    for i in range(0, len(rest), 3):
        rate, measured, path = rest[i:i + 3]
        with open(path, newline="") as f:
            for r in csv.DictReader(f):
                rows.append({"link_rate": rate, "measured_link_gbit": measured,
                             "hosts": hosts,
                             "ranks_per_host": int(r["world_size"]) // hosts,
                             **r})
    if not rows:
        sys.exit("no results")
    with open(out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


if __name__ == "__main__":
    main(sys.argv[1:])
