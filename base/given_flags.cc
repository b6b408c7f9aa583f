#include "base/given_flags.h"

#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/strip.h"

namespace dtrain::base {
namespace {

absl::flat_hash_set<std::string>& Given() {
  static auto* const given = new absl::flat_hash_set<std::string>();
  return *given;
}

}  // namespace

void RecordGivenFlags(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") break;
    if (!absl::ConsumePrefix(&arg, "--") && !absl::ConsumePrefix(&arg, "-"))
      continue;  // a value or a positional argument
    Given().insert(std::string(arg.substr(0, arg.find('='))));
  }
}

bool FlagGiven(absl::string_view name) {
  return Given().contains(std::string(name));
}

}  // namespace dtrain::base
