// The plugin checker's runner (see plugin_check_runner.h): guarded host memory, the crash guard,
// host-side type/layout conversion and one guarded enqueue. Why the care: the checker runs code
// that is assumed broken, so every buffer it hands out is poisoned and fenced, and a fault in
// the plugin becomes a FAIL row instead of the end of `kiln plugin check` (or of the test run).
#include "src/plugins/plugin_check_runner.h"

#include <setjmp.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>

#include "kiln/error.h"
#include "src/core/half.h"

namespace kiln::plugin_check {

// ---- host memory fenced by inaccessible pages ------------------------------------------------

namespace {

size_t page_size() {
  static const size_t size = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  return size;
}

class HostDevice final : public CheckDevice {
 public:
  ~HostDevice() override {
    for (const auto& [ptr, size] : maps_) ::munmap(static_cast<uint8_t*>(ptr) - page_size(), size);
  }
  DeviceType device() const override { return DeviceType::kCPU; }
  // [no-access page | bytes rounded up to pages | no-access page]
  void* allocate(size_t bytes) override {
    const size_t page = page_size();
    const size_t usable = (std::max<size_t>(bytes, 1) + page - 1) / page * page;
    const size_t total = usable + 2 * page;
    void* base = ::mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) throw Error("kiln plugin check: cannot map " + std::to_string(total) + " bytes of memory");
    auto* p = static_cast<uint8_t*>(base);
    ::mprotect(p, page, PROT_NONE);
    ::mprotect(p + page + usable, page, PROT_NONE);
    maps_[p + page] = total;
    return p + page;
  }
  void release(void* ptr) override {
    auto it = maps_.find(ptr);
    if (it == maps_.end()) return;
    ::munmap(static_cast<uint8_t*>(ptr) - page_size(), it->second);
    maps_.erase(it);
  }
  void upload(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void download(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void* stream() override { return nullptr; }
  std::string synchronize() override { return ""; }

 private:
  std::map<void*, size_t> maps_;
};

}  // namespace

std::unique_ptr<CheckDevice> make_host_device() { return std::make_unique<HostDevice>(); }

// ---- crash guard -----------------------------------------------------------------------------

namespace {

constexpr int kFaultSignals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL};
thread_local sigjmp_buf* t_jump = nullptr;
thread_local int t_signal = 0;
thread_local void* t_address = nullptr;

extern "C" void on_fault(int sig, siginfo_t* info, void*) {
  if (t_jump != nullptr) {
    t_signal = sig;
    t_address = info != nullptr ? info->si_addr : nullptr;
    siglongjmp(*t_jump, 1);
  }
  // Not a guarded call (another thread): fall back to the default action, which re-faults.
  ::signal(sig, SIG_DFL);
}

const char* signal_name(int sig) {
  switch (sig) {
    case SIGSEGV:
      return "SIGSEGV (an access outside its buffers)";
    case SIGBUS:
      return "SIGBUS";
    case SIGFPE:
      return "SIGFPE (integer division by zero?)";
    case SIGILL:
      return "SIGILL";
  }
  return "a signal";
}

// Kept apart from run_guarded's locals so that nothing live across sigsetjmp is modified.
__attribute__((noinline)) void call_catching(const std::function<void()>& fn, std::string* exception) {
  try {
    fn();
  } catch (const PluginCallError& e) {
    *exception = e.status_message();  // "threw: ..." as the plugin's library reported it
  } catch (const std::exception& e) {
    *exception = std::string("threw: ") + e.what();
  } catch (...) {
    *exception = "threw an exception that is not a std::exception";
  }
}

__attribute__((noinline)) bool call_with_jump(const std::function<void()>& fn, std::string* exception) {
  sigjmp_buf env;
  t_jump = &env;
  if (sigsetjmp(env, 1) != 0) {
    t_jump = nullptr;
    return false;
  }
  call_catching(fn, exception);
  t_jump = nullptr;
  return true;
}

std::mutex g_guard_mutex;  // the handlers are process-wide

}  // namespace

std::string run_guarded(const std::function<void()>& fn) {
  std::lock_guard<std::mutex> lock(g_guard_mutex);
  struct sigaction action {};
  action.sa_sigaction = on_fault;
  action.sa_flags = SA_SIGINFO;
  sigemptyset(&action.sa_mask);
  struct sigaction previous[std::size(kFaultSignals)];
  for (size_t i = 0; i < std::size(kFaultSignals); ++i) sigaction(kFaultSignals[i], &action, &previous[i]);
  std::string exception;
  const bool returned = call_with_jump(fn, &exception);
  for (size_t i = 0; i < std::size(kFaultSignals); ++i) sigaction(kFaultSignals[i], &previous[i], nullptr);
  if (!returned) {
    char address[32];
    std::snprintf(address, sizeof address, "%p", t_address);
    return std::string("crashed with ") + signal_name(t_signal) + " at address " + address;
  }
  return exception;
}

// ---- types and layouts -----------------------------------------------------------------------

std::string to_string(const Combination& combo, int num_inputs) {
  std::string s;
  for (size_t i = 0; i < combo.size(); ++i) {
    if (i == static_cast<size_t>(num_inputs))
      s += " -> ";
    else if (i > 0)
      s += ", ";
    s += std::string(kiln::to_string(combo[i].type)) + ":" + kiln::to_string(combo[i].format);
  }
  return s;
}

double quantize(double v, DataType type) {
  switch (type) {
    case DataType::kFloat32:
      return static_cast<float>(v);
    case DataType::kFloat16:
      return static_cast<float>(half(static_cast<float>(v)));
    case DataType::kFloat64:
      return v;
    case DataType::kInt32:
    case DataType::kInt64:
      return std::nearbyint(v);
    case DataType::kInt8:
      return std::clamp(std::nearbyint(v), -128.0, 127.0);
    case DataType::kUInt8:
      return std::clamp(std::nearbyint(v), 0.0, 255.0);
    case DataType::kBool:
      return v > 0 ? 1.0 : 0.0;
    case DataType::kInt16:
      return std::clamp(std::nearbyint(v), -32768.0, 32767.0);
    case DataType::kUInt16:
      return std::clamp(std::nearbyint(v), 0.0, 65535.0);
    case DataType::kUInt32:
    case DataType::kUInt64:
      return std::max(std::nearbyint(v), 0.0);
    case DataType::kString:
      break;  // plugins take no string tensors
  }
  return v;
}

namespace {

void store(uint8_t* p, DataType type, double v) {
  switch (type) {
    case DataType::kFloat32: {
      const float f = static_cast<float>(v);
      std::memcpy(p, &f, 4);
      break;
    }
    case DataType::kFloat16: {
      const half h(static_cast<float>(v));
      std::memcpy(p, &h, 2);
      break;
    }
    case DataType::kFloat64:
      std::memcpy(p, &v, 8);
      break;
    case DataType::kInt32: {
      const auto i = static_cast<int32_t>(v);
      std::memcpy(p, &i, 4);
      break;
    }
    case DataType::kInt64: {
      const auto i = static_cast<int64_t>(v);
      std::memcpy(p, &i, 8);
      break;
    }
    case DataType::kInt8: {
      const auto i = static_cast<int8_t>(v);
      std::memcpy(p, &i, 1);
      break;
    }
    case DataType::kUInt8:
    case DataType::kBool:
      *p = static_cast<uint8_t>(v);
      break;
    case DataType::kInt16: {
      const auto i = static_cast<int16_t>(v);
      std::memcpy(p, &i, 2);
      break;
    }
    case DataType::kUInt16: {
      const auto i = static_cast<uint16_t>(v);
      std::memcpy(p, &i, 2);
      break;
    }
    case DataType::kUInt32: {
      const auto i = static_cast<uint32_t>(v);
      std::memcpy(p, &i, 4);
      break;
    }
    case DataType::kUInt64: {
      const auto i = static_cast<uint64_t>(v);
      std::memcpy(p, &i, 8);
      break;
    }
    case DataType::kString:
      break;  // plugins take no string tensors
  }
}

double load(const uint8_t* p, DataType type) {
  switch (type) {
    case DataType::kFloat32: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    case DataType::kFloat16: {
      half h;
      std::memcpy(&h, p, 2);
      return static_cast<float>(h);
    }
    case DataType::kFloat64: {
      double d;
      std::memcpy(&d, p, 8);
      return d;
    }
    case DataType::kInt32: {
      int32_t i;
      std::memcpy(&i, p, 4);
      return i;
    }
    case DataType::kInt64: {
      int64_t i;
      std::memcpy(&i, p, 8);
      return static_cast<double>(i);
    }
    case DataType::kInt8:
      return static_cast<int8_t>(*p);
    case DataType::kUInt8:
      return *p;
    case DataType::kBool:
      return *p != 0 ? 1.0 : 0.0;
    case DataType::kInt16: {
      int16_t i;
      std::memcpy(&i, p, 2);
      return i;
    }
    case DataType::kUInt16: {
      uint16_t i;
      std::memcpy(&i, p, 2);
      return i;
    }
    case DataType::kUInt32: {
      uint32_t i;
      std::memcpy(&i, p, 4);
      return i;
    }
    case DataType::kUInt64: {
      uint64_t i;
      std::memcpy(&i, p, 8);
      return static_cast<double>(i);
    }
    case DataType::kString:
      break;  // plugins take no string tensors
  }
  return 0;
}

// Position in memory of each logical (row-major) element. Channels-last moves dim 1 innermost.
std::vector<int64_t> physical_positions(const Dims& dims, TensorFormat format) {
  const int64_t n = dims.volume();
  std::vector<int64_t> pos(static_cast<size_t>(n));
  if (format == TensorFormat::kLinear || dims.rank() < 3 || n == 0) {
    for (int64_t i = 0; i < n; ++i) pos[static_cast<size_t>(i)] = i;
    return pos;
  }
  const int64_t batch = dims[0], channels = dims[1], rest = n / (batch * channels);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t c = 0; c < channels; ++c)
      for (int64_t r = 0; r < rest; ++r)
        pos[static_cast<size_t>((b * channels + c) * rest + r)] = (b * rest + r) * channels + c;
  return pos;
}

}  // namespace

