// Running ONNX backend tests through kiln (see conformance.h): test discovery and the reading of
// each model's op types and I/O kinds in the parent, the per-test pipeline (import, load the .pb
// data sets, build an engine whose profile is the data's shapes, run, compare) and the forked,
// memory-limited worker that runs it so that no test can end the run.
#include "conformance.h"

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <limits>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "backends/backend.h"
#include "common.h"
#include "core/tensor_io.h"
#include "ir/op_schema.h"
#include "kiln/builder.h"
#include "kiln/error.h"
#include "kiln/logger.h"
#include "kiln/onnx_parser.h"
#include "kiln/runtime.h"
#include "onnx/onnx_proto.h"
#include "core/text.h"

namespace kiln::conformance {
namespace {

namespace fs = std::filesystem;

// ---- what the parent learns from the model -----------------------------------------------------------

// Ops whose results depend on training state or on random numbers: comparing them with fixed
// reference outputs is meaningless for an inference engine.
const std::set<std::string> kTrainingOps = {"Adagrad", "Adam", "Momentum", "Gradient"};
const std::set<std::string> kRandomOps = {"Bernoulli",     "RandomNormal",      "RandomNormalLike",
                                          "RandomUniform", "RandomUniformLike", "Multinomial"};

// Test names whose op is not their (underscore-free, lower-case) prefix.
const std::map<std::string, std::string> kNameAliases = {
    {"batchnorm", "BatchNormalization"},
    {"instancenorm", "InstanceNormalization"},
    {"basicconv", "Conv"},
    {"sce", "SoftmaxCrossEntropyLoss"},
    {"nllloss", "NegativeLogLikelihoodLoss"},
    {"lessequal", "LessOrEqual"},
    {"greaterequal", "GreaterOrEqual"},
    {"constantpad", "Pad"},
    {"edgepad", "Pad"},
    {"reflectpad", "Pad"},
    {"wrappad", "Pad"},
    {"simplernn", "RNN"},
    {"mvn", "MeanVarianceNormalization"},
    {"tril", "Trilu"},
    {"triu", "Trilu"},
    {"trainingdropout", "Dropout"},
    {"nesterovmomentum", "Momentum"},
    {"strnorm", "StringNormalizer"},
};

std::string normalized(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c != '_') out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return out;
}

const char* value_kind(const onnx::TypeProto& type) {
  switch (type.value_case()) {
    case onnx::TypeProto::kTensorType:
      return "tensor";
    case onnx::TypeProto::kSequenceType:
      return "sequence";
    case onnx::TypeProto::kMapType:
      return "map";
    case onnx::TypeProto::kOptionalType:
      return "optional";
    case onnx::TypeProto::kSparseTensorType:
      return "sparse tensor";
    default:
      return "value of unknown kind";
  }
}

// The value of a one-element bool/float/double/int TensorProto; nullopt for anything else.
std::optional<double> scalar_of(const onnx::TensorProto& t) {
  int64_t count = 1;
  for (int64_t d : t.dims()) count *= d;
  if (count != 1) return std::nullopt;
  const std::string& raw = t.raw_data();
  auto from_raw = [&](auto zero) -> std::optional<double> {
    if (raw.size() != sizeof(zero)) return std::nullopt;
    std::memcpy(&zero, raw.data(), sizeof(zero));
    return static_cast<double>(zero);
  };
  switch (t.data_type()) {
    case onnx::TensorProto::BOOL:
      if (!raw.empty()) return from_raw(uint8_t{0});
      return t.int32_data_size() ? std::optional<double>(t.int32_data(0)) : std::nullopt;
    case onnx::TensorProto::INT32:
      if (!raw.empty()) return from_raw(int32_t{0});
      return t.int32_data_size() ? std::optional<double>(t.int32_data(0)) : std::nullopt;
    case onnx::TensorProto::FLOAT:
      if (!raw.empty()) return from_raw(0.0f);
      return t.float_data_size() ? std::optional<double>(t.float_data(0)) : std::nullopt;
    case onnx::TensorProto::DOUBLE:
      if (!raw.empty()) return from_raw(0.0);
      return t.double_data_size() ? std::optional<double>(t.double_data(0)) : std::nullopt;
    default:
      return std::nullopt;
  }
}

// The value of a scalar named `name`: an initializer, or a graph input of the first data set.
std::optional<double> known_scalar(const TestCase& test, const onnx::GraphProto& graph, const std::string& name,
                                   const std::vector<std::string>& graph_inputs) {
  for (const auto& init : graph.initializer()) {
    if (init.name() == name) return scalar_of(init);
  }
  const auto it = std::find(graph_inputs.begin(), graph_inputs.end(), name);
  if (it == graph_inputs.end()) return std::nullopt;
  const fs::path file =
      fs::path(test.dir) / "test_data_set_0" / ("input_" + std::to_string(it - graph_inputs.begin()) + ".pb");
  onnx::TensorProto t;
  std::ifstream in(file, std::ios::binary);
  if (!in || !t.ParseFromIstream(&in)) return std::nullopt;
  return scalar_of(t);
}

// Why a node makes the test training-mode or random: BatchNormalization (or any op) with
// training_mode=1, Dropout whose training_mode input is true and ratio is not 0.
std::string training_mode_reason(const TestCase& test, const onnx::GraphProto& graph, const onnx::NodeProto& node,
                                 const std::vector<std::string>& graph_inputs) {
  for (const auto& a : node.attribute()) {
    if (a.name() == "training_mode" && a.i() != 0) return node.op_type() + " with training_mode=1";
  }
  if (node.op_type() != "Dropout" || node.input_size() < 3 || node.input(2).empty()) return "";
  const auto training = known_scalar(test, graph, node.input(2), graph_inputs);
  if (!training || *training == 0) return "";
  const auto ratio =
      node.input(1).empty() ? std::optional<double>(0.5) : known_scalar(test, graph, node.input(1), graph_inputs);
  if (ratio && *ratio == 0) return "";
  return "Dropout in training mode (random masks)";
}

// Reads model.onnx and fills model_ops, excluded (or model_error).
void inspect_model(TestCase& test) {
  onnx::ModelProto model;
  const std::string path = (fs::path(test.dir) / "model.onnx").string();
  std::ifstream in(path, std::ios::binary);
  if (!in || !model.ParseFromIstream(&in)) {
    test.model_error = "cannot read " + quote(path) + " as an ONNX model";
    return;
  }
  const auto& graph = model.graph();
  std::set<std::string> seen;
  for (const auto& node : graph.node()) {
    if (seen.insert(node.op_type()).second) test.model_ops.push_back(node.op_type());
  }
  std::set<std::string> initializers;
  for (const auto& init : graph.initializer()) initializers.insert(init.name());
  auto check_io = [&](const onnx::ValueInfoProto& v, const char* role) {
    if (test.excluded.empty() && !v.type().has_tensor_type()) {
      const std::string kind = value_kind(v.type());
      test.excluded = std::string(role) + " " + quote(v.name()) + " is " + (kind[0] == 'o' ? "an " : "a ") + kind +
                      ", not a tensor";
    }
  };
  for (const auto& v : graph.input()) {
    if (!initializers.count(v.name())) check_io(v, "input");
  }
  for (const auto& v : graph.output()) check_io(v, "output");
  for (const auto& op : test.model_ops) {
    if (!test.excluded.empty()) break;
    if (kTrainingOps.count(op)) test.excluded = "training op " + op;
    if (kRandomOps.count(op)) test.excluded = "nondeterministic op " + op;
  }
  std::vector<std::string> graph_inputs;
  for (const auto& v : graph.input()) {
    if (!initializers.count(v.name())) graph_inputs.push_back(v.name());
  }
  for (const auto& node : graph.node()) {
    if (!test.excluded.empty()) break;
    test.excluded = training_mode_reason(test, graph, node, graph_inputs);
  }
}

// The op a node/ test is about: the longest known op type (or alias) that prefixes its name
// (ignoring case, underscores and an "_expanded" suffix), else the model's own op types.
std::vector<std::string> node_test_ops(const TestCase& test, const std::map<std::string, std::string>& known) {
  std::string name = test.name.rfind("test_", 0) == 0 ? test.name.substr(5) : test.name;
  const std::string key = normalized(name);
  std::string best_key, best_op;
  for (const auto& [k, op] : known) {
    if (k.size() > best_key.size() && key.rfind(k, 0) == 0) {
      best_key = k;
      best_op = op;
    }
  }
  if (!best_op.empty()) return {best_op};
  return test.model_ops;
}

// ---- the per-test pipeline (runs in the worker) -------------------------------------------------------

// Collects the library's log messages of one test (shown with --verbose).
class CaptureLogger : public Logger {
 public:
  void log(Severity severity, const std::string& message) override {
    if (severity > Severity::kWarning) return;
    std::lock_guard<std::mutex> lock(mutex_);
    lines_.push_back(std::string(to_string(severity)) + ": " + message);
  }
  std::vector<std::string> take() {
    std::lock_guard<std::mutex> lock(mutex_);
    return std::move(lines_);
  }

