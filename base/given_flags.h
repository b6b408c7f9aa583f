// The flags a command line names, recorded before absl::ParseCommandLine, so
// that a program can tell a flag left at its default from one given with the
// default's value: a setting not given may then come from elsewhere (a
// model's default, a launcher's environment). Debian's Abseil keeps
// CommandLineFlag::IsSpecifiedOnCommandLine private.
//
//   base::RecordGivenFlags(argc, argv);
//   absl::ParseCommandLine(argc, argv);
//   if (!base::FlagGiven("nnodes")) ...
//
// Record once, from main, before any thread starts; FlagGiven is then safe
// from any thread.
#ifndef DTRAIN_BASE_GIVEN_FLAGS_H_
#define DTRAIN_BASE_GIVEN_FLAGS_H_

#include "absl/strings/string_view.h"

namespace dtrain::base {

// Notes each "--name", "--name=value" and "-name..." before a "--", and as
// Abseil reads them, the flags in each --flagfile and those --fromenv names
// (--tryfromenv's where FLAGS_<name> is set).
void RecordGivenFlags(int argc, char** argv);

// Whether the recorded command line named the flag.
bool FlagGiven(absl::string_view name);

}  // namespace dtrain::base

#endif  // DTRAIN_BASE_GIVEN_FLAGS_H_
