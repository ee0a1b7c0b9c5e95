// Helpers shared by the GPU tests: whether a CUDA device can be used here (kiln built with CUDA
// and a device present; the tests skip with the reason otherwise), and device copies of host
// tensors that are freed at the end of the test.
#pragma once

#include <exception>
#include <string>
#include <vector>

#include "src/backends/backend.h"
#include "kiln/types.h"

namespace kiln::test {

inline bool cuda_usable(std::string* why) {
  if (!BackendRegistry::instance().has(DeviceType::kCUDA)) {
    *why = "kiln was built without CUDA";
    return false;
  }
  try {
    (void)get_backend(DeviceType::kCUDA);
  } catch (const std::exception& e) {
    *why = e.what();
    return false;
  }
  return true;
}

struct DeviceTensors {
  Backend& backend;
  std::vector<void*> ptrs;
  explicit DeviceTensors(Backend& b) : backend(b) {}
  DeviceTensors(const DeviceTensors&) = delete;
  DeviceTensors& operator=(const DeviceTensors&) = delete;
  ~DeviceTensors() {
    for (void* p : ptrs) backend.release(p);
  }
  void* upload(const HostTensor& t) {
    ptrs.push_back(backend.allocate(t.nbytes()));
    backend.copy_host_to_device(ptrs.back(), t.data(), t.nbytes(), nullptr);
    return ptrs.back();
  }
  void* alloc(size_t bytes) {
    ptrs.push_back(backend.allocate(bytes));
    return ptrs.back();
  }
};

}  // namespace kiln::test