std::vector<uint8_t> encode(const std::vector<double>& values, const Dims& dims, const Slot& slot) {
  const size_t size = data_type_size(slot.type);
  std::vector<uint8_t> bytes(values.size() * size);
  const auto pos = physical_positions(dims, slot.format);
  for (size_t i = 0; i < values.size(); ++i)
    store(bytes.data() + static_cast<size_t>(pos[i]) * size, slot.type, values[i]);
  return bytes;
}

std::vector<double> decode(const uint8_t* bytes, const Dims& dims, const Slot& slot) {
  const size_t size = data_type_size(slot.type);
  const auto pos = physical_positions(dims, slot.format);
  std::vector<double> values(pos.size());
  for (size_t i = 0; i < pos.size(); ++i) values[i] = load(bytes + static_cast<size_t>(pos[i]) * size, slot.type);
  return values;
}

// ---- comparison ------------------------------------------------------------------------------

std::string sci(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2e", v);
  return buf;
}

std::string percent(double share) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", 100.0 * share);
  return buf;
}

bool is_float(DataType t) { return t == DataType::kFloat32 || t == DataType::kFloat16 || t == DataType::kFloat64; }

double tolerance_of(DataType t) {
  if (t == DataType::kFloat16) return 1e-2;
  if (is_float(t)) return 1e-4;
  return 1.0;
}

