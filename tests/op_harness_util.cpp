// Implementation of the shared op harness (see op_harness.h).
#include "op_harness.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <sstream>

#include "kiln/error.h"
#include "src/backends/backend.h"
#include "src/backends/kernel.h"
#include "src/core/half.h"
#include "src/ir/op_schema.h"
#include "src/ir/shape_inference.h"

namespace kiln::test {

namespace {

constexpr size_t kGuard = 256;
constexpr uint8_t kGuardByte = 0xA5;

double element(const HostTensor& t, int64_t i) {
  switch (t.type()) {
    case DataType::kFloat32:
      return t.as<float>()[i];
    case DataType::kFloat64:
      return t.as<double>()[i];
    case DataType::kFloat16:
      return static_cast<float>(t.as<half>()[i]);
    case DataType::kInt32:
      return t.as<int32_t>()[i];
    case DataType::kInt64:
      return static_cast<double>(t.as<int64_t>()[i]);
    case DataType::kInt8:
      return t.as<int8_t>()[i];
    case DataType::kUInt8:
      return t.as<uint8_t>()[i];
    case DataType::kBool:
      return t.as<uint8_t>()[i] != 0;
    case DataType::kInt16:
      return t.as<int16_t>()[i];
    case DataType::kUInt16:
      return t.as<uint16_t>()[i];
    case DataType::kUInt32:
      return t.as<uint32_t>()[i];
    case DataType::kUInt64:
      return static_cast<double>(t.as<uint64_t>()[i]);
    case DataType::kString:
      break;  // not numeric
  }
  return 0;
}

struct Built {
  std::unique_ptr<Network> net;
  Layer* layer = nullptr;
  std::vector<HostTensor> input_values;  // per layer input (empty when omitted)
  std::vector<std::pair<DataType, Dims>> out_shapes;
};

Built build_case(const OpCase& c) {
  Built b;
  b.net = std::make_unique<Network>();
  std::vector<Tensor*> ins;
  uint64_t seed = std::hash<std::string>{}(c.name);
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    const InputSpec& s = c.inputs[i];
    if (s.omitted) {
      ins.push_back(nullptr);
      b.input_values.emplace_back();
      continue;
    }
    HostTensor v = s.value.empty() ? random_tensor(s.type, s.dims, seed + i, s.low, s.high) : s.value;
    b.input_values.push_back(v);
    if (s.constant) {
      ins.push_back(b.net->add_constant(v, "const" + std::to_string(i))->output(0));
    } else {
      ins.push_back(b.net->add_input("in" + std::to_string(i), v.type(), v.dims()));
    }
  }
  b.layer = b.net->add_layer(c.layer_type, ins, c.num_outputs, c.attrs, "op");
  std::vector<TensorState> states(ins.size());
  std::vector<const TensorState*> ptrs;
  for (size_t i = 0; i < ins.size(); ++i) {
    if (!ins[i]) {
      ptrs.push_back(nullptr);
      continue;
    }
    states[i].type = b.input_values[i].type();
    states[i].dims = b.input_values[i].dims();
    // Values are visible to inference only for constants (as in a real network).
    if (c.inputs[i].constant) states[i].value = std::make_shared<HostTensor>(b.input_values[i]);
    ptrs.push_back(&states[i]);
  }
  b.out_shapes = infer_layer(*b.layer, ptrs);
  return b;
}

// What supports() sees for a built case: types and dims, values of the constant inputs.
std::vector<TensorDesc> input_descs_of(const Built& b, const OpCase& c) {
  std::vector<TensorDesc> descs;
  for (size_t i = 0; i < b.input_values.size(); ++i) {
    TensorDesc d;
    if (b.input_values[i].empty()) {
      d.present = false;
    } else {
      d.type = b.input_values[i].type();
      d.dims = b.input_values[i].dims();
      if (c.inputs[i].constant) d.value = &b.input_values[i];
    }
    descs.push_back(d);
  }
  return descs;
}

// Runs one kernel with guard bytes; returns outputs or throws with a message.
std::vector<HostTensor> run_kernel(const Built& b, const KernelEntry& entry, const OpCase& c, DeviceType device,
                                   std::string* guard_problem) {
  Backend& backend = get_backend(device);
  const Layer& layer = *b.layer;
  std::vector<TensorDesc> in_desc;
  std::vector<DeviceBuffer> in_bufs;
  KernelContext kc;
  kc.layer = &layer;
  kc.num_threads = 2;
  // Device kernels get a stream of their own (never the legacy default stream).
  struct Stream {
    Backend& b;
    void* s;
    ~Stream() {
      if (s) b.destroy_stream(s);
    }
  } stream{backend, device == DeviceType::kCPU ? nullptr : backend.create_stream()};
  kc.stream = stream.s;
  for (size_t i = 0; i < b.input_values.size(); ++i) {
    TensorDesc d;
    TensorView v;
    if (b.input_values[i].empty()) {
      d.present = false;
    } else {
      const HostTensor& h = b.input_values[i];
      d.type = v.type = h.type();
      d.dims = v.dims = h.dims();
      if (c.inputs[i].constant) d.value = &h;
      DeviceBuffer buf(backend, h.nbytes() + 1);
      backend.copy_host_to_device(buf.data(), h.data(), h.nbytes(), nullptr);
      v.data = buf.data();
      in_bufs.push_back(std::move(buf));
    }
    in_desc.push_back(d);
    kc.inputs.push_back(v);
  }
  std::vector<TensorDesc> out_desc;
  std::vector<DeviceBuffer> out_bufs;
  std::vector<uint8_t> guard(kGuard, kGuardByte);
  for (const auto& [type, dims] : b.out_shapes) {
    const size_t bytes = static_cast<size_t>(dims.volume()) * data_type_size(type);
    DeviceBuffer buf(backend, bytes + 2 * kGuard);
    // Poison the whole buffer, output included, so unwritten elements show.
    std::vector<uint8_t> poison(bytes + 2 * kGuard, kGuardByte);
    backend.copy_host_to_device(buf.data(), poison.data(), poison.size(), nullptr);
    out_desc.push_back(TensorDesc{type, dims, TensorFormat::kLinear, true, nullptr});
    kc.outputs.push_back(TensorView{type, dims, TensorFormat::kLinear, static_cast<uint8_t*>(buf.data()) + kGuard});
    out_bufs.push_back(std::move(buf));
  }
  auto kernel = entry.create(layer);
  kernel->prepare(layer, in_desc, out_desc, kc.num_threads);
  const size_t ws = kernel->workspace_size();
  DeviceBuffer ws_buf(backend, ws + 2 * kGuard);
  {
    std::vector<uint8_t> poison(ws + 2 * kGuard, kGuardByte);
    backend.copy_host_to_device(ws_buf.data(), poison.data(), poison.size(), nullptr);
  }
  kc.workspace = ws ? static_cast<uint8_t*>(ws_buf.data()) + kGuard : nullptr;
  kc.workspace_size = ws;
  kernel->execute(kc);
  backend.synchronize(stream.s);

  std::vector<HostTensor> outs;
  for (size_t k = 0; k < out_bufs.size(); ++k) {
    const auto& [type, dims] = b.out_shapes[k];
    std::vector<uint8_t> raw(out_bufs[k].size());
    backend.copy_device_to_host(raw.data(), out_bufs[k].data(), raw.size(), nullptr);
    const size_t bytes = raw.size() - 2 * kGuard;
    if (std::memcmp(raw.data(), guard.data(), kGuard) != 0 ||
        std::memcmp(raw.data() + kGuard + bytes, guard.data(), kGuard) != 0) {
      *guard_problem += "output " + std::to_string(k) + " was written out of bounds (guard bytes changed); ";
    }
    outs.push_back(HostTensor::from_bytes(type, dims, raw.data() + kGuard, bytes));
  }
  std::vector<uint8_t> wraw(ws_buf.size());
  backend.copy_device_to_host(wraw.data(), ws_buf.data(), wraw.size(), nullptr);
  if (std::memcmp(wraw.data(), guard.data(), kGuard) != 0 ||
      std::memcmp(wraw.data() + kGuard + ws, guard.data(), kGuard) != 0) {
    *guard_problem += "the workspace was written out of bounds (declared " + std::to_string(ws) + " bytes); ";
  }
  return outs;
}

}  // namespace