 private:
  std::mutex mutex_;
  std::vector<std::string> lines_;
};

struct Stopped {
  Status status;
  std::string message;
};

std::vector<std::string> sorted_subdirs(const std::string& dir, const std::string& prefix) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.is_directory() && e.path().filename().string().rfind(prefix, 0) == 0) out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> numbered_files(const std::string& dir, const std::string& prefix) {
  std::vector<std::string> files;
  for (int i = 0;; ++i) {
    const fs::path p = fs::path(dir) / (prefix + std::to_string(i) + ".pb");
    std::error_code ec;
    if (!fs::is_regular_file(p, ec)) break;
    files.push_back(p.string());
  }
  return files;
}

std::vector<int64_t> unravel(int64_t flat, const Dims& dims) {
  std::vector<int64_t> index(static_cast<size_t>(dims.rank()));
  for (int i = dims.rank() - 1; i >= 0; --i) {
    index[static_cast<size_t>(i)] = dims[i] > 0 ? flat % dims[i] : 0;
    if (dims[i] > 0) flat /= dims[i];
  }
  return index;
}

// Compares one output; returns the worst element when some element is outside the tolerance.
std::optional<WorstElement> compare_output(const std::string& name, int data_set, const HostTensor& actual,
                                           const HostTensor& expected, const RunOptions& o) {
  WorstElement worst;
  worst.output = name;
  worst.data_set = data_set;
  worst.count = expected.count();
  double worst_excess = -1;
  int64_t worst_flat = -1;
  auto note = [&](int64_t i, double a, double b, double abs_err, double allowed) {
    ++worst.violations;
    const double excess = std::isnan(abs_err) ? std::numeric_limits<double>::infinity() : abs_err - allowed;
    if (excess > worst_excess) {
      worst_excess = excess;
      worst_flat = i;
      worst.actual = a;
      worst.expected = b;
      worst.abs_err = abs_err;
      worst.allowed = allowed;
    }
  };
  if (is_floating_point(expected.type())) {
    const auto a = actual.to_double();
    const auto b = expected.to_double();
    for (size_t i = 0; i < b.size(); ++i) {
      const double x = a[i], y = b[i];
      if (std::isnan(x) || std::isnan(y)) {
        if (std::isnan(x) != std::isnan(y))
          note(static_cast<int64_t>(i), x, y, std::numeric_limits<double>::infinity(), 0);
        continue;
      }
      if (std::isinf(x) || std::isinf(y)) {
        if (x != y) note(static_cast<int64_t>(i), x, y, std::numeric_limits<double>::infinity(), 0);
        continue;
      }
      const double err = std::fabs(x - y), allowed = o.atol + o.rtol * std::fabs(y);
      if (err > allowed) note(static_cast<int64_t>(i), x, y, err, allowed);
    }
  } else {  // integers and bool: exact (doubles would round large int64 values)
    const auto a = actual.to_int64();
    const auto b = expected.to_int64();
    for (size_t i = 0; i < b.size(); ++i) {
      if (a[i] != b[i]) {
        note(static_cast<int64_t>(i), static_cast<double>(a[i]), static_cast<double>(b[i]),
             std::fabs(static_cast<double>(a[i]) - static_cast<double>(b[i])), 0);
      }
    }
  }
  if (worst.violations == 0) return std::nullopt;
  worst.index = unravel(worst_flat, expected.dims());
  return worst;
}

