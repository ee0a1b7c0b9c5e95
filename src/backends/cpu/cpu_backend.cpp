// The CPU backend: host memory (256-byte aligned, counted for bytes_in_use), synchronous copies, no streams.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <new>
#include <string>

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
    try {
      record_allocation(p, bytes);  // the books may fail to grow
    } catch (...) {
      std::free(p);
      throw;
    }
    return p;
  }
  void release(void* ptr) override {
    if (!ptr) return;
    record_release(ptr);
    std::free(ptr);
  }
  void copy_host_to_device(void* dst, const void* src, size_t bytes, void*) override { copy(dst, src, bytes); }
  void copy_device_to_host(void* dst, const void* src, size_t bytes, void*) override { copy(dst, src, bytes); }
  void copy_device_to_device(void* dst, const void* src, size_t bytes, void*) override { copy(dst, src, bytes); }
  void memset_device(void* dst, int value, size_t bytes, void*) override {
    if (bytes) std::memset(dst, value, bytes);
  }
  // The processor's model and widest vector ISA: CPU timings (the builder's timing cache keys)
  // differ between an AVX2 and an AVX-512 machine.
  std::string describe() const override {
    static const std::string text = [] {
      std::string model = "unknown processor";
      std::ifstream info("/proc/cpuinfo");
      for (std::string line; std::getline(info, line);) {
        if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos) {
          model = line.substr(line.find(':') + 2);
          break;
        }
      }
#if defined(__x86_64__) && defined(__GNUC__)
      const char* isa = __builtin_cpu_supports("avx512f") ? "AVX-512F"
                        : __builtin_cpu_supports("avx2")  ? "AVX2"
                                                          : "SSE2";
#else
      const char* isa = "no x86 ISA";
#endif
      return "cpu (" + model + ", " + isa + ")";
    }();
    return text;
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
