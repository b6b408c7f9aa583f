// ThreadSanitizer suppressions for reports that come from inside libraries
// this project does not build, so that TSan cannot see their synchronisation
// or their races are theirs. Compiled into the test executables that depend on
// //dist:tsan_suppressions; the TSan runtime reads them through the
// __tsan_default_suppressions() hook, so no suppressions file has to be found
// at run time (a TSAN_OPTIONS=suppressions=<path> in .bazelrc would have to
// name a file present in every test's runfiles, and TSan aborts when it is
// missing). Without TSan nothing calls the hook.
//
// Every entry says why the report is not our bug. Keep them narrow: a pattern
// suppresses every race report with a matching frame in any of its stacks.

extern "C" const char* __tsan_default_suppressions();

extern "C" const char* __tsan_default_suppressions() {
  return
      // Gloo's algorithm classes (AllreduceRing, AllreduceRingChunked,
      // AllreduceHalvingDoubling, AllreduceBcube; /usr/include/gloo/*.h)
      // register one `int dummy_` member as both the send buffer and the
      // receive buffer of their "ready for the next round" notifications. The
      // algorithm's thread sends from it (writev in
      // gloo::transport::tcp::Pair::write, called from run()) while Gloo's
      // device loop thread receives a peer's notification into it (recv in
      // Pair::read): a race inside Gloo on a value nobody reads. Matched on
      // the algorithm's run(), which is on the sending stack; the backend's
      // default algorithm (gloo::allreduce, the newer API) has no such buffer
      // and stays fully checked.
      "race:gloo::AllreduceRing<*>::run\n"
      "race:gloo::AllreduceRingChunked<*>::run\n"
      "race:gloo::AllreduceHalvingDoubling<*>::run\n"
      "race:gloo::AllreduceBcube<*>::run\n"
      // absl::Status shares a reference-counted representation between its
      // copies (a status with a message: CompletionWork::status_, the copy
      // Wait() returns, GlooBackend::broken_). The last owner to let go frees
      // it in Status::UnrefNonInlined, in Debian's libabsl_status, which is
      // not built with TSan: the atomic decrement that orders every other
      // owner's reads before the delete is invisible, and the delete is
      // reported as racing with a read of the message made by another thread
      // before it dropped its copy.
      "race:absl::*Status::UnrefNonInlined\n"
      // The same delete, reached through the inline Status::Unref where the
      // compiler inlined UnrefNonInlined's caller differently (seen under
      // C++20 in gloo_backend_test).
      "race:absl::*Status::Unref\n"
      // oneDNN (Debian's libdnnl, which LibTorch's CPU convolutions call) keeps
      // one process-wide primitive cache. Ranks run as threads share it: one
      // thread's convolution allocates and inserts a cache entry, another's
      // compares its key under the cache's read lock. The ordering is inside
      // the uninstrumented library, so TSan reports the key's allocation as
      // racing with the later read (seen intermittently in
      // ddp_equivalence_test). Matched on the library, whose frames are on
      // both stacks; none of the project's memory is involved.
      "race:libdnnl.so\n"
      // A tensor's last reference may be dropped on another thread (the Gloo
      // worker releasing a collective's tensors). intrusive_ptr's decrement
      // is inline and instrumented, but the delete that follows runs inside
      // libtorch_cpu, which is not, so TSan misses the acquire that orders it
      // and reports the delete as racing with the other thread's decrement
      // (the same pattern as absl::Status above). Where the compiler
      // inlines reset_, the frame is the destructor: seen in
      // hierarchical_backend_test, where a view's reference to its base
      // (held by the Gloo worker's task) is the base's last.
      "race:c10::intrusive_ptr<c10::TensorImpl*>::reset_\n"
      "race:c10::intrusive_ptr<c10::TensorImpl, "
      "c10::UndefinedTensorImpl>::~intrusive_ptr\n";
}
