// Fuzz target: the ONNX import + CPU build of onnx_import (onnx_import_body.h), with a
// structure-aware mutator. LLVMFuzzerCustomMutator parses the input as an onnx ModelProto and
// applies one to four structural edits (dims of inputs/outputs/value_info set to 0, -1, huge or
// symbolic; attribute values, types and names changed; op types swapped from onnx.dict's list;
// nodes duplicated, deleted or reordered; node inputs and outputs rewired to other tensors;
// initializer dims, data types, payloads and external-data entries changed; graph inputs and
// outputs added or removed; opsets and IR versions changed), then re-serializes. Inputs that do
// not parse as a model with a graph go to libFuzzer's byte mutator (LLVMFuzzerMutate), as do a
// few that do, so both kinds of damage are tried. Everything is drawn from the `seed` argument:
// the same input and seed give the same mutant. LLVMFuzzerCustomCrossOver splices nodes,
// initializers and value infos of a second model into the first.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "onnx/onnx_proto.h"
#include "onnx_import_body.h"

extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return kiln_fuzz::import_and_build(data, size);
}

namespace {

#include "onnx_names.inc"

using Rng = std::mt19937_64;

size_t below(Rng& rng, size_t n) { return n ? static_cast<size_t>(rng() % n) : 0; }
bool chance(Rng& rng, unsigned one_in) { return below(rng, one_in) == 0; }

template <typename T, size_t N>
const T& pick(Rng& rng, const T (&items)[N]) {
  return items[below(rng, N)];
}

int64_t interesting_int(Rng& rng) {
  static const int64_t kValues[] = {0,
                                    1,
                                    -1,
                                    2,
                                    3,
                                    4,
                                    -2,
                                    7,
                                    8,
                                    16,
                                    255,
                                    256,
                                    65535,
                                    65536,
                                    (int64_t{1} << 31) - 1,
                                    int64_t{1} << 31,
                                    -(int64_t{1} << 31),
                                    int64_t{1} << 32,
                                    int64_t{1} << 40,
                                    int64_t{1} << 62,
                                    std::numeric_limits<int64_t>::max(),
                                    std::numeric_limits<int64_t>::min(),
                                    std::numeric_limits<int64_t>::min() + 1,
                                    std::numeric_limits<int64_t>::max() - 1};
  if (chance(rng, 3)) return static_cast<int64_t>(below(rng, 17)) - 8;
  return pick(rng, kValues);
}

float interesting_float(Rng& rng) {
  static const float kValues[] = {0.0f,
                                  -0.0f,
                                  1.0f,
                                  -1.0f,
                                  0.5f,
                                  2.0f,
                                  1e-7f,
                                  1e30f,
                                  -1e30f,
                                  std::numeric_limits<float>::max(),
                                  std::numeric_limits<float>::lowest(),
                                  std::numeric_limits<float>::denorm_min(),
                                  std::numeric_limits<float>::infinity(),
                                  -std::numeric_limits<float>::infinity(),
                                  std::numeric_limits<float>::quiet_NaN(),
                                  2147483648.0f,
                                  9.3e18f};
  return pick(rng, kValues);
}

std::string interesting_string(Rng& rng) {
  static const char* const kStrings[] = {"",         "NOTSET",     "SAME_UPPER",    "SAME_LOWER", "VALID",
                                         "constant", "reflect",    "edge",          "linear",     "nearest",
                                         "cubic",    "half_pixel", "asymmetric",    "tanh",       "Sigmoid",
                                         "forward",  "reverse",    "bidirectional", "ij,jk->ik",  "...ii->...i",
                                         "a\nb",     "DCR",        "CRD",           "none",       "mean"};
  switch (below(rng, 4)) {
    case 0:
      return pick(rng, kOpNames);
    case 1:
      return pick(rng, kAttrNames);
    default:
      return pick(rng, kStrings);
  }
}

// ---- collecting the parts of a model ---------------------------------------------------------

void collect_graphs(onnx::GraphProto* g, std::vector<onnx::GraphProto*>& out, int depth) {
  out.push_back(g);
  if (depth > 4) return;
  for (auto& node : *g->mutable_node())
    for (auto& attr : *node.mutable_attribute()) {
      if (attr.has_g()) collect_graphs(attr.mutable_g(), out, depth + 1);
      for (auto& sub : *attr.mutable_graphs()) collect_graphs(&sub, out, depth + 1);
    }
}

// A graph of the model: the main graph more often than subgraphs.
onnx::GraphProto* pick_graph(onnx::ModelProto& model, Rng& rng) {
  std::vector<onnx::GraphProto*> graphs;
  collect_graphs(model.mutable_graph(), graphs, 0);
  if (graphs.size() == 1 || chance(rng, 2)) return graphs[0];
  return graphs[below(rng, graphs.size())];
}

std::vector<std::string> tensor_names(const onnx::GraphProto& g) {
  std::vector<std::string> names;
  for (const auto& v : g.input()) names.push_back(v.name());
  for (const auto& t : g.initializer()) names.push_back(t.name());
  for (const auto& n : g.node())
    for (const auto& o : n.output()) names.push_back(o);
  return names;
}

std::string some_tensor_name(const onnx::GraphProto& g, Rng& rng) {
  const std::vector<std::string> names = tensor_names(g);
  if (names.empty() || chance(rng, 8)) {
    static const char* const kOther[] = {"", "fuzz_new", "fuzz_new2", "x\n:y"};
    return pick(rng, kOther);
  }
  return names[below(rng, names.size())];
}

std::vector<onnx::ValueInfoProto*> value_infos(onnx::GraphProto& g) {
  std::vector<onnx::ValueInfoProto*> out;
  for (auto& v : *g.mutable_input()) out.push_back(&v);
  for (auto& v : *g.mutable_output()) out.push_back(&v);
  for (auto& v : *g.mutable_value_info()) out.push_back(&v);
  return out;
}

// Initializers and the tensors of Constant nodes' attributes.
std::vector<onnx::TensorProto*> tensors(onnx::GraphProto& g) {
  std::vector<onnx::TensorProto*> out;
  for (auto& t : *g.mutable_initializer()) out.push_back(&t);
  for (auto& n : *g.mutable_node())
    for (auto& a : *n.mutable_attribute()) {
      if (a.has_t()) out.push_back(a.mutable_t());
      for (auto& t : *a.mutable_tensors()) out.push_back(&t);
    }
  return out;
}

template <typename Repeated>
void delete_at(Repeated* r, int i) {
  r->DeleteSubrange(i, 1);
}

// Moves the last element of `r` to position `to`.
template <typename Repeated>
void move_last_to(Repeated* r, int to) {
  for (int i = r->size() - 1; i > to; --i) r->SwapElements(i, i - 1);
}

void mutate_int_list(google::protobuf::RepeatedField<int64_t>* list, Rng& rng) {
  switch (below(rng, 5)) {
    case 0:
      list->Add(interesting_int(rng));
      break;
    case 1:
      if (!list->empty()) list->RemoveLast();
      break;
    case 2:
      list->Clear();
      break;
    case 3: {
      list->Clear();
      const size_t n = below(rng, 9);
      for (size_t i = 0; i < n; ++i) list->Add(interesting_int(rng));
      break;
    }
    default:
      if (list->empty())
        list->Add(interesting_int(rng));
      else
        list->Set(static_cast<int>(below(rng, list->size())), interesting_int(rng));
  }
}

// ---- the mutations ---------------------------------------------------------------------------

bool mutate_dim(onnx::ModelProto& model, Rng& rng) {
  onnx::GraphProto* g = pick_graph(model, rng);
  std::vector<onnx::ValueInfoProto*> infos = value_infos(*g);
  if (infos.empty()) return false;
  onnx::ValueInfoProto* v = infos[below(rng, infos.size())];
  onnx::TypeProto_Tensor* tt = v->mutable_type()->mutable_tensor_type();
  onnx::TensorShapeProto* shape = tt->mutable_shape();
  switch (below(rng, 8)) {
    case 0:
      tt->set_elem_type(static_cast<int32_t>(below(rng, 26)) - (chance(rng, 8) ? 30 : 0));
      return true;
    case 1:
      shape->add_dim()->set_dim_value(interesting_int(rng));
      return true;
    case 2:
      if (shape->dim_size() == 0) return false;
      delete_at(shape->mutable_dim(), static_cast<int>(below(rng, shape->dim_size())));
      return true;
    case 3:
      tt->clear_shape();
      return true;
    case 4: {
      if (shape->dim_size() == 0) return false;
      static const char* const kParams[] = {"N", "batch", "", "M", "?"};
      shape->mutable_dim(static_cast<int>(below(rng, shape->dim_size())))->set_dim_param(pick(rng, kParams));
      return true;
    }
    case 5: {
      if (shape->dim_size() == 0) return false;
      shape->mutable_dim(static_cast<int>(below(rng, shape->dim_size())))->clear_value();
      return true;
    }
    default: {
      if (shape->dim_size() == 0) return false;
      shape->mutable_dim(static_cast<int>(below(rng, shape->dim_size())))->set_dim_value(interesting_int(rng));
      return true;
    }
  }
}

void random_attribute_value(onnx::AttributeProto* a, Rng& rng) {
  static const onnx::AttributeProto_AttributeType kTypes[] = {
      onnx::AttributeProto::FLOAT,  onnx::AttributeProto::INT,     onnx::AttributeProto::STRING,
      onnx::AttributeProto::TENSOR, onnx::AttributeProto::GRAPH,   onnx::AttributeProto::FLOATS,
      onnx::AttributeProto::INTS,   onnx::AttributeProto::STRINGS, onnx::AttributeProto::UNDEFINED};
  a->set_type(pick(rng, kTypes));
  switch (a->type()) {
    case onnx::AttributeProto::FLOAT:
      a->set_f(interesting_float(rng));
      break;
    case onnx::AttributeProto::INT:
      a->set_i(interesting_int(rng));
      break;
    case onnx::AttributeProto::STRING:
      a->set_s(interesting_string(rng));
      break;
    case onnx::AttributeProto::TENSOR: {
      onnx::TensorProto* t = a->mutable_t();
      t->set_data_type(static_cast<int32_t>(below(rng, 17)));
      const size_t n = below(rng, 4);
      for (size_t i = 0; i < n; ++i) t->add_dims(interesting_int(rng));
      for (size_t i = 0; i < below(rng, 5); ++i) t->add_int64_data(interesting_int(rng));
      break;
    }
    case onnx::AttributeProto::GRAPH:
      a->mutable_g()->set_name("fuzz_sub");
      break;
    case onnx::AttributeProto::FLOATS:
      for (size_t i = 0; i < below(rng, 6); ++i) a->add_floats(interesting_float(rng));
      break;
    case onnx::AttributeProto::INTS:
      for (size_t i = 0; i < below(rng, 6); ++i) a->add_ints(interesting_int(rng));
      break;
    case onnx::AttributeProto::STRINGS:
      for (size_t i = 0; i < below(rng, 4); ++i) a->add_strings(interesting_string(rng));
      break;
    default:
      break;
  }
}

bool mutate_tensor(onnx::TensorProto* t, Rng& rng);

bool mutate_attribute(onnx::ModelProto& model, Rng& rng) {
  onnx::GraphProto* g = pick_graph(model, rng);
  if (g->node_size() == 0) return false;
  onnx::NodeProto* node = g->mutable_node(static_cast<int>(below(rng, g->node_size())));
  if (node->attribute_size() == 0 || chance(rng, 6)) {  // a new attribute
    onnx::AttributeProto* a = node->add_attribute();
    a->set_name(pick(rng, kAttrNames));
    random_attribute_value(a, rng);
    return true;
  }
  const int index = static_cast<int>(below(rng, node->attribute_size()));
  onnx::AttributeProto* a = node->mutable_attribute(index);
  switch (below(rng, 12)) {
    case 0:
      delete_at(node->mutable_attribute(), index);
      return true;
    case 1:
      *node->add_attribute() = *a;
      return true;  // duplicated
    case 2:
      a->set_name(pick(rng, kAttrNames));
      return true;
    case 3: {  // another type, same payload
      static const onnx::AttributeProto_AttributeType kTypes[] = {
          onnx::AttributeProto::UNDEFINED, onnx::AttributeProto::FLOAT,  onnx::AttributeProto::INT,
          onnx::AttributeProto::STRING,    onnx::AttributeProto::TENSOR, onnx::AttributeProto::GRAPH,
          onnx::AttributeProto::FLOATS,    onnx::AttributeProto::INTS,   onnx::AttributeProto::STRINGS,
          onnx::AttributeProto::TENSORS,   onnx::AttributeProto::GRAPHS, onnx::AttributeProto::SPARSE_TENSOR};
      a->set_type(pick(rng, kTypes));
      return true;
    }
    case 4: {  // a fresh value of a random type
      const std::string name = a->name();
      a->Clear();
      a->set_name(name);
      random_attribute_value(a, rng);
      return true;
    }
    case 5:
      a->set_s(interesting_string(rng));
      return true;
    case 6:
      a->set_f(interesting_float(rng));
      return true;
    case 7:
      if (a->floats_size() == 0)
        a->add_floats(interesting_float(rng));
      else
        a->set_floats(static_cast<int>(below(rng, a->floats_size())), interesting_float(rng));
      return true;
    case 8:
      mutate_int_list(a->mutable_ints(), rng);
      return true;
    case 9:
      if (a->has_t()) return mutate_tensor(a->mutable_t(), rng);
      mutate_int_list(a->mutable_ints(), rng);
      return true;
    default:
      // The value the attribute's type says, changed.
      switch (a->type()) {
        case onnx::AttributeProto::INTS:
          mutate_int_list(a->mutable_ints(), rng);
          break;
        case onnx::AttributeProto::FLOAT:
          a->set_f(interesting_float(rng));
          break;
        case onnx::AttributeProto::STRING:
          a->set_s(interesting_string(rng));
          break;
        case onnx::AttributeProto::TENSOR:
          return mutate_tensor(a->mutable_t(), rng);
        default:
          a->set_i(interesting_int(rng));
      }
      return true;
  }
}

bool mutate_op_type(onnx::ModelProto& model, Rng& rng) {
  onnx::GraphProto* g = pick_graph(model, rng);
  if (g->node_size() == 0) return false;
  onnx::NodeProto* node = g->mutable_node(static_cast<int>(below(rng, g->node_size())));
  if (chance(rng, 10)) {
    static const char* const kDomains[] = {"", "ai.onnx", "ai.onnx.ml", "com.microsoft", "kiln", "trt"};
    node->set_domain(pick(rng, kDomains));
  } else {
    node->set_op_type(pick(rng, kOpNames));
  }
  return true;
}

bool mutate_nodes(onnx::ModelProto& model, Rng& rng) {
  onnx::GraphProto* g = pick_graph(model, rng);
  const int n = g->node_size();
  if (n == 0) return false;
  const int i = static_cast<int>(below(rng, n)), j = static_cast<int>(below(rng, n));
  switch (below(rng, 5)) {
    case 0: {  // duplicated, placed anywhere
      *g->add_node() = g->node(i);
      move_last_to(g->mutable_node(), static_cast<int>(below(rng, n + 1)));
      return true;
    }
    case 1:
      delete_at(g->mutable_node(), i);
      return true;
    case 2:
      g->mutable_node()->SwapElements(i, j);
      return true;
    case 3: {  // a duplicate whose outputs are renamed (a second consumer chain)
      onnx::NodeProto* copy = g->add_node();
      *copy = g->node(i);
      for (auto& o : *copy->mutable_output()) o += "_dup";
      return true;
    }
    default:
      std::reverse(g->mutable_node()->begin(), g->mutable_node()->end());
      return true;
  }
}

bool rewire(onnx::ModelProto& model, Rng& rng) {
  onnx::GraphProto* g = pick_graph(model, rng);
  if (g->node_size() == 0) return false;
  onnx::NodeProto* node = g->mutable_node(static_cast<int>(below(rng, g->node_size())));
  switch (below(rng, 6)) {
    case 0:
      node->add_input(some_tensor_name(*g, rng));
      return true;
    case 1:
      if (node->input_size() == 0) return false;
      node->mutable_input()->RemoveLast();
      return true;
    case 2:
      node->add_output(chance(rng, 2) ? some_tensor_name(*g, rng) : "fuzz_out");
      return true;
    case 3:
      if (node->output_size() == 0) return false;
      node->set_output(static_cast<int>(below(rng, node->output_size())), some_tensor_name(*g, rng));
      return true;
    case 4:
      if (node->output_size() == 0) return false;
      node->mutable_output()->RemoveLast();
      return true;
    default:
      if (node->input_size() == 0) {
        node->add_input(some_tensor_name(*g, rng));
      } else {
        node->set_input(static_cast<int>(below(rng, node->input_size())), some_tensor_name(*g, rng));
      }
      return true;
  }
}

bool mutate_tensor(onnx::TensorProto* t, Rng& rng) {
  switch (below(rng, 12)) {
    case 0:
      if (t->dims_size() == 0)
        t->add_dims(interesting_int(rng));
      else
        t->set_dims(static_cast<int>(below(rng, t->dims_size())), interesting_int(rng));
      return true;
    case 1:
      t->add_dims(chance(rng, 2) ? 1 : interesting_int(rng));
      return true;
    case 2:
      if (t->dims_size() == 0) return false;
      t->mutable_dims()->RemoveLast();
      return true;
    case 3:
      t->set_data_type(static_cast<int32_t>(below(rng, 26)) - (chance(rng, 8) ? 30 : 0));
      return true;
    case 4: {  // raw_data cut short or grown
      std::string* raw = t->mutable_raw_data();
      if (!raw->empty() && chance(rng, 2))
        raw->resize(below(rng, raw->size()));
      else
        raw->append(below(rng, 16) + 1, static_cast<char>(below(rng, 256)));
      return true;
    }
    case 5: {  // raw_data bytes changed by libFuzzer's byte mutator
      std::string* raw = t->mutable_raw_data();
      if (raw->empty()) return false;
      std::vector<uint8_t> buf(raw->begin(), raw->end());
      const size_t max = buf.size() * 2 + 8;
      buf.resize(max);
      buf.resize(LLVMFuzzerMutate(buf.data(), raw->size(), max));
      raw->assign(buf.begin(), buf.end());
      return true;
    }
    case 6: {  // typed payload instead of (or beside) raw_data
      if (chance(rng, 2)) t->clear_raw_data();
      const size_t n = below(rng, 6);
      for (size_t i = 0; i < n; ++i) {
        switch (below(rng, 4)) {
          case 0:
            t->add_float_data(interesting_float(rng));
            break;
          case 1:
            t->add_int64_data(interesting_int(rng));
            break;
          case 2:
            t->add_int32_data(static_cast<int32_t>(interesting_int(rng)));
            break;
          default:
            t->add_double_data(static_cast<double>(interesting_float(rng)));
        }
      }
      return true;
    }
    case 7: {  // external data
      static const char* const kLocations[] = {"w.bin", "../w.bin", "/etc/passwd", "", "sub/../w.bin", "."};
      t->set_data_location(onnx::TensorProto::EXTERNAL);
      t->clear_external_data();
      auto* loc = t->add_external_data();
      loc->set_key("location");
      loc->set_value(pick(rng, kLocations));
      if (chance(rng, 2)) {
        auto* e = t->add_external_data();
        e->set_key(chance(rng, 2) ? "offset" : "length");
        e->set_value(std::to_string(interesting_int(rng)));
      }
      return true;
    }
    case 8:
      t->clear_dims();
      return true;
    case 9:
      t->add_string_data(interesting_string(rng));
      return true;
    case 10:
      t->set_data_location(onnx::TensorProto::DEFAULT);
      return true;
    default: {                               // dims no longer matching the payload's length: every dim times k
      const uint64_t k = below(rng, 3) + 1;  // wraps (unsigned) rather than overflow
      for (int i = 0; i < t->dims_size(); ++i)
        t->set_dims(i, static_cast<int64_t>(static_cast<uint64_t>(t->dims(i)) * k));
      return true;
    }
  }
}

bool mutate_initializer(onnx::ModelProto& model, Rng& rng) {
  onnx::GraphProto* g = pick_graph(model, rng);
  std::vector<onnx::TensorProto*> ts = tensors(*g);
  if (ts.empty()) return false;
  onnx::TensorProto* t = ts[below(rng, ts.size())];
  if (chance(rng, 12)) {
    t->set_name(some_tensor_name(*g, rng));  // shadows an input or a node's output
    return true;
  }
  return mutate_tensor(t, rng);
}

bool mutate_io(onnx::ModelProto& model, Rng& rng) {
  onnx::GraphProto* g = pick_graph(model, rng);
  switch (below(rng, 7)) {
    case 0: {  // a new input, a copy of another with a new (or an existing tensor's) name
      onnx::ValueInfoProto* v = g->add_input();
      if (g->input_size() > 1) *v = g->input(static_cast<int>(below(rng, g->input_size() - 1)));
      v->set_name(chance(rng, 2) ? some_tensor_name(*g, rng) : "fuzz_in");
      if (!v->has_type()) v->mutable_type()->mutable_tensor_type()->set_elem_type(1);
      return true;
    }
    case 1:
      if (g->input_size() == 0) return false;
      delete_at(g->mutable_input(), static_cast<int>(below(rng, g->input_size())));
      return true;
    case 2: {  // a new output naming any tensor (an intermediate, an input, nothing)
      onnx::ValueInfoProto* v = g->add_output();
      v->set_name(some_tensor_name(*g, rng));
      if (chance(rng, 2)) v->mutable_type()->mutable_tensor_type()->set_elem_type(static_cast<int32_t>(below(rng, 17)));
      return true;
    }
    case 3:
      if (g->output_size() == 0) return false;
      delete_at(g->mutable_output(), static_cast<int>(below(rng, g->output_size())));
      return true;
    case 4:
      if (g->output_size() == 0) return false;
      *g->add_output() = g->output(static_cast<int>(below(rng, g->output_size())));  // the same output twice
      return true;
    case 5:
      if (g->input_size() < 2) return false;
      g->mutable_input()->SwapElements(0, g->input_size() - 1);
      return true;
    default: {  // an existing output renamed to another tensor
      if (g->output_size() == 0) return false;
      g->mutable_output(static_cast<int>(below(rng, g->output_size())))->set_name(some_tensor_name(*g, rng));
      return true;
    }
  }
}

bool mutate_opset(onnx::ModelProto& model, Rng& rng) {
  static const int64_t kVersions[] = {1,
                                      5,
                                      6,
                                      7,
                                      9,
                                      10,
                                      11,
                                      12,
                                      13,
                                      14,
                                      15,
                                      16,
                                      17,
                                      18,
                                      19,
                                      20,
                                      21,
                                      22,
                                      23,
                                      99,
                                      0,
                                      -1,
                                      std::numeric_limits<int64_t>::max(),
                                      std::numeric_limits<int64_t>::min()};
  static const char* const kDomains[] = {"", "ai.onnx", "ai.onnx.ml", "com.microsoft", "kiln"};
  switch (below(rng, 6)) {
    case 0: {
      static const int64_t kIr[] = {0, -1, 1, 3, 4, 6, 7, 8, 9, 10, 11, 12, 99};
      model.set_ir_version(pick(rng, kIr));
      return true;
    }
    case 1: {
      auto* o = model.add_opset_import();
      o->set_domain(pick(rng, kDomains));
      o->set_version(pick(rng, kVersions));
      return true;
    }
    case 2:
      if (model.opset_import_size() == 0) return false;
      delete_at(model.mutable_opset_import(), static_cast<int>(below(rng, model.opset_import_size())));
      return true;
    case 3:
      if (model.opset_import_size() == 0) return false;
      model.mutable_opset_import(static_cast<int>(below(rng, model.opset_import_size())))
          ->set_domain(pick(rng, kDomains));
      return true;
    default:
      if (model.opset_import_size() == 0) model.add_opset_import()->set_version(13);
      model.mutable_opset_import(static_cast<int>(below(rng, model.opset_import_size())))
          ->set_version(pick(rng, kVersions));
      return true;
  }
}

bool mutate_once(onnx::ModelProto& model, Rng& rng) {
  // Weights: the node- and tensor-level edits are the richest.
  switch (below(rng, 20)) {
    case 0:
    case 1:
    case 2:
      return mutate_dim(model, rng);
    case 3:
    case 4:
    case 5:
    case 6:
      return mutate_attribute(model, rng);
    case 7:
    case 8:
      return mutate_op_type(model, rng);
    case 9:
    case 10:
      return mutate_nodes(model, rng);
    case 11:
    case 12:
    case 13:
      return rewire(model, rng);
    case 14:
    case 15:
    case 16:
      return mutate_initializer(model, rng);
    case 17:
    case 18:
      return mutate_io(model, rng);
    default:
      return mutate_opset(model, rng);
  }
}

bool parse_model(const uint8_t* data, size_t size, onnx::ModelProto& model) {
  return size > 0 && model.ParseFromArray(data, static_cast<int>(size)) && model.has_graph();
}

size_t write_model(const onnx::ModelProto& model, uint8_t* out, size_t max_size) {
  std::string bytes;
  if (!model.SerializeToString(&bytes) || bytes.size() > max_size || bytes.empty()) return 0;
  std::memcpy(out, bytes.data(), bytes.size());
  return bytes.size();
}

}  // namespace

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size, unsigned int seed) {
  Rng rng(seed);
  onnx::ModelProto model;
  if (!parse_model(data, size, model) || chance(rng, 10)) return LLVMFuzzerMutate(data, size, max_size);
  const size_t edits = 1 + below(rng, chance(rng, 4) ? 8 : 3);
  bool changed = false;
  for (size_t i = 0, tries = 0; i < edits && tries < 4 * edits; ++tries)
    if (mutate_once(model, rng)) {
      changed = true;
      ++i;
    }
  const size_t n = changed ? write_model(model, data, max_size) : 0;
  return n ? n : LLVMFuzzerMutate(data, size, max_size);
}