HostTensor random_tensor(DataType type, const Dims& dims, uint64_t seed, double low, double high) {
  HostTensor t(type, dims);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(low, high);
  for (int64_t i = 0; i < t.count(); ++i) {
    const double v = dist(rng);
    switch (type) {
      case DataType::kFloat32:
        t.as<float>()[i] = static_cast<float>(v);
        break;
      case DataType::kFloat64:
        t.as<double>()[i] = v;
        break;
      case DataType::kFloat16:
        t.as<half>()[i] = half(static_cast<float>(v));
        break;
      case DataType::kInt32:
        t.as<int32_t>()[i] = static_cast<int32_t>(std::floor(v));
        break;
      case DataType::kInt64:
        t.as<int64_t>()[i] = static_cast<int64_t>(std::floor(v));
        break;
      case DataType::kInt8:
        t.as<int8_t>()[i] = static_cast<int8_t>(std::floor(v));
        break;
      case DataType::kUInt8:
        t.as<uint8_t>()[i] = static_cast<uint8_t>(std::max(0.0, std::floor(v)));
        break;
      case DataType::kBool:
        t.as<uint8_t>()[i] = v > (low + high) / 2;
        break;
      case DataType::kInt16:
        t.as<int16_t>()[i] = static_cast<int16_t>(std::floor(v));
        break;
      case DataType::kUInt16:
        t.as<uint16_t>()[i] = static_cast<uint16_t>(std::max(0.0, std::floor(v)));
        break;
      case DataType::kUInt32:
        t.as<uint32_t>()[i] = static_cast<uint32_t>(std::max(0.0, std::floor(v)));
        break;
      case DataType::kUInt64:
        t.as<uint64_t>()[i] = static_cast<uint64_t>(std::max(0.0, std::floor(v)));
        break;
      case DataType::kString:
        throw Error("random_tensor: no random string tensors");
    }
  }
  return t;
}

