// An execution context's I/O bindings: the caller's address of every network input and output,
// by binding index (Engine::io_tensors order: inputs, then outputs), and a generation that
// changes whenever an address changes, so that plans patch their I/O pointers only then and the
// graph cache can key on the addresses. Not thread-safe (one per context).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/runtime.h"

namespace kiln {

class Bindings {
 public:
  explicit Bindings(const std::vector<TensorInfo>& io) : io_(&io), addresses_(io.size(), nullptr) {}
  void set(int index, void* address) {
    void*& a = addresses_[static_cast<size_t>(index)];
    if (a != address) {
      a = address;
      ++generation_;
    }
  }
  void* get(int index) const { return addresses_[static_cast<size_t>(index)]; }
  const std::vector<void*>& addresses() const { return addresses_; }
  uint64_t generation() const { return generation_; }
  // Throws naming the first of `required` (binding indices) without an address.
  void check(const std::vector<int>& required) const;

 private:
  const std::vector<TensorInfo>* io_;
  std::vector<void*> addresses_;
  uint64_t generation_ = 1;
};

}  // namespace kiln
