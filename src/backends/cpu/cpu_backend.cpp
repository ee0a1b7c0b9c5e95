// The CPU backend: host memory (256-byte aligned, counted for bytes_in_use), synchronous copies, no streams.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <unordered_map>

#include "kiln/error.h"
#include "src/backends/backend.h"

namespace kiln {
namespace {

class CpuBackend : public Backend {
 public:
  DeviceType device() const override { return DeviceType::kCPU; }
  bool available(std::string*) const override { return true; }
  void* allocate(size_t bytes) override {
    count_allocation(bytes);
    void* p = bytes <= SIZE_MAX - 255 ? std::aligned_alloc(256, bytes ? (bytes + 255) / 256 * 256 : 256) : nullptr;
    if (!p) throw Error("out of memory: cannot allocate " + std::to_string(bytes) + " bytes of host memory");
    std::lock_guard<std::mutex> lock(mutex_);
    sizes_[p] = bytes;
    in_use_ += bytes;
    peak_ = std::max(peak_, in_use_);
    return p;
  }
  void release(void* ptr) override {
    if (!ptr) return;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = sizes_.find(ptr);
      if (it != sizes_.end()) {
        in_use_ -= it->second;
        sizes_.erase(it);
      }
    }
    std::free(ptr);
  }
  uint64_t bytes_in_use() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return in_use_;
  }
  uint64_t peak_bytes_in_use() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return peak_;
  }
  void copy_host_to_device(void* dst, const void* src, size_t bytes, void*) override { copy(dst, src, bytes); }
  void copy_device_to_host(void* dst, const void* src, size_t bytes, void*) override { copy(dst, src, bytes); }
  void copy_device_to_device(void* dst, const void* src, size_t bytes, void*) override { copy(dst, src, bytes); }
  void memset_device(void* dst, int value, size_t bytes, void*) override {
    if (bytes) std::memset(dst, value, bytes);
  }
  void* create_stream() override { return nullptr; }
  void destroy_stream(void*) override {}
  void synchronize(void*) override {}

 private:
  mutable std::mutex mutex_;
  std::unordered_map<void*, size_t> sizes_;  // allocation -> bytes asked for
  uint64_t in_use_ = 0, peak_ = 0;
  static void copy(void* dst, const void* src, size_t bytes) {
    if (bytes && dst != src) std::memmove(dst, src, bytes);
  }
};

struct Registrar {
  Registrar() { BackendRegistry::instance().add(DeviceType::kCPU, std::make_unique<CpuBackend>()); }
} registrar;

}  // namespace
}  // namespace kiln
