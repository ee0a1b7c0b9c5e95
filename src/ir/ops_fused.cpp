// The FusedElementWise layer: its schema (shape inference checks the program and the input
// shapes) and the program parser and writers declared in ops_fused.h.
#include "src/ir/ops_fused.h"

#include <charconv>
#include <sstream>

#include "kiln/error.h"
#include "src/ir/op_params.h"
#include "src/ir/op_schema.h"
#include "src/core/text.h"

namespace kiln {
namespace {

std::vector<std::string> split_words(const std::string& line) {
  std::vector<std::string> words;
  std::istringstream in(line);
  std::string w;
  while (in >> w) words.push_back(w);
  return words;
}

// Parses a line of the program; `fail` throws with the line quoted.
class LineParser {
 public:
  LineParser(const std::string& where, const std::string& line, int index, int num_defined)
      : where_(where), line_(line), index_(index), num_defined_(num_defined), words_(split_words(line)) {}

  [[noreturn]] void fail(const std::string& why) const {
    throw Error(where_ + ": program instruction " + std::to_string(index_) + " " + quote(line_) + ": " + why +
                " (the FusedElementWise program format is documented in src/ir/ops_fused.h)");
  }
  size_t size() const { return words_.size(); }
  const std::string& word(size_t i) const { return words_.at(i); }
  void expect_words(size_t n) const {
    if (words_.size() != n) fail("expected " + std::to_string(n) + " words, got " + std::to_string(words_.size()));
  }
  int reg(size_t i) const {
    const std::string& w = words_.at(i);
    int value = -1;
    if (w.size() < 2 || w[0] != 'r') fail("" + quote(w) + " is not a register (r<index>)");
    const auto [ptr, ec] = std::from_chars(w.data() + 1, w.data() + w.size(), value);
    if (ec != std::errc() || ptr != w.data() + w.size() || value < 0)
      fail("" + quote(w) + " is not a register (r<index>)");
    if (value >= num_defined_) fail("register " + w + " is used before it is defined");
    return value;
  }
  double number(size_t i) const {
    const std::string& w = words_.at(i);
    double value = 0.0;
    const auto [ptr, ec] = std::from_chars(w.data(), w.data() + w.size(), value);
    if (ec != std::errc() || ptr != w.data() + w.size()) fail("" + quote(w) + " is not a number");
    return value;
  }
  template <typename Fn>
  auto parse_name(size_t i, Fn parse) const {
    try {
      return parse(words_.at(i));
    } catch (const Error& e) {
      fail(e.what());
    }
  }

