// The backend registry and DeviceBuffer.
#include "src/backends/backend.h"

#include <atomic>

#include <algorithm>
#include <chrono>

#include <cstdint>
#include <cstdlib>

#include "kiln/error.h"

namespace kiln {

std::recursive_mutex& device_lifecycle_mutex() {
  static auto* mutex = new std::recursive_mutex;  // never destroyed: thread exits may still lock it
  return *mutex;
}

DeviceBuffer::DeviceBuffer(Backend& backend, size_t bytes) : backend_(&backend), size_(bytes) {
  if (!bytes) return;
  std::lock_guard<std::recursive_mutex> lock(device_lifecycle_mutex());
  data_ = backend.allocate(bytes);
}

DeviceBuffer::~DeviceBuffer() {
  if (!backend_ || !data_) return;
  std::lock_guard<std::recursive_mutex> lock(device_lifecycle_mutex());
  backend_->release(data_);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept : backend_(o.backend_), data_(o.data_), size_(o.size_) {
  o.data_ = nullptr;
  o.size_ = 0;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (backend_ && data_) {
      std::lock_guard<std::recursive_mutex> lock(device_lifecycle_mutex());
      backend_->release(data_);
    }
    backend_ = o.backend_;
    data_ = o.data_;
    size_ = o.size_;
    o.data_ = nullptr;
    o.size_ = 0;
  }
  return *this;
}

namespace {
std::atomic<uint64_t> g_fault_at{0};  // 0: no fault armed
std::atomic<uint64_t> g_allocations_seen{0};

void allocation_fault_point(size_t bytes, const char* memory) {
  const uint64_t n = g_allocations_seen.fetch_add(1, std::memory_order_relaxed) + 1;
  const uint64_t at = g_fault_at.load(std::memory_order_relaxed);
  if (at != 0 && n == at) {
    throw Error(std::string("out of memory: cannot allocate ") + std::to_string(bytes) + " bytes of " + memory +
                " memory (a fault injected by a test: allocation " + std::to_string(n) + ")");
  }
}
}  // namespace

uint64_t inject_allocation_fault(uint64_t k) {
  g_fault_at.store(k, std::memory_order_relaxed);
  return g_allocations_seen.exchange(0, std::memory_order_relaxed);
}

void Backend::count_allocation(size_t bytes) {
  allocations_.fetch_add(1, std::memory_order_relaxed);
  allocation_fault_point(bytes, device() == DeviceType::kCUDA ? "CUDA device" : "host");
}

void Backend::check_host_allocation_fault(size_t bytes) { allocation_fault_point(bytes, "pinned host"); }

void Backend::record_allocation(void* ptr, size_t bytes) {
  std::lock_guard<std::mutex> lock(ledger_mutex_);
  ledger_[ptr] = bytes;
  in_use_ += bytes;
  peak_ = std::max(peak_, in_use_);
}

void Backend::record_release(void* ptr) {
  std::lock_guard<std::mutex> lock(ledger_mutex_);
  auto it = ledger_.find(ptr);
  if (it == ledger_.end()) return;
  in_use_ -= it->second;
  ledger_.erase(it);
}

uint64_t Backend::bytes_in_use() const {
  std::lock_guard<std::mutex> lock(ledger_mutex_);
  return in_use_;
}

uint64_t Backend::peak_bytes_in_use() const {
  std::lock_guard<std::mutex> lock(ledger_mutex_);
  return peak_;
}

void* Backend::allocate_host(size_t bytes) {
  check_host_allocation_fault(bytes);
  void* p = bytes <= SIZE_MAX - 255 ? std::aligned_alloc(256, bytes ? (bytes + 255) / 256 * 256 : 256) : nullptr;
  if (!p) throw Error("out of memory: cannot allocate " + std::to_string(bytes) + " bytes of host memory");
  return p;
}
void Backend::release_host(void* ptr) { std::free(ptr); }

double Backend::time_runs(void* stream, int runs, const std::function<void()>& enqueue, double* host_ms) {
  synchronize(stream);
  const auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < runs; ++r) enqueue();
  synchronize(stream);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / std::max(runs, 1);
  if (host_ms) *host_ms = ms;
  return ms;
}

double Backend::time_concurrent_runs(const std::vector<void*>& streams, int runs,
                                     const std::function<void(size_t)>& enqueue, double* host_ms) {
  if (streams.empty()) throw Error("internal: time_concurrent_runs without streams");
  const double ms = time_runs(
      streams.front(), runs,
      [&] {
        for (size_t i = 0; i < streams.size(); ++i) enqueue(i);
      },
      host_ms);
  if (host_ms) *host_ms /= static_cast<double>(streams.size());
  return ms / static_cast<double>(streams.size());
}

void Backend::begin_capture(void*) {
  throw Error(std::string("the ") + to_string(device()) +
              " backend has no graph capture (CUDA graphs need --device cuda)");
}
void* Backend::end_capture(void* stream) {
  begin_capture(stream);
  return nullptr;
}
void Backend::abort_capture(void*) noexcept {}
void* Backend::instantiate_graph(void*) {
  begin_capture(nullptr);
  return nullptr;
}
bool Backend::update_graph(void*, void*) { return false; }
void Backend::destroy_captured(void*) {}
void Backend::launch_graph(void*, void* stream) { begin_capture(stream); }
void Backend::destroy_graph(void*) {}

// Host-clock events: the CPU backend runs synchronously, so "recorded" is "now".
void* Backend::create_event() { return new std::chrono::steady_clock::time_point(); }
void Backend::destroy_event(void* event) { delete static_cast<std::chrono::steady_clock::time_point*>(event); }
void Backend::record_event(void* event, void* stream) {
  synchronize(stream);
  *static_cast<std::chrono::steady_clock::time_point*>(event) = std::chrono::steady_clock::now();
}
void Backend::event_synchronize(void*) {}
double Backend::elapsed_ms(void* start, void* end) {
  const auto* a = static_cast<std::chrono::steady_clock::time_point*>(start);
  const auto* b = static_cast<std::chrono::steady_clock::time_point*>(end);
  return std::chrono::duration<double, std::milli>(*b - *a).count();
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