// String outputs match exactly. Empty when they do, else the first differing element and how
// many differ.
std::string compare_strings(const HostTensor& actual, const HostTensor& expected) {
  int64_t first = -1, differ = 0;
  for (int64_t i = 0; i < expected.count(); ++i) {
    if (actual.string_at(i) == expected.string_at(i)) continue;
    if (first < 0) first = i;
    ++differ;
  }
  if (first < 0) return "";
  std::string index;
  for (int64_t k : unravel(first, expected.dims())) index += (index.empty() ? "" : ",") + std::to_string(k);
  return "[" + index + "]: " + quote(std::string(actual.string_at(first))) + " vs the reference '" +
         std::string(expected.string_at(first)) + "' (" + std::to_string(differ) + " of " +
         std::to_string(expected.count()) + " elements differ)";
}

// Host copies in and out of the engine's device memory (plain host memory on the CPU).
struct BoundTensor {
  std::unique_ptr<DeviceBuffer> buffer;
  HostTensor host;
};

// The problems a ParseError lists ("  - node 'n': op Clip, domain ai.onnx, opset 13: reason").
std::vector<std::string> problem_ops(const std::string& message) {
  static const std::regex kOp(": op ([A-Za-z0-9_]+), domain ");
  std::set<std::string> ops;
  for (auto it = std::sregex_iterator(message.begin(), message.end(), kOp); it != std::sregex_iterator(); ++it) {
    ops.insert((*it)[1].str());
  }
  return {ops.begin(), ops.end()};
}