Stats compare(const std::vector<double>& actual, const std::vector<double>& expected, DataType type) {
  Stats s;
  const double tol = tolerance_of(type);
  int64_t above = 0;
  double sum_rel = 0;
  for (size_t i = 0; i < actual.size() && i < expected.size(); ++i) {
    const double a = actual[i], b = expected[i];
    bool bad = false;
    if (!std::isfinite(a) || !std::isfinite(b)) {
      bad = !(a == b || (std::isnan(a) && std::isnan(b)));
      if (bad) s.max_rel = s.max_abs = INFINITY;
    } else {
      const double abs = std::fabs(a - b);
      const double rel = abs / std::max(std::fabs(b), 1e-3);
      s.max_abs = std::max(s.max_abs, abs);
      s.max_rel = std::max(s.max_rel, rel);
      sum_rel += rel;
      above += rel > 1e-5;
      bad = is_float(type) ? rel > tol : abs > tol;
    }
    if (bad && s.violations++ == 0) s.first_violation = static_cast<int64_t>(i);
    ++s.count;
  }
  if (s.count > 0) {
    s.mean_rel = sum_rel / static_cast<double>(s.count);
    s.share_above_1e5 = static_cast<double>(above) / static_cast<double>(s.count);
  }
  return s;
}

std::string stats_text(const Stats& s) {
  return "max rel err " + sci(s.max_rel) + ", mean rel err " + sci(s.mean_rel) +
         ", rel err > 1e-5: " + percent(s.share_above_1e5);
}

