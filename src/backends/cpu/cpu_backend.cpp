// The CPU backend: host memory (64-byte aligned), synchronous copies, no streams.
#include <cstdlib>
#include <cstring>
#include <new>

#include "kiln/error.h"
#include "src/backends/backend.h"

namespace kiln {
namespace {

class CpuBackend : public Backend {
 public:
  DeviceType device() const override { return DeviceType::kCPU; }
  bool available(std::string*) const override { return true; }
  void* allocate(size_t bytes) override {
    count_allocation();
    const size_t n = (bytes + 255) / 256 * 256;
    void* p = std::aligned_alloc(256, n ? n : 256);
    if (!p) throw Error("out of host memory allocating " + std::to_string(bytes) + " bytes");
    return p;
  }
  void release(void* ptr) override { std::free(ptr); }
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
  static void copy(void* dst, const void* src, size_t bytes) {
    if (bytes && dst != src) std::memmove(dst, src, bytes);
  }
};

struct Registrar {
  Registrar() { BackendRegistry::instance().add(DeviceType::kCPU, std::make_unique<CpuBackend>()); }
} registrar;

}  // namespace
}  // namespace kiln