// ONNX names the importer wanted as constants (NodeContext::constant_input's message).
std::set<std::string> wanted_constants(const std::string& message) {
  static const std::regex kWanted("input '([^']+)' \\([^)]*\\) must be an initializer or constant");
  std::set<std::string> names;
  for (auto it = std::sregex_iterator(message.begin(), message.end(), kWanted); it != std::sregex_iterator(); ++it) {
    names.insert((*it)[1].str());
  }
  return names;
}

// Network inputs whose values some layer needs when shapes are inferred (a schema's
// shape_inputs), directly or through other layers; Shape layers read dims only, not values.
std::set<std::string> shape_value_inputs(const Network& network) {
  std::set<std::string> names;
  for (int i = 0; i < network.num_inputs(); ++i) {
    const Tensor* input = network.input(i);
    std::vector<const Tensor*> todo{input};
    std::set<const Tensor*> seen{input};
    bool needed = false;
    while (!todo.empty() && !needed) {
      const Tensor* t = todo.back();
      todo.pop_back();
      for (const Layer* layer : t->consumers()) {
        const OpSchema* schema = OpSchemaRegistry::instance().find(layer->type());
        for (int k = 0; schema && k < layer->num_inputs(); ++k) {
          if (layer->input(k) == t &&
              std::find(schema->shape_inputs.begin(), schema->shape_inputs.end(), k) != schema->shape_inputs.end()) {
            needed = true;
          }
        }
        if (layer->type() == kLayerShape) continue;
        for (int k = 0; k < layer->num_outputs(); ++k) {
          if (seen.insert(layer->output(k)).second) todo.push_back(layer->output(k));
        }
      }
    }
    if (needed) names.insert(input->name());
  }
  return names;
}

// One test_data_set_* folder: the inputs in graph-input order, as protos (to freeze) and tensors.
struct DataSet {
  std::string dir;
  std::vector<onnx::TensorProto> protos;
  std::vector<HostTensor> values;
};

// Imports the model, builds one engine per data set (per input-shape signature when no input is
// frozen), runs and compares. Inputs whose values kiln needs before run time (Reshape's shape,
// Slice's starts, Clip's bounds, ... when the test feeds them as graph inputs) are frozen: the
// model is imported with them as initializers holding the data set's values, the way a TensorRT
// shape-tensor input gets its values from the optimization profile.
class Pipeline {
 public:
  Pipeline(const TestCase& test, const RunOptions& o, const std::function<void(const std::string&)>& on_stage)
      : test_(test), o_(o), on_stage_(on_stage), model_path_((fs::path(test.dir) / "model.onnx").string()) {}

