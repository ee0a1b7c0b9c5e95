// I/O bindings of an execution context (bindings.h).
#include "src/engine/bindings.h"

#include "kiln/error.h"

namespace kiln {

void Bindings::check(const std::vector<int>& required) const {
  for (int i : required) {
    if (addresses_[static_cast<size_t>(i)]) continue;
    const TensorInfo& t = (*io_)[static_cast<size_t>(i)];
    throw Error("no address set for " + std::string(t.mode == TensorIOMode::kInput ? "input" : "output") + " '" +
                t.name + "' (call set_tensor_address before execute)");
  }
}

}  // namespace kiln
