#include "base/given_flags.h"

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace dtrain::base {
namespace {

absl::flat_hash_set<std::string>& Given() {
  static auto* const given = new absl::flat_hash_set<std::string>();
  return *given;
}

// Flagfiles may name flagfiles; Abseil refuses a cycle, this stops at a depth.
constexpr int kMaxFlagfileDepth = 8;

void Note(absl::string_view arg, int depth);

// A --flagfile's lines: "--name=value" each; '#' and '//' start comments.
void NoteFlagfiles(absl::string_view list, int depth) {
  if (depth > kMaxFlagfileDepth) return;
  for (absl::string_view path : absl::StrSplit(list, ',', absl::SkipEmpty())) {
    std::ifstream in{std::string(path)};
    std::string line;
    while (std::getline(in, line)) {
      const absl::string_view text = absl::StripAsciiWhitespace(line);
      if (absl::StartsWith(text, "#") || absl::StartsWith(text, "//")) continue;
      Note(text, depth + 1);
    }
  }
}

// "--name=value", "--name", "-name": notes the name; also what a --flagfile
// holds and the flags --fromenv and --tryfromenv (when FLAGS_name is set)
// name.
void Note(absl::string_view arg, int depth) {
  if (!absl::ConsumePrefix(&arg, "--") && !absl::ConsumePrefix(&arg, "-"))
    return;  // a value or a positional argument
  const size_t eq = arg.find('=');
  const absl::string_view name = arg.substr(0, eq);
  const absl::string_view value =
      eq == absl::string_view::npos ? "" : arg.substr(eq + 1);
  if (name == "flagfile") {
    NoteFlagfiles(value, depth);
  } else if (name == "fromenv" || name == "tryfromenv") {
    for (absl::string_view flag :
         absl::StrSplit(value, ',', absl::SkipEmpty())) {
      const std::string var = absl::StrCat("FLAGS_", flag);
      if (name == "fromenv" || std::getenv(var.c_str()) != nullptr)
        Given().insert(std::string(flag));
    }
  } else {
    Given().insert(std::string(name));
  }
}

}  // namespace

void RecordGivenFlags(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const absl::string_view arg = argv[i];
    if (arg == "--") break;
    // "--flagfile F" with its value in the next argument.
    if ((arg == "--flagfile" || arg == "-flagfile") && i + 1 < argc) {
      NoteFlagfiles(argv[++i], 0);
      continue;
    }
    Note(arg, 0);
  }
}

bool FlagGiven(absl::string_view name) {
  return Given().contains(std::string(name));
}

}  // namespace dtrain::base