  TestResult run() {
    TestResult r;
    r.test = test_;
    try {
      stage(r, "import");
      read_model();
      const auto dirs = sorted_subdirs(test_.dir, "test_data_set_");
      if (dirs.empty()) throw Stopped{Status::kUnsupported, "the test has no test_data_set_* folder"};
      std::vector<DataSet> sets;
      stage(r, "inputs");
      for (const auto& dir : dirs) sets.push_back(load_data_set(dir));
      stage(r, "import");
      choose_frozen(r, sets.front());
      r.frozen_inputs.assign(frozen_.begin(), frozen_.end());
      for (size_t i = 0; i < sets.size(); ++i) {
        run_data_set(r, static_cast<int>(i), sets[i]);
        ++r.data_sets;
        if (r.status == Status::kWrong) return r;
      }
      r.status = Status::kPass;
      r.stage = "done";
    } catch (const Stopped& s) {
      r.status = s.status;
      r.message = s.message;
    } catch (const std::bad_alloc&) {
      r.status = Status::kUnsupported;
      r.message = "out of memory (the worker's limit is " + cli::format_bytes(o_.memory_limit) + ")";
    } catch (const std::exception& e) {
      r.status = Status::kUnsupported;
      r.message = e.what();
    } catch (...) {
      r.status = Status::kUnsupported;
      r.message = "unknown exception";
    }
    return r;
  }

 private:
  void stage(TestResult& r, const std::string& name) {
    r.stage = name;
    if (on_stage_) on_stage_(name);
  }

  void read_model() {
    std::ifstream in(model_path_, std::ios::binary);
    if (!in || !model_.ParseFromIstream(&in)) throw Stopped{Status::kUnsupported, "cannot read " + model_path_};
    std::set<std::string> initializers;
    for (const auto& init : model_.graph().initializer()) initializers.insert(init.name());
    for (const auto& v : model_.graph().input()) {
      if (!initializers.count(v.name())) graph_inputs_.push_back(v.name());
    }
  }

  DataSet load_data_set(const std::string& dir) {
    DataSet ds;
    ds.dir = dir;
    const auto files = numbered_files(dir, "input_");
    if (files.size() != graph_inputs_.size()) {
      throw Stopped{Status::kUnsupported, fs::path(dir).filename().string() + " has " + std::to_string(files.size()) +
                                              " input files, the model " + std::to_string(graph_inputs_.size()) +
                                              " graph inputs"};
    }
    for (const auto& file : files) {
      ds.values.push_back(load_tensor_pb(file));  // checks the type and the size
      std::ifstream in(file, std::ios::binary);
      ds.protos.emplace_back();
      ds.protos.back().ParseFromIstream(&in);
    }
    return ds;
  }

  // The network of the model with the frozen inputs as initializers holding `ds`'s values.
  std::unique_ptr<Network> import_network(const DataSet& ds) {
    auto network = std::make_unique<Network>();
    if (frozen_.empty()) {
      OnnxParser(*network).parse_file(model_path_);
      return network;
    }
    onnx::ModelProto model = model_;
    google::protobuf::RepeatedPtrField<onnx::ValueInfoProto> kept;
    for (const auto& v : model.graph().input()) {
      if (!frozen_.count(v.name())) *kept.Add() = v;
    }
    model.mutable_graph()->mutable_input()->Swap(&kept);
    for (size_t i = 0; i < graph_inputs_.size(); ++i) {
      if (!frozen_.count(graph_inputs_[i])) continue;
      onnx::TensorProto* init = model.mutable_graph()->add_initializer();
      *init = ds.protos[i];
      init->set_name(graph_inputs_[i]);
    }
    const std::string bytes = model.SerializeAsString();
    OnnxParser(*network).parse_bytes(bytes.data(), bytes.size(), test_.dir, model_path_);
    return network;
  }