bool compare_tensors(const HostTensor& actual, const HostTensor& expected, double rtol, double atol, ErrorStats* stats,
                     std::string* message) {
  ErrorStats s;
  if (actual.dims() != expected.dims() || actual.type() != expected.type()) {
    if (message) {
      *message = "got " + std::string(to_string(actual.type())) + " " + actual.dims().to_string() + ", expected " +
                 to_string(expected.type()) + " " + expected.dims().to_string();
    }
    return false;
  }
  bool ok = true;
  int64_t bad = 0, first_bad = -1, above = 0;
  double sum_rel = 0;
  for (int64_t i = 0; i < expected.count(); ++i) {
    const double a = element(actual, i), b = element(expected, i);
    const bool a_nan = std::isnan(a), b_nan = std::isnan(b);
    if (a_nan || b_nan) {
      if (a_nan != b_nan) {
        ok = false;
        ++bad;
        if (first_bad < 0) first_bad = i;
      }
      continue;
    }
    if (std::isinf(a) || std::isinf(b)) {
      if (a != b) {
        ok = false;
        ++bad;
        if (first_bad < 0) first_bad = i;
      }
      continue;
    }
    const double d = std::fabs(a - b);
    const double rel = d / std::max(std::fabs(b), 1e-3);
    s.max_abs = std::max(s.max_abs, d);
    s.max_rel = std::max(s.max_rel, rel);
    sum_rel += rel;
    if (rel > 1e-5) ++above;
    if (d > atol + rtol * std::fabs(b)) {
      ok = false;
      ++bad;
      if (first_bad < 0) first_bad = i;
    }
  }
  s.count = expected.count();
  if (s.count) {
    s.mean_rel = sum_rel / static_cast<double>(s.count);
    s.share_above_1e5 = static_cast<double>(above) / static_cast<double>(s.count);
  }
  if (stats) *stats = s;
  if (!ok && message) {
    std::ostringstream os;
    os << bad << " of " << s.count << " elements differ; first at index " << first_bad << ": got "
       << element(actual, first_bad) << ", expected " << element(expected, first_bad) << " (max abs err " << s.max_abs
       << ", max rel err " << s.max_rel << ")";
    *message = os.str();
  }
  return ok;
}

