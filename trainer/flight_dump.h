// Where and when //trainer:train writes its flight recorder
// (dist/backend/flight_recorder.h): to DIR/flight_rank<R>_<host>_<pid>.json
// (flight_joiner_... before an elastic joiner has a rank) when training fails
// after collectives began, and whenever the process gets SIGUSR1 (a stuck run
// can be asked without ending it). tools/flight_analyze reads every rank's.
//
// Thread safety: the functions may be called from any thread; the SIGUSR1
// dumps run on a thread of their own.
#ifndef DTRAIN_TRAINER_FLIGHT_DUMP_H_
#define DTRAIN_TRAINER_FLIGHT_DUMP_H_

#include <string>

#include "absl/status/status.h"

namespace dtrain::trainer {

// Once per process, before training: the folder the dumps go to, and a
// thread that dumps at each SIGUSR1. Later calls change nothing.
void InstallFlightDump(const std::string& dir);

// This process's rank, for the file's name (-1 until it has one), and its
// job's number of ranks, for the analysis.
void SetFlightRank(int rank, int world_size);

// After training failed with `failure`: dumps (when the recorder holds
// anything) and says where on stderr. Does nothing for an OK status or a
// stop that was asked for (kCancelled).
void DumpFlightRecorderOnFailure(const absl::Status& failure);

// The path this process dumps to now.
std::string FlightDumpPath();

}  // namespace dtrain::trainer

#endif  // DTRAIN_TRAINER_FLIGHT_DUMP_H_