  // Grows the frozen set from the first data set until the model imports and no layer needs the
  // value of a remaining input when shapes are inferred.
  void choose_frozen(TestResult& r, const DataSet& ds) {
    const std::set<std::string> inputs(graph_inputs_.begin(), graph_inputs_.end());
    for (int round = 0; round < 8; ++round) {
      std::set<std::string> more;
      try {
        network_ = import_network(ds);
        if (o_.freeze_inputs) {
          for (const auto& name : shape_value_inputs(*network_)) more.insert(name);
        }
      } catch (const ParseError& e) {
        for (const auto& name : wanted_constants(e.what())) {
          if (o_.freeze_inputs && inputs.count(name) && !frozen_.count(name)) more.insert(name);
        }
        if (more.empty()) {
          r.failing_ops = problem_ops(e.what());
          throw Stopped{Status::kUnsupported, e.what()};
        }
      }
      if (more.empty()) return;
      frozen_.insert(more.begin(), more.end());
    }
    throw Stopped{Status::kUnsupported, "the inputs to freeze as constants did not settle"};
  }

  void run_data_set(TestResult& r, int index, const DataSet& ds) {
    std::map<std::string, Dims> dims;
    std::string signature = frozen_.empty() ? std::string() : "set" + std::to_string(index) + ";";
    for (size_t i = 0; i < graph_inputs_.size(); ++i) {
      if (frozen_.count(graph_inputs_[i])) continue;
      dims[graph_inputs_[i]] = ds.values[i].dims();
      signature += graph_inputs_[i] + ":" + ds.values[i].dims().to_string() + ";";
    }
    std::shared_ptr<Engine>& engine = engines_[signature];
    if (!engine) {
      if (!frozen_.empty() && index > 0) {
        stage(r, "import");
        network_ = import_network(ds);
      }
      stage(r, "build");
      BuilderConfig config;
      config.device = o_.device;
      config.num_threads = o_.threads;
      config.disable_optimizations = !o_.optimize;
      config.profiles.push_back(cli::profile_from_input_dims(*network_, dims, "the test's input files"));
      const std::vector<uint8_t> bytes = Builder().build_serialized(*network_, config);
      engine = Runtime().deserialize(bytes.data(), bytes.size(), test_.id());
    }

    stage(r, "run");
    Backend& backend = get_backend(o_.device);
    auto context = engine->create_execution_context();
    if (o_.threads > 0) context->set_num_threads(o_.threads);
    std::vector<BoundTensor> bound;
    for (size_t i = 0; i < graph_inputs_.size(); ++i) {
      const std::string& name = graph_inputs_[i];
      if (frozen_.count(name)) continue;
      const TensorInfo& info = engine->io_tensor(name);
      const HostTensor& value = ds.values[i];
      if (value.type() != info.type) {
        throw Stopped{Status::kUnsupported, "input " + quote(name) + " is " + to_string(info.type) +
                                                " but the data set holds " + to_string(value.type())};
      }
      if (info.dims.is_dynamic()) context->set_input_shape(name, value.dims());
      BoundTensor b;
      b.buffer = std::make_unique<DeviceBuffer>(backend, std::max<size_t>(value.nbytes(), 1));
      if (value.nbytes()) backend.copy_host_to_device(b.buffer->data(), value.data(), value.nbytes(), nullptr);
      context->set_tensor_address(name, b.buffer->data());
      bound.push_back(std::move(b));
    }
    std::vector<std::pair<std::string, BoundTensor>> outputs;
    for (int i = 0; i < network_->num_outputs(); ++i) {
      const std::string& name = network_->output(i)->name();
      const Dims out_dims = context->max_tensor_shape(name);  // the upper bound of data-dependent outputs
      BoundTensor b;
      b.host = HostTensor(engine->io_tensor(name).type, out_dims);
      b.buffer = std::make_unique<DeviceBuffer>(backend, std::max<size_t>(b.host.nbytes(), 1));
      context->set_tensor_address(name, b.buffer->data());
      outputs.emplace_back(name, std::move(b));
    }
    context->execute();
    for (auto& [name, b] : outputs) {
      b.host = HostTensor(b.host.type(), context->tensor_shape(name));  // the dims this inference gave
      if (b.host.nbytes()) backend.copy_device_to_host(b.host.data(), b.buffer->data(), b.host.nbytes(), nullptr);
      // String elements point into the context's storage: keep copies of the characters.
      if (b.host.type() == DataType::kString) {
        b.host = HostTensor::from_bytes(b.host.type(), b.host.dims(), b.host.data(), b.host.nbytes());
      }
    }

    stage(r, "compare");
    const auto output_files = numbered_files(ds.dir, "output_");
    if (output_files.size() != outputs.size()) {
      throw Stopped{Status::kUnsupported, fs::path(ds.dir).filename().string() + " has " +
                                              std::to_string(output_files.size()) + " output files, the network " +
                                              std::to_string(outputs.size()) + " outputs"};
    }
    for (size_t i = 0; i < outputs.size(); ++i) {
      const auto& [name, b] = outputs[i];
      const HostTensor expected = load_tensor_pb(output_files[i]);
      const std::string where = "data set " + std::to_string(index) + ", output " + quote(name);
      if (b.host.type() != expected.type()) {
        r.status = Status::kWrong;
        r.message = where + " is " + to_string(b.host.type()) + ", the reference is " + to_string(expected.type());
        return;
      }
      if (b.host.dims() != expected.dims()) {
        r.status = Status::kWrong;
        r.message = where + " has dims " + b.host.dims().to_string() + ", the reference " + expected.dims().to_string();
        return;
      }
      if (expected.type() == DataType::kString) {
        if (const std::string diff = compare_strings(b.host, expected); !diff.empty()) {
          r.status = Status::kWrong;
          r.message = where + " " + diff;
          return;
        }
        continue;
      }
      if (auto worst = compare_output(name, index, b.host, expected, o_)) {
        r.status = Status::kWrong;
        r.message = "data set " + std::to_string(index) + ", " + describe_worst(*worst);
        r.worst = worst;
        return;
      }
    }
  }