HostTensor convert_format(const HostTensor& t, bool to_channels_last) {
  const Dims& d = t.dims();
  const int64_t n = d[0], c = d[1], s = d.volume() / std::max<int64_t>(n * c, 1);
  const size_t e = data_type_size(t.type());
  HostTensor r(t.type(), d);
  const auto* src = static_cast<const uint8_t*>(t.data());
  auto* dst = static_cast<uint8_t*>(r.data());
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t ch = 0; ch < c; ++ch) {
      for (int64_t k = 0; k < s; ++k) {
        const int64_t linear = (b * c + ch) * s + k, last = (b * s + k) * c + ch;
        std::memcpy(dst + (to_channels_last ? last : linear) * e, src + (to_channels_last ? linear : last) * e, e);
      }
    }
  }
  return r;
}

std::vector<HostTensor> reference_outputs(const OpCase& c) {
  Built b = build_case(c);
  const KernelEntry* ref = KernelRegistry::instance().find(DeviceType::kCPU, c.layer_type, "reference");
  if (!ref) throw Error("no CPU reference kernel for layer type '" + c.layer_type + "'");
  std::string guard;
  auto outs = run_kernel(b, *ref, c, DeviceType::kCPU, &guard);
  if (!guard.empty()) throw Error("reference kernel of '" + c.layer_type + "': " + guard);
  return outs;
}

std::vector<KernelResult> run_op_case(const OpCase& c, DeviceType device, const TacticFilter& only) {
  std::vector<KernelResult> results;
  Built b = build_case(c);
  const KernelEntry* ref = KernelRegistry::instance().find(DeviceType::kCPU, c.layer_type, "reference");
  if (!ref) {
    results.push_back(
        KernelResult{"reference", Outcome::kFailed, "no CPU reference kernel for '" + c.layer_type + "'", {}});
    return results;
  }
  std::string guard;
  std::vector<HostTensor> expected;
  try {
    expected = run_kernel(b, *ref, c, DeviceType::kCPU, &guard);
  } catch (const std::exception& e) {
    results.push_back(KernelResult{"reference", Outcome::kFailed, std::string("threw: ") + e.what(), {}});
    return results;
  }
  for (const KernelEntry* entry : KernelRegistry::instance().find(device, c.layer_type)) {
    if (only && !only(entry->tactic)) continue;
    KernelResult r;
    r.tactic = entry->tactic;
    const std::vector<TensorDesc> descs = input_descs_of(b, c);
    if (entry->supports && !entry->supports(*b.layer, descs)) {
      r.outcome = Outcome::kUnsupported;
      r.message = "supports() rejects this case";
      results.push_back(r);
      continue;
    }
    try {
      std::string problem = entry == ref ? guard : std::string();
      auto got = run_kernel(b, *entry, c, device, &problem);
      if (entry == ref) {  // determinism of the oracle
        for (size_t k = 0; k < got.size(); ++k) {
          if (std::memcmp(got[k].data(), expected[k].data(), got[k].nbytes()) != 0) problem += "two runs differ; ";
        }
      }
      bool ok = problem.empty();
      for (size_t k = 0; k < got.size() && ok; ++k) {
        std::string msg;
        if (!compare_tensors(got[k], expected[k], c.rtol, c.atol, &r.stats, &msg)) {
          ok = false;
          problem += "output " + std::to_string(k) + ": " + msg;
        }
      }
      r.outcome = ok ? Outcome::kPassed : Outcome::kFailed;
      r.message = problem;
    } catch (const std::exception& e) {
      r.outcome = Outcome::kFailed;
      r.message = std::string("threw: ") + e.what();
    }
    results.push_back(r);
  }
  return results;
}

}  // namespace kiln::test

