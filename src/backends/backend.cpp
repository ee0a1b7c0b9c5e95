// The backend registry and DeviceBuffer.
#include "src/backends/backend.h"

#include "kiln/error.h"

namespace kiln {

DeviceBuffer::DeviceBuffer(Backend& backend, size_t bytes) : backend_(&backend), size_(bytes) {
  data_ = bytes ? backend.allocate(bytes) : nullptr;
}

DeviceBuffer::~DeviceBuffer() {
  if (backend_ && data_) backend_->release(data_);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept : backend_(o.backend_), data_(o.data_), size_(o.size_) {
  o.data_ = nullptr;
  o.size_ = 0;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (backend_ && data_) backend_->release(data_);
    backend_ = o.backend_;
    data_ = o.data_;
    size_ = o.size_;
    o.data_ = nullptr;
    o.size_ = 0;
  }
  return *this;
}

BackendRegistry& BackendRegistry::instance() {
  static BackendRegistry registry;
  return registry;
}

void BackendRegistry::add(DeviceType device, std::unique_ptr<Backend> backend) {
  backends_[static_cast<int>(device)] = std::move(backend);
}

bool BackendRegistry::has(DeviceType device) const { return backends_[static_cast<int>(device)] != nullptr; }

Backend& BackendRegistry::get(DeviceType device) {
  Backend* b = backends_[static_cast<int>(device)].get();
  if (!b) {
    throw Error(std::string("the ") + to_string(device) +
                " backend is not built into this kiln library (rebuild with -DKILN_WITH_CUDA=ON and the CUDA toolkit)");
  }
  std::string why;
  if (!b->available(&why)) {
    throw Error(std::string("the ") + to_string(device) + " backend is not available on this machine: " + why);
  }
  return *b;
}

}  // namespace kiln
