// --nnodes as torchrun takes it: a number of nodes ("2"), or for an elastic
// job a range ("1:4"): the job starts with MIN nodes, and the launchers of
// nodes MIN..MAX-1 join it while it runs (dist/launch/launcher.h).
//
//   ABSL_FLAG(dtrain::launch::NnodesFlag, nnodes, dtrain::launch::NnodesFlag(),
//             "...");
//   const dtrain::launch::NnodesFlag n = absl::GetFlag(FLAGS_nnodes);
#ifndef DTRAIN_DIST_LAUNCH_NNODES_FLAG_H_
#define DTRAIN_DIST_LAUNCH_NNODES_FLAG_H_

#include <string>

#include "absl/strings/string_view.h"

namespace dtrain::launch {

struct NnodesFlag {
  int min = 1;
  int max = 1;
};

// Abseil's flag hooks (found by argument-dependent lookup): "N" or
// "MIN:MAX", 1 <= MIN <= MAX; the error quotes what was given.
bool AbslParseFlag(absl::string_view text, NnodesFlag* flag,
                   std::string* error);
std::string AbslUnparseFlag(const NnodesFlag& flag);

}  // namespace dtrain::launch

#endif  // DTRAIN_DIST_LAUNCH_NNODES_FLAG_H_