namespace kiln::test {

namespace {

HostTensor to_float32(const HostTensor& t) {
  if (t.type() != DataType::kFloat16) return t;
  HostTensor out(DataType::kFloat32, t.dims());
  for (int64_t i = 0; i < t.count(); ++i) out.as<float>()[i] = static_cast<float>(t.as<half>()[i]);
  return out;
}

HostTensor to_float16(const HostTensor& t) {
  HostTensor out(DataType::kFloat16, t.dims());
  for (int64_t i = 0; i < t.count(); ++i) out.as<half>()[i] = half(t.as<float>()[i]);
  return out;
}

}  // namespace

std::vector<KernelResult> run_op_case_fp16(const OpCase& c, DeviceType device, double rtol, double atol,
                                           const TacticFilter& only) {
  std::vector<KernelResult> results;
  const OpSchema* schema = OpSchemaRegistry::instance().find(c.layer_type);
  std::vector<int> shape_inputs = schema ? schema->shape_inputs : std::vector<int>{};
  // Fix every input's value, round the float data inputs through fp16: the fp16 case gets them
  // as fp16, the reference as the same values in fp32.
  Built b = build_case(c);
  OpCase c16 = c, cref = c;
  bool any = false;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    if (c.inputs[i].omitted) continue;
    const HostTensor& v = b.input_values[i];
    const bool shape = std::find(shape_inputs.begin(), shape_inputs.end(), static_cast<int>(i)) != shape_inputs.end();
    if (v.type() == DataType::kFloat32 && !shape) {
      c16.inputs[i].value = to_float16(v);
      cref.inputs[i].value = to_float32(c16.inputs[i].value);
      any = true;
    } else {
      c16.inputs[i].value = v;
      cref.inputs[i].value = v;
    }
  }
  if (!any) return results;  // no float data: nothing to run in fp16
  std::vector<HostTensor> expected;
  try {
    expected = reference_outputs(cref);
  } catch (const std::exception& e) {
    results.push_back(KernelResult{"reference", Outcome::kFailed, std::string("threw: ") + e.what(), {}});
    return results;
  }
  Built b16 = build_case(c16);
  for (const KernelEntry* entry : KernelRegistry::instance().find(device, c.layer_type)) {
    if (only && !only(entry->tactic)) continue;
    KernelResult r;
    r.tactic = entry->tactic;
    const std::vector<TensorDesc> descs = input_descs_of(b16, c16);
    if (entry->supports && !entry->supports(*b16.layer, descs)) {
      r.outcome = Outcome::kUnsupported;
      r.message = "supports() rejects this case in fp16";
      results.push_back(r);
      continue;
    }
    try {
      std::string problem;
      auto got = run_kernel(b16, *entry, c16, device, &problem);
      bool ok = problem.empty();
      for (size_t k = 0; k < got.size() && ok; ++k) {
        double scale = 1.0;
        const HostTensor ref = expected[k];
        for (int64_t i = 0; i < ref.count(); ++i) {
          if (ref.type() == DataType::kFloat32 && std::isfinite(ref.as<float>()[i])) {
            scale = std::max(scale, static_cast<double>(std::fabs(ref.as<float>()[i])));
          }
        }
        std::string msg;
        if (!compare_tensors(to_float32(got[k]), to_float32(ref), rtol, atol * scale, &r.stats, &msg)) {
          ok = false;
          problem += "output " + std::to_string(k) + ": " + msg;
        }
      }
      r.outcome = ok ? Outcome::kPassed : Outcome::kFailed;
      r.message = problem;
    } catch (const std::exception& e) {
      r.outcome = Outcome::kFailed;
      r.message = std::string("threw: ") + e.what();
    }
    results.push_back(r);
  }
  return results;
}

}  // namespace kiln::test