 private:
  const std::string& where_;
  const std::string& line_;
  int index_;
  int num_defined_;
  std::vector<std::string> words_;
};

void infer_fused(ShapeContext& ctx) {
  const int n = ctx.num_inputs();
  ctx.check(n >= 1, "needs at least one input");
  Dims out;
  for (int i = 0; i < n; ++i) {
    ctx.check(ctx.has_input(i), "input " + std::to_string(i) + " is missing");
    ctx.check(ctx.input_type(i) == DataType::kFloat32 || ctx.input_type(i) == DataType::kFloat16,
              "input " + std::to_string(i) + " is " + to_string(ctx.input_type(i)) +
                  "; only float32 and float16 are supported");
    ctx.check(ctx.input_type(i) == ctx.input_type(0), "input " + std::to_string(i) + " is " +
                                                          to_string(ctx.input_type(i)) + ", input 0 is " +
                                                          to_string(ctx.input_type(0)) + "; all inputs need one type");
    out = i == 0 ? ctx.input_dims(0) : broadcast_dims(ctx, out, ctx.input_dims(i));
  }
  for (int i = 0; i < n; ++i) {
    const Dims& d = ctx.input_dims(i);
    ctx.check(d == out || d.volume() == 1, "input " + std::to_string(i) + " has dims " + d.to_string() +
                                               "; every input must have the output dims " + out.to_string() +
                                               " or a single element");
  }
  const FusedProgram& program = params_of<FusedProgram>(ctx.layer());  // parsed and checked there
  ctx.check(program.num_inputs == n, "the program was parsed for " + std::to_string(program.num_inputs) +
                                         " inputs but the layer has " + std::to_string(n));
  ctx.set_output(0, ctx.input_type(0), out);  // computed in float32 registers, stored in the input type
}

KILN_REGISTER_OP(OpSchema{
    kLayerFusedElementWise,
    1,
    -1,
    1,
    {AttrSpec{"program", AttrType::kStrings, std::vector<std::string>{}, true,
              "one instruction per string, register form; see src/ir/ops_fused.h"}},
    {},
    infer_fused,
    "A chain of element-wise layers fused by the element-wise fusion pass, computed per element in "
    "float32 by a small register program (attribute `program`, format in src/ir/ops_fused.h). Inputs are "
    "shaped like the output or hold one element."}
                     .with_params<FusedProgram>()
                     .with_traits({.channels_last = true}));

}  // namespace

bool fused_unary_supported(UnaryOp op) { return op != UnaryOp::kNot && op != UnaryOp::kIsNaN && op != UnaryOp::kIsInf; }

bool fused_binary_supported(ElementWiseOp op) {
  switch (op) {
    case ElementWiseOp::kSum:
    case ElementWiseOp::kSub:
    case ElementWiseOp::kProd:
    case ElementWiseOp::kDiv:
    case ElementWiseOp::kPow:
    case ElementWiseOp::kMax:
    case ElementWiseOp::kMin:
      return true;
    default:
      return false;
  }
}

FusedProgram FusedProgram::decode(const Layer& layer) {
  const ParamReader r(layer);
  return parse_fused_program(r.get_strings("program"), layer.num_inputs(),
                             "layer " + quote(layer.name()) + " (" + kLayerFusedElementWise + ")");
}

FusedProgram parse_fused_program(const std::vector<std::string>& text, int num_inputs, const std::string& where) {
  FusedProgram program;
  program.num_inputs = num_inputs;
  if (text.empty()) throw Error(where + ": the program is empty; it needs at least one instruction");
  for (size_t k = 0; k < text.size(); ++k) {
    LineParser p(where, text[k], static_cast<int>(k), num_inputs + static_cast<int>(k));
    if (p.size() == 0) p.fail("empty instruction");
    FusedInstr ins;
    const std::string& opcode = p.word(0);
    if (opcode == "const") {
      p.expect_words(2);
      ins.code = FusedOpCode::kConst;
      ins.p0 = p.number(1);
    } else if (opcode == "act") {
      p.expect_words(5);
      ins.code = FusedOpCode::kActivation;
      ins.op = static_cast<int32_t>(p.parse_name(1, [](const std::string& s) { return parse_activation_type(s); }));
      ins.a = p.reg(2);
      ins.p0 = p.number(3);
      ins.p1 = p.number(4);
    } else if (opcode == "unary") {
      p.expect_words(3);
      ins.code = FusedOpCode::kUnary;
      const UnaryOp op = p.parse_name(1, [](const std::string& s) { return parse_unary_op(s); });
      if (!fused_unary_supported(op)) p.fail("unary op " + quote(p.word(1)) + " does not produce a float");
      ins.op = static_cast<int32_t>(op);
      ins.a = p.reg(2);
    } else if (opcode == "binary") {
      p.expect_words(4);
      ins.code = FusedOpCode::kBinary;
      const ElementWiseOp op = p.parse_name(1, [](const std::string& s) { return parse_elementwise_op(s); });
      if (!fused_binary_supported(op)) p.fail("element-wise op " + quote(p.word(1)) + " is not supported in programs");
      ins.op = static_cast<int32_t>(op);
      ins.a = p.reg(2);
      ins.b = p.reg(3);
    } else if (opcode == "scale") {
      p.expect_words(5);
      ins.code = FusedOpCode::kScale;
      ins.a = p.reg(1);
      ins.p0 = p.number(2);
      ins.p1 = p.number(3);
      ins.p2 = p.number(4);
    } else {
      p.fail("unknown instruction " + quote(opcode) + " (expected const, act, unary, binary or scale)");
    }
    program.instrs.push_back(ins);
  }
  return program;
}

std::string fused_number(double value) {
  char buf[64];
  const auto [ptr, ec] = std::to_chars(buf, buf + sizeof(buf), value);
  if (ec != std::errc()) throw Error("fused program: cannot format a number");
  return std::string(buf, ptr);
}

static std::string reg_name(int r) { return "r" + std::to_string(r); }

std::string fused_const(double value) { return "const " + fused_number(value); }

std::string fused_activation(ActivationType kind, int x, double alpha, double beta) {
  return std::string("act ") + to_string(kind) + " " + reg_name(x) + " " + fused_number(alpha) + " " +
         fused_number(beta);
}

std::string fused_unary(UnaryOp op, int x) { return std::string("unary ") + to_string(op) + " " + reg_name(x); }

std::string fused_binary(ElementWiseOp op, int a, int b) {
  return std::string("binary ") + to_string(op) + " " + reg_name(a) + " " + reg_name(b);
}

std::string fused_scale(int x, double scale, double shift, double power) {
  return "scale " + reg_name(x) + " " + fused_number(scale) + " " + fused_number(shift) + " " + fused_number(power);
}

}  // namespace kiln