extern "C" size_t LLVMFuzzerCustomCrossOver(const uint8_t* data1, size_t size1, const uint8_t* data2, size_t size2,
                                            uint8_t* out, size_t max_out_size, unsigned int seed) {
  Rng rng(seed);
  onnx::ModelProto a, b;
  if (!parse_model(data1, size1, a) || !parse_model(data2, size2, b)) return 0;
  onnx::GraphProto* ga = a.mutable_graph();
  const onnx::GraphProto& gb = b.graph();
  // A run of b's nodes, inserted at a random place of a's, with the initializers and value infos
  // of b (names that clash stay: a model may then define a tensor twice).
  if (gb.node_size() > 0) {
    const int from = static_cast<int>(below(rng, gb.node_size()));
    const int count = 1 + static_cast<int>(below(rng, std::min(gb.node_size() - from, 4)));
    const int at = static_cast<int>(below(rng, ga->node_size() + 1));
    for (int k = 0; k < count; ++k) {
      *ga->add_node() = gb.node(from + k);
      move_last_to(ga->mutable_node(), at + k);
    }
  }
  if (chance(rng, 2))
    for (const auto& t : gb.initializer()) *ga->add_initializer() = t;
  if (chance(rng, 2))
    for (const auto& v : gb.input()) *ga->add_input() = v;
  if (chance(rng, 3))
    for (const auto& v : gb.output()) *ga->add_output() = v;
  if (chance(rng, 3)) *a.mutable_opset_import() = b.opset_import();
  return write_model(a, out, max_out_size);
}