  const TestCase& test_;
  const RunOptions& o_;
  const std::function<void(const std::string&)>& on_stage_;
  const std::string model_path_;
  onnx::ModelProto model_;
  std::vector<std::string> graph_inputs_;  // non-initializer graph inputs, in order
  std::set<std::string> frozen_;
  std::unique_ptr<Network> network_;
  std::map<std::string, std::shared_ptr<Engine>> engines_;
};

TestResult run_in_process(const TestCase& test, const RunOptions& o,
                          const std::function<void(const std::string&)>& on_stage) {
  CaptureLogger logger;
  set_logger(&logger);
  const auto t0 = std::chrono::steady_clock::now();
  TestResult r = Pipeline(test, o, on_stage).run();
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  set_logger(nullptr);
  r.log = logger.take();
  return r;
}

// ---- the forked worker ------------------------------------------------------------------------------

void write_all(int fd, const std::string& text) {
  const char* p = text.data();
  size_t left = text.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
}

[[noreturn]] void worker_main(const TestCase& test, const RunOptions& o, int fd) {
  // Not in AddressSanitizer builds: its shadow memory reserves terabytes of address space, so an
  // address-space limit makes every allocation in the worker fail.
#if !defined(__SANITIZE_ADDRESS__)
  if (o.memory_limit > 0) {
    const rlimit limit{static_cast<rlim_t>(o.memory_limit), static_cast<rlim_t>(o.memory_limit)};
    setrlimit(RLIMIT_AS, &limit);
  }
#endif
  if (o.timeout_s > 0) alarm(static_cast<unsigned>(o.timeout_s));
  const std::function<void(const std::string&)> on_stage = [fd](const std::string& s) {
    write_all(fd, "stage " + s + "\n");
  };
  std::string answer;
  try {
    answer = "result " + result_to_json(run_in_process(test, o, on_stage)).dump() + "\n";
  } catch (...) {
    answer = "result {\"status\":\"unsupported\",\"message\":\"the worker could not report its result\"}\n";
  }
  write_all(fd, answer);
  std::cout.flush();
  std::cerr.flush();
  _exit(0);  // no static destructors or atexit handlers of the parent's state
}

std::string signal_name(int sig) {
  const char* d = strsignal(sig);
  return "signal " + std::to_string(sig) + (d ? std::string(" (") + d + ")" : std::string());
}

