// How messages list names that may be many: "fc1.weight, fc1.bias, fc2.weight
// and 3 more". One wording for every layer that names parameters, tensors or
// ranks. Stateless and thread-safe.
#ifndef DTRAIN_BASE_NAME_LIST_H_
#define DTRAIN_BASE_NAME_LIST_H_

#include <cstddef>
#include <string>
#include <vector>

namespace dtrain::base {

// The first `shown` of `names`, comma-separated, then " and N more" for the
// rest; "" for none.
std::string JoinFirst(const std::vector<std::string>& names, size_t shown);

}  // namespace dtrain::base

#endif  // DTRAIN_BASE_NAME_LIST_H_
