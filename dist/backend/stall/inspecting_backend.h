// A Backend that passes every call to another and records each collective
// with a StallInspector (stall_inspector.h): a collective that waits too long
// gets a warning naming the ranks that have not reached it, and a collective
// that fails (a timeout, a lost peer) gets the same report appended to its
// error; where a peer's process on this host has exited, the error names it
// instead (unless it does already), and no stall report follows. CreateBackend
// (factory.h) wraps every backend of more than one rank in one unless
// BackendConfig::stall_warning is infinite.
//
// Thread safety and lifetimes: as the wrapped backend's; the inspector's
// thread lives as long as this backend.
#ifndef DTRAIN_DIST_BACKEND_STALL_INSPECTING_BACKEND_H_
#define DTRAIN_DIST_BACKEND_STALL_INSPECTING_BACKEND_H_

#include <memory>

#include "dist/backend/backend.h"
#include "dist/backend/stall/stall_inspector.h"

namespace dtrain::backend {

// `options.rank` and `options.size` are taken from `inner`.
std::unique_ptr<Backend> WithStallInspection(std::unique_ptr<Backend> inner,
                                             StallInspectorOptions options);

}  // namespace dtrain::backend

#endif  // DTRAIN_DIST_BACKEND_STALL_INSPECTING_BACKEND_H_
