// The op test table's loader (see op_table.h).
#include "tests/op_table.h"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <iomanip>
#include <limits>
#include <nlohmann/json.hpp>

#include "kiln/error.h"
#include "kiln/kiln.h"
#include "src/backends/backend.h"
#include "src/core/half.h"
#include "src/core/tensor_io.h"
#include "src/ir/op_schema.h"

namespace kiln::test {

namespace {

using nlohmann::json;

Attributes attributes_of(const json& j, const std::string& where) {
  Attributes a;
  if (j.is_null()) return a;
  if (!j.is_object()) throw Error(where + ": \"attrs\" must be an object");
  for (const auto& [k, v] : j.items()) {
    if (v.is_string()) {
      a.set(k, v.get<std::string>());
    } else if (v.is_boolean()) {
      a.set(k, static_cast<int64_t>(v.get<bool>()));
    } else if (v.is_number_integer()) {
      a.set(k, v.get<int64_t>());
    } else if (v.is_number_float()) {
      a.set(k, v.get<double>());
    } else if (v.is_array()) {
      bool floats = false, strings = false;
      for (const auto& e : v) {
        floats = floats || e.is_number_float();
        strings = strings || e.is_string();
      }
      if (strings) {
        a.set(k, v.get<std::vector<std::string>>());
      } else if (floats) {
        a.set(k, v.get<std::vector<double>>());
      } else {
        a.set(k, v.get<std::vector<int64_t>>());
      }
    } else {
      throw Error(where + ": attribute '" + k + "' has an unsupported JSON type");
    }
  }
  return a;
}

HostTensor given_values(DataType type, const Dims& dims, const json& values, const std::string& where) {
  if (!values.is_array() || static_cast<int64_t>(values.size()) != dims.volume()) {
    throw Error(where + ": \"value\" must list " + std::to_string(dims.volume()) + " numbers for dims " +
                dims.to_string());
  }
  HostTensor t(type, dims);
  for (int64_t i = 0; i < dims.volume(); ++i) {
    const json& v = values[static_cast<size_t>(i)];
    double d = 0;
    if (v.is_boolean()) {
      d = static_cast<double>(v.get<bool>());
    } else if (v.is_string()) {  // JSON has no NaN or infinities
      const std::string s = v.get<std::string>();
      if (s == "nan") {
        d = std::numeric_limits<double>::quiet_NaN();
      } else if (s == "inf" || s == "-inf") {
        d = (s == "inf" ? 1 : -1) * std::numeric_limits<double>::infinity();
      } else {
        throw Error(where + ": value \"" + s + "\" is not a number (write \"nan\", \"inf\" or \"-inf\")");
      }
    } else {
      d = v.get<double>();
    }
    switch (type) {
      case DataType::kFloat32:
        t.as<float>()[i] = static_cast<float>(d);
        break;
      case DataType::kFloat64:
        t.as<double>()[i] = d;
        break;
      case DataType::kFloat16:
        t.as<half>()[i] = half(static_cast<float>(d));
        break;
      case DataType::kInt32:
        t.as<int32_t>()[i] = static_cast<int32_t>(d);
        break;
      case DataType::kInt64:
        t.as<int64_t>()[i] = v.is_number_integer() ? v.get<int64_t>() : static_cast<int64_t>(d);
        break;
      case DataType::kInt8:
        t.as<int8_t>()[i] = static_cast<int8_t>(d);
        break;
      case DataType::kUInt8:
        t.as<uint8_t>()[i] = static_cast<uint8_t>(d);
        break;
      case DataType::kBool:
        t.as<uint8_t>()[i] = d != 0;
        break;
      case DataType::kInt16:
        t.as<int16_t>()[i] = static_cast<int16_t>(d);
        break;
      case DataType::kUInt16:
        t.as<uint16_t>()[i] = static_cast<uint16_t>(d);
        break;
      case DataType::kUInt32:
        t.as<uint32_t>()[i] = static_cast<uint32_t>(d);
        break;
      case DataType::kUInt64:
        t.as<uint64_t>()[i] = v.is_number_integer() ? v.get<uint64_t>() : static_cast<uint64_t>(d);
        break;
      case DataType::kString:
        throw Error(where + ": string inputs are not supported");
    }
  }
  return t;
}

bool is_shape_input(const std::string& layer_type, int index) {
  const OpSchema* schema = OpSchemaRegistry::instance().find(layer_type);
  return schema &&
         std::find(schema->shape_inputs.begin(), schema->shape_inputs.end(), index) != schema->shape_inputs.end();
}

InputSpec input_of(const json& in, const std::string& dir, const std::string& layer_type, int index,
                   const std::string& where) {
  InputSpec s;
  const bool shape = is_shape_input(layer_type, index);
  s.constant = index > 0 || shape;
  if (in.is_null() || (in.is_string() && in.get<std::string>().empty())) {
    s.omitted = true;
    return s;
  }
  if (in.is_string()) {
    s.value = load_npy(dir + in.get<std::string>());
    s.type = s.value.type();
    s.dims = s.value.dims();
    return s;
  }
  if (!in.is_object())
    throw Error(where + ": input " + std::to_string(index) + " must be a file name, null or an object");
  s.type = parse_data_type(in.value("type", std::string("float32")));
  if (!in.contains("dims")) throw Error(where + ": input " + std::to_string(index) + " has no \"dims\"");
  for (const auto& d : in.at("dims")) s.dims.push_back(d.get<int64_t>());
  s.low = in.value("low", -2.0);
  s.high = in.value("high", 2.0);
  if (in.contains("value")) s.value = given_values(s.type, s.dims, in.at("value"), where);
  if (in.contains("constant")) s.constant = in.at("constant").get<bool>() || shape;
  return s;
}

TableCase case_of(const json& j, const std::string& family, const std::string& dir) {
  TableCase c;
  c.family = family;
  if (!j.contains("name")) throw Error(dir + "cases.json: an entry has no \"name\"");
  c.name = j.at("name").get<std::string>();
  const std::string where = dir + "cases.json, case '" + c.name + "'";
  c.rtol = j.value("rtol", 1e-4);
  c.atol = j.value("atol", 1e-5);
  c.hand = j.value("source", std::string()) == "hand";
  if (j.contains("require")) c.require = j.at("require").get<std::vector<std::string>>();
  if (j.contains("decline")) c.decline = j.at("decline").get<std::map<std::string, std::string>>();
  if (j.contains("skip")) c.skip = j.at("skip").get<std::map<std::string, std::string>>();
  if (!j.contains("type")) {  // a model case
    c.model = true;
    c.num_inputs = j.at("inputs").get<int>();
    c.num_outputs = j.at("outputs").get<int>();
    c.sets = j.value("sets", 0);
    if (c.sets > 0 && !c.skip.count("all")) {
      c.skip["all"] =
          "data-dependent output sizes over several input sets: tests/data_dependent_ops_test.cpp runs them on every "
          "device";
    }
    return c;
  }
  c.op.name = c.name;
  c.op.layer_type = j.at("type").get<std::string>();
  c.op.attrs = attributes_of(j.value("attrs", json()), where);
  c.op.rtol = c.rtol;
  c.op.atol = c.atol;
  if (!j.contains("inputs") || !j.at("inputs").is_array()) throw Error(where + ": \"inputs\" must be an array");
  int index = 0;
  for (const auto& in : j.at("inputs")) c.op.inputs.push_back(input_of(in, dir, c.op.layer_type, index++, where));
  if (j.contains("output")) c.expected.push_back(j.at("output").get<std::string>());
  if (j.contains("outputs")) {
    for (const auto& o : j.at("outputs")) c.expected.push_back(o.get<std::string>());
  }
  if (j.contains("expected")) {
    for (const auto& e : j.at("expected")) {
      Dims dims;
      for (const auto& d : e.at("dims")) dims.push_back(d.get<int64_t>());
      c.expected_values.push_back(given_values(parse_data_type(e.at("type").get<std::string>()), dims, e.at("value"),
                                               where + ", \"expected\""));
    }
  }
  if (!c.expected.empty() && !c.expected_values.empty()) {
    throw Error(where + ": give the expected outputs as files or as values, not both");
  }
  const size_t n_expected = c.expected.size() + c.expected_values.size();
  c.op.num_outputs = n_expected == 0 ? j.value("num_outputs", 1) : static_cast<int>(n_expected);
  c.num_outputs = c.op.num_outputs;
  c.num_inputs = static_cast<int>(c.op.inputs.size());
  return c;
}

}  // namespace

std::string TableCase::dir() const { return std::string(KILN_SOURCE_DIR) + "/tests/data/" + family + "/"; }

std::string TableCase::id() const { return family + "/" + name; }

std::string TableCase::test_name() const {
  std::string s = family + "_" + name;
  for (char& ch : s) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return s;
}

std::string TableCase::skip_reason(const std::string& runner) const {
  auto it = skip.find(runner);
  if (it != skip.end()) return it->second;
  it = skip.find("all");
  if (it != skip.end()) return it->second;
  // fp16 runs are skipped where the fp32 runs are.
  if (runner == "cuda_fp16") return skip_reason("cuda");
  return "";
}

std::vector<TableCase> load_op_table(const std::string& family) {
  const std::string dir = std::string(KILN_SOURCE_DIR) + "/tests/data/" + family + "/";
  std::ifstream f(dir + "cases.json");
  if (!f) throw Error(dir + "cases.json is missing (run the family's generator in that folder)");
  json all;
  try {
    all = json::parse(f);
  } catch (const std::exception& e) {
    throw Error(dir + "cases.json: " + e.what());
  }
  std::vector<TableCase> cases;
  std::map<std::string, int> seen;
  for (const auto& j : all) {
    cases.push_back(case_of(j, family, dir));
    if (seen[cases.back().name]++)
      throw Error(dir + "cases.json: the case name '" + cases.back().name + "' is used twice");
  }
  return cases;
}

std::vector<TableCase> load_op_table() {
  std::vector<TableCase> all;
  for (const auto& family : op_families()) {
    auto cases = load_op_table(family);
    all.insert(all.end(), cases.begin(), cases.end());
  }
  return all;
}

std::vector<HostTensor> expected_outputs(const TableCase& c, int set) {
  if (!c.expected_values.empty()) return c.expected_values;
  std::vector<HostTensor> out;
  if (c.model) {
    const std::string base = c.dir() + c.name + (c.sets > 0 ? "_set" + std::to_string(set) : std::string());
    for (int i = 0; i < c.num_outputs; ++i) out.push_back(load_npy(base + "_out" + std::to_string(i) + ".npy"));
  } else {
    for (const auto& file : c.expected) out.push_back(load_npy(c.dir() + file));
  }
  return out;
}

std::vector<HostTensor> model_inputs(const TableCase& c, int set) {
  std::vector<HostTensor> in;
  const std::string base = c.dir() + c.name + (c.sets > 0 ? "_set" + std::to_string(set) : std::string());
  for (int i = 0; i < c.num_inputs; ++i) in.push_back(load_npy(base + "_in" + std::to_string(i) + ".npy"));
  return in;
}

std::optional<LayerCase> lift(const TableCase& c) {
  if (!c.model) {
    LayerCase lc{c.op, {}};
    for (int k = 0; k < c.op.num_outputs; ++k) lc.outputs.push_back(k);
    return lc;
  }
  if (c.sets > 0) return std::nullopt;
  Network net;
  OnnxParser(net).parse_file(c.dir() + c.name + ".onnx");
  const Layer* op = nullptr;
  for (int i = 0; i < net.num_layers(); ++i) {
    const Layer* l = net.layer(i);
    if (l->type() == kLayerConstant) continue;
    if (op) return std::nullopt;  // more than one computing layer
    op = l;
  }
  if (!op || net.num_inputs() != c.num_inputs || net.num_outputs() != c.num_outputs) return std::nullopt;
  LayerCase lc;
  for (int o = 0; o < net.num_outputs(); ++o) {
    int k = 0;
    while (k < op->num_outputs() && op->output(k) != net.output(o)) ++k;
    if (k == op->num_outputs()) return std::nullopt;  // a network output the layer does not make
    lc.outputs.push_back(k);
  }
  const std::vector<HostTensor> inputs = model_inputs(c);
  OpCase oc;
  oc.name = c.name;
  oc.layer_type = op->type();
  oc.attrs = op->attrs();
  oc.num_outputs = op->num_outputs();
  oc.rtol = c.rtol;
  oc.atol = c.atol;
  for (int i = 0; i < op->num_inputs(); ++i) {
    const Tensor* t = op->input(i);
    InputSpec s;
    if (!t) {
      s.omitted = true;
    } else if (t->producer() && t->producer()->type() == kLayerConstant) {
      s.value = t->producer()->attrs().get_tensor("value");
      s.constant = true;
    } else {
      int index = -1;
      for (int n = 0; n < net.num_inputs(); ++n) {
        if (net.input(n) == t) index = n;
      }
      if (index < 0) return std::nullopt;
      s.value = inputs[static_cast<size_t>(index)];
      // As in layer cases: input 0 a network input, the others (weights, shape inputs) constants.
      s.constant = i > 0 || is_shape_input(oc.layer_type, i);
    }
    if (!s.omitted) {
      s.type = s.value.type();
      s.dims = s.value.dims();
    }
    oc.inputs.push_back(s);
  }
  lc.op = std::move(oc);
  return lc;
}

std::vector<HostTensor> run_model_case(const TableCase& c, DeviceType device, bool fp16) {
  Network net;
  OnnxParser(net).parse_file(c.dir() + c.name + ".onnx");
  std::vector<HostTensor> inputs = model_inputs(c);
  if (net.num_inputs() != static_cast<int>(inputs.size())) {
    throw Error(c.id() + ": the network has " + std::to_string(net.num_inputs()) + " inputs, the case gives " +
                std::to_string(inputs.size()));
  }
  BuilderConfig config;
  config.device = device;
  config.fp16 = fp16;
  config.num_threads = 1;
  config.time_tactics = false;  // each layer's highest-priority kernel: the runners compare, they do not tune
  OptimizationProfile profile;
  for (int i = 0; i < net.num_inputs(); ++i) {
    const Dims& d = inputs[static_cast<size_t>(i)].dims();
    profile.set_dimensions(net.input(i)->name(), d, d, d);
  }
  if (!inputs.empty()) config.profiles.push_back(profile);
  const auto bytes = Builder().build_serialized(net, config);
  auto engine = Runtime().deserialize(bytes.data(), bytes.size());
  auto ctx = engine->create_execution_context();
  // Engines on a device take device addresses.
  Backend* backend = device == DeviceType::kCPU ? nullptr : &get_backend(device);
  std::vector<void*> device_ptrs;
  struct Release {
    Backend* b;
    std::vector<void*>& p;
    ~Release() {
      for (void* q : p) b->release(q);
    }
  } release{backend, device_ptrs};
  auto place = [&](HostTensor& t) -> void* {
    if (!backend) return t.data();
    device_ptrs.push_back(backend->allocate(std::max<size_t>(t.nbytes(), 1)));
    backend->copy_host_to_device(device_ptrs.back(), t.data(), t.nbytes(), nullptr);
    return device_ptrs.back();
  };
  for (int i = 0; i < net.num_inputs(); ++i) {
    ctx->set_input_shape(net.input(i)->name(), inputs[static_cast<size_t>(i)].dims());
    ctx->set_tensor_address(net.input(i)->name(), place(inputs[static_cast<size_t>(i)]));
  }
  std::vector<HostTensor> outputs;
  std::vector<void*> out_ptrs;
  outputs.reserve(static_cast<size_t>(net.num_outputs()));
  for (int i = 0; i < net.num_outputs(); ++i) {
    const std::string name = net.output(i)->name();
    outputs.emplace_back(engine->io_tensor(name).type, ctx->tensor_shape(name));
    out_ptrs.push_back(place(outputs.back()));
    ctx->set_tensor_address(name, out_ptrs.back());
  }
  ctx->execute();
  if (backend) {
    backend->synchronize(nullptr);
    for (size_t i = 0; i < outputs.size(); ++i) {
      backend->copy_device_to_host(outputs[i].data(), out_ptrs[i], outputs[i].nbytes(), nullptr);
    }
  }
  return outputs;
}

void print_tallies(std::ostream& os, const std::string& runner, const std::map<std::string, Tally>& per_family) {
  Tally total;
  for (const auto& [family, t] : per_family) {
    os << "[op table] " << runner << " " << std::left << std::setw(15) << family << std::right << " " << std::setw(4)
       << t.cases << " cases: " << std::setw(4) << t.passed << " passed, " << std::setw(4) << t.declined
       << " declined, " << std::setw(3) << t.failed << " failed\n";
    total.cases += t.cases;
    total.passed += t.passed;
    total.declined += t.declined;
    total.failed += t.failed;
  }
  os << "[op table] " << runner << " " << std::left << std::setw(15) << "all" << std::right << " " << std::setw(4)
     << total.cases << " cases: " << std::setw(4) << total.passed << " passed, " << std::setw(4) << total.declined
     << " declined, " << std::setw(3) << total.failed << " failed\n";
}

}  // namespace kiln::test