// ---- the guarded runner ------------------------------------------------------------------------

namespace {

constexpr size_t kLeadGuard = 4096;

// A device allocation laid out as [lead guard | bytes | trail guard], all poisoned first.
struct Fenced {
  CheckDevice* device = nullptr;
  uint8_t* base = nullptr;
  size_t lead = 0, bytes = 0, trail = 0;
  Fenced(CheckDevice& d, size_t lead_, size_t bytes_, size_t trail_)
      : device(&d), lead(lead_), bytes(bytes_), trail(trail_) {
    base = static_cast<uint8_t*>(d.allocate(total()));
  }
  ~Fenced() {
    if (base != nullptr) device->release(base);
  }
  Fenced(const Fenced&) = delete;
  Fenced& operator=(const Fenced&) = delete;
  size_t total() const { return lead + bytes + trail; }
  uint8_t* data() const { return base + lead; }
  void fill(const std::vector<uint8_t>& content, uint8_t poison) const {
    std::vector<uint8_t> all(total(), poison);
    std::copy(content.begin(), content.end(), all.begin() + static_cast<std::ptrdiff_t>(lead));
    device->upload(base, all.data(), all.size());
  }
  std::vector<uint8_t> read() const {
    std::vector<uint8_t> all(total());
    device->download(all.data(), base, all.size());
    return all;
  }
};

std::vector<PluginTensorDesc> descs(const std::vector<Dims>& dims, const Combination& combo, size_t first) {
  std::vector<PluginTensorDesc> r;
  for (size_t i = 0; i < dims.size(); ++i)
    r.push_back(PluginTensorDesc{combo[first + i].type, combo[first + i].format, dims[i]});
  return r;
}

}  // namespace

