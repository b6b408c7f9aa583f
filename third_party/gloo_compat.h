// Where the Gloo versions the project builds against differ, in one place
// (as base/torch_compat.h for LibTorch). Each entry is chosen from what the
// installed headers declare, not from version numbers.
//
// Header-only and stateless: thread-safe wherever the Gloo call it wraps is.
#ifndef DTRAIN_THIRD_PARTY_GLOO_COMPAT_H_
#define DTRAIN_THIRD_PARTY_GLOO_COMPAT_H_

#include <memory>
#include <type_traits>
#include <utility>

#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/store.h"
#include "gloo/transport/device.h"

namespace dtrain::gloo_compat {

// Whether Context::connectFullMesh takes the store as a std::shared_ptr (Gloo
// since 2025, Debian testing) rather than by reference (Debian 12 and 13).
template <typename Context, typename = void>
struct ConnectTakesSharedStore : std::false_type {};
template <typename Context>
struct ConnectTakesSharedStore<
    Context, std::void_t<decltype(std::declval<Context&>().connectFullMesh(
                 std::declval<std::shared_ptr<::gloo::rendezvous::Store>>(),
                 std::declval<std::shared_ptr<::gloo::transport::Device>&>()))>>
    : std::true_type {};

// context.connectFullMesh(store, device) in either form. `store` is shared
// because the newer Gloo keeps it; the older one uses it only during the call.
template <typename Context = ::gloo::rendezvous::Context>
void ConnectFullMesh(Context& context,
                     std::shared_ptr<::gloo::rendezvous::Store> store,
                     std::shared_ptr<::gloo::transport::Device>& device) {
  if constexpr (ConnectTakesSharedStore<Context>::value) {
    context.connectFullMesh(std::move(store), device);
  } else {
    context.connectFullMesh(*store, device);
  }
}

}  // namespace dtrain::gloo_compat

#endif  // DTRAIN_THIRD_PARTY_GLOO_COMPAT_H_
