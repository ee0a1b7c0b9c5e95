// Helpers shared by the data-dependent size tests (tests/data_dependent_test.cpp and
// tests/data_dependent_ops_test.cpp): the devices to run on, an engine built without kernel
// timing, and host I/O bound to a context through device memory on devices, with outputs
// allocated at their upper bound and read back with the dims of the last inference.
#pragma once

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kiln/builder.h"
#include "kiln/runtime.h"
#include "src/backends/backend.h"

namespace kiln::test {

inline std::vector<DeviceType> usable_devices() {
  std::vector<DeviceType> devices{DeviceType::kCPU};
  if (BackendRegistry::instance().has(DeviceType::kCUDA)) {
    try {
      (void)get_backend(DeviceType::kCUDA);
      devices.push_back(DeviceType::kCUDA);
    } catch (const std::exception&) {}
  }
  return devices;
}

inline std::shared_ptr<Engine> build(const Network& net, DeviceType device,
                                     const OptimizationProfile* profile = nullptr) {
  BuilderConfig config;
  config.device = device;
  config.time_tactics = false;
  if (profile) config.profiles.push_back(*profile);
  const auto bytes = Builder().build_serialized(net, config);
  return Runtime().deserialize(bytes.data(), bytes.size(), "data_dependent test network");
}

// Binds host data to a context (through device memory on devices) and reads outputs back.
class Io {
 public:
  Io(Engine& engine, ExecutionContext& ctx) : engine_(engine), ctx_(ctx), backend_(get_backend(engine.device())) {}
  ~Io() {
    for (void* p : device_) backend_.release(p);
  }
  void input(const std::string& name, const HostTensor& value) {
    ctx_.set_input_shape(name, value.dims());
    ctx_.set_tensor_address(name, place(value.data(), value.nbytes()));
  }
  // Allocates an output at its upper bound.
  void output(const std::string& name) {
    HostTensor t(engine_.io_tensor(name).type, ctx_.max_tensor_shape(name));
    outputs_[name] = place(nullptr, t.nbytes());
    ctx_.set_tensor_address(name, outputs_[name]);
  }
  // The output with the dims of the last inference.
  HostTensor read(const std::string& name) {
    HostTensor t(engine_.io_tensor(name).type, ctx_.tensor_shape(name));
    if (!t.nbytes()) return t;
    if (engine_.device() == DeviceType::kCPU) {
      std::memcpy(t.data(), outputs_.at(name), t.nbytes());
    } else {
      backend_.copy_device_to_host(t.data(), outputs_.at(name), t.nbytes(), nullptr);
    }
    return t;
  }

 private:
  void* place(const void* data, size_t bytes) {
    bytes = std::max<size_t>(bytes, 8);
    if (engine_.device() == DeviceType::kCPU) {
      host_.emplace_back(bytes);
      if (data) std::memcpy(host_.back().data(), data, bytes);
      return host_.back().data();
    }
    void* p = backend_.allocate(bytes);
    device_.push_back(p);
    if (data) backend_.copy_host_to_device(p, data, bytes, nullptr);
    return p;
  }
  Engine& engine_;
  ExecutionContext& ctx_;
  Backend& backend_;
  std::vector<std::vector<uint8_t>> host_;
  std::vector<void*> device_;
  std::map<std::string, void*> outputs_;
};

}  // namespace kiln::test