RunResult run_plugin(GuardedPlugin& plugin, CheckDevice& device, const RunSpec& spec) {
  RunResult r;
  const size_t nin = spec.in_dims.size(), nout = spec.out_dims.size();
  const auto in_descs = descs(spec.in_dims, spec.combo, 0);
  const auto out_descs = descs(spec.out_dims, spec.combo, nin);
  std::vector<DynamicPluginTensorDesc> din, dout;
  for (const auto& d : in_descs) din.push_back(DynamicPluginTensorDesc{d, d.dims, d.dims, d.dims});
  for (const auto& d : out_descs) dout.push_back(DynamicPluginTensorDesc{d, d.dims, d.dims, d.dims});
  size_t ws = 0;
  std::string problem = run_guarded([&] {
    plugin.configure(din, dout);
    ws = plugin.workspace_size(in_descs, out_descs);
  });
  if (!problem.empty()) {
    r.error = "configure() or workspace_size() " + problem;
    return r;
  }
  r.workspace_size = ws;

  // Generous trailing guards: a kernel that treats 2-byte elements as 8-byte ones still writes
  // into poison we can inspect, not into someone else's memory.
  size_t largest = 0;
  std::vector<std::unique_ptr<Fenced>> ins, outs;
  std::vector<std::vector<uint8_t>> in_bytes;
  for (size_t i = 0; i < nin; ++i) {
    in_bytes.push_back(encode(spec.inputs[i], spec.in_dims[i], spec.combo[i]));
    const size_t b = in_bytes.back().size();
    largest = std::max(largest, b);
    ins.push_back(std::make_unique<Fenced>(device, 0, b, 8 * b + kLeadGuard));
    ins.back()->fill(in_bytes.back(), spec.poison);
  }
  for (size_t o = 0; o < nout; ++o) {
    const size_t b = static_cast<size_t>(tensor_byte_size(spec.combo[nin + o].type, spec.out_dims[o]));
    largest = std::max(largest, b);
    outs.push_back(std::make_unique<Fenced>(device, kLeadGuard, b, 8 * b + kLeadGuard));
    outs.back()->fill({}, spec.poison);
  }
  // With workspace_size() == 0 the plugin still gets a pointer: into the middle of poison, so that
  // scratch it should have declared shows up as changed bytes.
  Fenced workspace(device, kLeadGuard, ws, 65536 + 8 * largest);
  workspace.fill({}, spec.poison);

  std::vector<const void*> in_ptrs;
  std::vector<void*> out_ptrs;
  for (const auto& b : ins) in_ptrs.push_back(b->data());
  for (const auto& b : outs) out_ptrs.push_back(b->data());
  std::string message;
  const PluginExecContext exec{device.device(), device.stream(), spec.num_threads, &message};
  int rc = 0;
  std::string failed;  // the status of a failed enqueue ("returned 3: ...", "threw: ...")
  const auto enqueue = [&] {
    const PluginStatus s = plugin.enqueue(in_descs, out_descs, in_ptrs.data(), out_ptrs.data(), workspace.data(), exec);
    if (s.ok()) return 0;
    failed = s.message();
    return 1;
  };
  if (spec.capture) {
#ifdef KILN_HAVE_CUDA
    CaptureOutcome outcome;
    problem = run_guarded([&] {
      outcome = capture_and_replay(device, enqueue, [&] {
        for (const auto& b : outs) b->fill({}, spec.poison);
        workspace.fill({}, spec.poison);
      });
    });
    if (problem.empty() && !outcome.captured) {
      r.capture_problem = outcome.problem;
      return r;
    }
#else
    problem = "cannot capture: this kiln was built without CUDA";
#endif
  } else {
    problem = run_guarded([&] { rc = enqueue(); });
  }
  if (!problem.empty()) {
    r.error = "enqueue() " + problem;
    device.synchronize();
    return r;
  }
  const std::string sync = device.synchronize();
  if (rc != 0) {
    r.error = "enqueue() " + failed + (sync.empty() ? "" : " (the device reports " + sync + ")");
    return r;
  }
  if (!sync.empty()) {
    r.error = "the device reports " + sync + " after enqueue()";
    return r;
  }

  for (size_t o = 0; o < nout; ++o) {
    const Fenced& b = *outs[o];
    const std::vector<uint8_t> all = b.read();
    int64_t before = 0, after = 0;
    for (size_t k = 0; k < b.lead; ++k) before += all[k] != spec.poison;
    for (size_t k = b.lead + b.bytes; k < all.size(); ++k) {
      if (all[k] != spec.poison) after = static_cast<int64_t>(k - b.lead - b.bytes + 1);
    }
    r.bytes_changed_before.push_back(before);
    r.bytes_changed_after.push_back(after);
    r.raw.emplace_back(all.begin() + static_cast<std::ptrdiff_t>(b.lead),
                       all.begin() + static_cast<std::ptrdiff_t>(b.lead + b.bytes));
    r.outputs.push_back(decode(r.raw.back().data(), spec.out_dims[o], spec.combo[nin + o]));
  }
  for (size_t i = 0; i < nin; ++i) {
    std::vector<uint8_t> expected(ins[i]->total(), spec.poison);
    std::copy(in_bytes[i].begin(), in_bytes[i].end(), expected.begin());
    r.input_modified.push_back(ins[i]->read() != expected);
  }
  const std::vector<uint8_t> ws_all = workspace.read();
  for (size_t k = 0; k < workspace.lead; ++k) r.scratch_before = r.scratch_before || ws_all[k] != spec.poison;
  for (size_t k = workspace.lead + ws; k < ws_all.size(); ++k) {
    if (ws_all[k] != spec.poison) r.scratch_extent = static_cast<int64_t>(k - workspace.lead + 1);
  }
  return r;
}

}  // namespace kiln::plugin_check
