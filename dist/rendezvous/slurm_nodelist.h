// Expansion of Slurm's compressed lists: host lists such as
// SLURM_JOB_NODELIST="rack[1-2]-node[01-02],login1" and task counts such as
// SLURM_TASKS_PER_NODE="2(x3),1". Launch-environment discovery uses them to
// find rank 0's host and the number of tasks on this node without calling
// `scontrol`, which is not on every compute node's PATH.
//
// Both functions are pure and thread-safe. Bad input gives kInvalidArgument
// naming the whole input and what is wrong with it.
#ifndef DTRAIN_DIST_RENDEZVOUS_SLURM_NODELIST_H_
#define DTRAIN_DIST_RENDEZVOUS_SLURM_NODELIST_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dtrain::rendezvous {

// No real cluster comes near this; it stops a typo such as "n[0-99999999]"
// from allocating gigabytes.
inline constexpr size_t kMaxSlurmHosts = 1000000;

// Expands a Slurm host list into host names, in Slurm's order (the order of
// `scontrol show hostnames`), duplicates kept.
// - Hosts are separated by commas outside brackets: "a1,b[2-3]".
// - A bracket group holds numbers and ranges separated by commas:
//   "node[01-03,07]" -> node01 node02 node03 node07. Numbers are zero-padded
//   to the width of the range's start as written ("01" -> 2 digits); wider
//   numbers print in full: "n[8-10]" -> n8 n9 n10.
// - Several groups in one host give their cartesian product, the leftmost
//   group varying slowest: "r[1-2]-n[1-2]" -> r1-n1 r1-n2 r2-n1 r2-n2.
// Errors: empty list or empty host, unbalanced or nested brackets, empty or
// non-numeric group entries, reversed ranges ("node[5-3]"), whitespace, and
// more than `max_hosts` hosts in all (checked before anything is expanded).
absl::StatusOr<std::vector<std::string>> ExpandSlurmNodeList(
    absl::string_view list, size_t max_hosts = kMaxSlurmHosts);

// Expands Slurm's tasks-per-node list (SLURM_TASKS_PER_NODE,
// SLURM_STEP_TASKS_PER_NODE): comma-separated counts, each optionally
// repeated as "N(xM)": "2(x3),1" -> {2, 2, 2, 1}, one entry per node in node
// list order. Counts must be >= 0, repeats >= 1, and the total number of
// entries at most kMaxSlurmHosts.
absl::StatusOr<std::vector<int>> ExpandSlurmTasksPerNode(
    absl::string_view spec);

}  // namespace dtrain::rendezvous

#endif  // DTRAIN_DIST_RENDEZVOUS_SLURM_NODELIST_H_