TestResult run_forked(const TestCase& test, const RunOptions& o) {
  TestResult r;
  r.test = test;
  int fds[2];
  if (pipe(fds) != 0) {
    r.message = std::string("pipe() failed: ") + std::strerror(errno);
    return r;
  }
  std::cout.flush();
  std::cerr.flush();
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    r.message = std::string("fork() failed: ") + std::strerror(errno);
    return r;
  }
  if (pid == 0) {
    close(fds[0]);
    worker_main(test, o, fds[1]);
  }
  close(fds[1]);
  std::string text;
  char buf[4096];
  while (true) {
    const ssize_t n = read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  std::string last_stage = "start", result_line;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(pos, end - pos);
    if (line.rfind("stage ", 0) == 0) last_stage = line.substr(6);
    if (line.rfind("result ", 0) == 0) result_line = line.substr(7);
    pos = end + 1;
  }
  if (!result_line.empty()) {
    try {
      result_from_json(nlohmann::json::parse(result_line), r);
      r.seconds = seconds;
      return r;
    } catch (const std::exception& e) {
      r.message = std::string("unreadable worker answer: ") + e.what();
    }
  }
  r.status = Status::kCrash;
  r.stage = last_stage;
  r.seconds = seconds;
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    r.message = sig == SIGALRM ? "timed out after " + std::to_string(o.timeout_s) + " s"
                               : "the worker died of " + signal_name(sig);
  } else {
    r.message = "the worker exited with status " + std::to_string(WEXITSTATUS(status)) + " without a result";
  }
  r.message += " during stage " + quote(last_stage);
  return r;
}

}  // namespace

const char* to_string(Status status) {
  switch (status) {
    case Status::kPass:
      return "pass";
    case Status::kWrong:
      return "wrong";
    case Status::kUnsupported:
      return "unsupported";
    case Status::kExcluded:
      return "excluded";
    case Status::kCrash:
      return "crash";
  }
  return "?";
}

std::string default_data_dir() {
  if (const char* env = std::getenv("ONNX_TEST_DATA"); env && *env) return env;
  return "/usr/include/onnx/backend/test/data";
}

std::vector<TestCase> discover_tests(const std::string& data_dir, const std::vector<std::string>& folders,
                                     const std::string& filter) {
  std::regex re;
  try {
    if (!filter.empty()) re = std::regex(filter, std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    throw cli::UsageError("--filter " + quote(filter) + " is not a valid regular expression: " + e.what());
  }
  std::vector<TestCase> all;
  for (const auto& folder : folders) {
    for (const auto& dir : sorted_subdirs((fs::path(data_dir) / folder).string(), "test_")) {
      TestCase t;
      t.folder = folder;
      t.name = fs::path(dir).filename().string();
      t.dir = dir;
      std::error_code ec;
      if (!fs::is_regular_file(fs::path(dir) / "model.onnx", ec)) continue;
      all.push_back(std::move(t));
    }
  }
  // Op names for node/ tests come from every node/ model (the filter must not change them).
  std::map<std::string, std::string> known;
  for (auto& t : all) {
    if (t.folder != "node") continue;
    inspect_model(t);
    for (const auto& op : t.model_ops) known.emplace(normalized(op), op);
  }
  for (const auto& [alias, op] : kNameAliases) known[alias] = op;
  std::vector<TestCase> selected;
  for (auto& t : all) {
    if (!filter.empty() && !std::regex_search(t.id(), re)) continue;
    if (t.folder != "node") inspect_model(t);
    t.ops = t.folder == "node" ? node_test_ops(t, known) : t.model_ops;
    selected.push_back(std::move(t));
  }
  std::sort(selected.begin(), selected.end(), [](const TestCase& a, const TestCase& b) { return a.id() < b.id(); });
  return selected;
}

TestResult run_test(const TestCase& test, const RunOptions& options) {
  TestResult r;
  r.test = test;
  if (!test.model_error.empty()) {
    r.status = Status::kUnsupported;
    r.stage = "model";
    r.message = test.model_error;
    return r;
  }
  if (!test.excluded.empty()) {
    r.status = Status::kExcluded;
    r.stage = "model";
    r.message = test.excluded;
    return r;
  }
  try {
    return options.isolate ? run_forked(test, options) : run_in_process(test, options, nullptr);
  } catch (const std::exception& e) {
    r.status = Status::kUnsupported;
    r.message = std::string("runner failure: ") + e.what();
    return r;
  }
}

}  // namespace kiln::conformance
