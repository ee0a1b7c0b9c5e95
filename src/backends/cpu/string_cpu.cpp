// CPU kernels on string tensors (DataType::kString, elements are StringRef): StringNormalizer
// (src/ir/ops_string.cpp), and the string halves of Cast and Identity (string_cpu.h), which the
// element-wise kernels call. Strings a kernel writes are copied into the execution context's
// StringArena (KernelContext::strings), which owns them until the next inference; the kernels run
// on one thread because that arena is not thread-safe.
#include "src/backends/cpu/string_cpu.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "kiln/error.h"
#include "src/backends/cpu/cpu_utils.h"
#include "src/backends/cpu/string_case.h"
#include "src/ir/op_params.h"
#include "src/ir/op_schema.h"
#include "src/ir/string_params.h"

namespace kiln::cpu {
namespace {

StringArena& arena_of(const KernelContext& ctx, const char* what) {
  if (!ctx.strings) {
    throw Error(std::string(what) +
                ": string tensors are supported on the CPU only (this kernel got no string storage)");
  }
  return *ctx.strings;
}

// ---- StringNormalizer --------------------------------------------------------------------------

class StringNormalizerCpu : public Kernel {
 public:
  explicit StringNormalizerCpu(const StringNormalizerParams& p)
      : change_(p.case_change == CaseChangeAction::kLower   ? CaseChange::kLower
                : p.case_change == CaseChangeAction::kUpper ? CaseChange::kUpper
                                                            : CaseChange::kNone),
        case_sensitive_(p.case_sensitive) {
    for (const std::string& w : p.stopwords) stopwords_.insert(key(w));
  }

  void execute(const KernelContext& ctx) override {
    StringArena& arena = arena_of(ctx, "StringNormalizer");
    const TensorView& x = ctx.inputs[0];
    const int64_t n = x.count();
    const auto* in = x.as<const StringRef>();
    auto* out = ctx.outputs[0].as<StringRef>();
    int64_t kept = 0;
    // Stopwords are matched on the input words; the case change applies to the words kept.
    for (int64_t i = 0; i < n; ++i) {
      const std::string_view word = in[i].view();
      if (!stopwords_.empty() && stopwords_.count(key(word))) continue;
      out[kept++] = change_ == CaseChange::kNone ? arena.add(word) : arena.add(change_case(word, change_));
    }
    if (kept == 0) out[kept++] = StringRef{};  // ONNX: nothing kept gives one empty string
    ctx.outputs[1].as<int64_t>()[0] = kept;
  }

 private:
  std::string key(std::string_view word) const {
    return case_sensitive_ ? std::string(word) : change_case(word, CaseChange::kFold);
  }

  CaseChange change_ = CaseChange::kNone;
  bool case_sensitive_ = false;
  std::set<std::string, std::less<>> stopwords_;
};

KILN_REGISTER_KERNEL(KernelEntry{
    DeviceType::kCPU, kLayerStringNormalizer, "reference", 0, nullptr, [](const Layer& layer) {
      return std::make_unique<StringNormalizerCpu>(params_of<StringNormalizerParams>(layer));
    }});

// ---- number <-> text -------------------------------------------------------------------------------

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\n' || s.front() == '\r'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\n' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

bool equals_ignoring_case(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char p, char q) {
           return std::tolower(static_cast<unsigned char>(p)) == std::tolower(static_cast<unsigned char>(q));
         });
}

// NaN, INF, +INF, -INF (any case) as F; nullopt-like false for other text.
template <typename F>
bool special_value(std::string_view s, F& v) {
  if (equals_ignoring_case(s, "nan") || equals_ignoring_case(s, "+nan") || equals_ignoring_case(s, "-nan")) {
    v = std::numeric_limits<F>::quiet_NaN();
    return true;
  }
  for (std::string_view inf : {"inf", "+inf", "infinity", "+infinity"}) {
    if (equals_ignoring_case(s, inf)) {
      v = std::numeric_limits<F>::infinity();
      return true;
    }
  }
  if (equals_ignoring_case(s, "-inf") || equals_ignoring_case(s, "-infinity")) {
    v = -std::numeric_limits<F>::infinity();
    return true;
  }
  return false;
}

// Locale-independent parsing (std::from_chars; strtod would follow LC_NUMERIC's decimal point).
template <typename F>
F parse_real(std::string_view text, const std::string& what) {
  const std::string_view s = trim(text);
  F v{};
  if (special_value(s, v)) return v;
  std::string_view digits = s;
  if (!digits.empty() && digits.front() == '+') digits.remove_prefix(1);  // from_chars takes no '+'
  const auto r = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  if (!digits.empty() && r.ptr == digits.data() + digits.size()) {
    if (r.ec == std::errc()) return v;
    if (r.ec == std::errc::result_out_of_range) {  // too large: +-inf; too small: +-0
      const std::string copy(s);
      return static_cast<F>(std::strtod(copy.c_str(), nullptr));
    }
  }
  throw Error(what + ": '" + std::string(text.substr(0, 64)) +
              "' is not a number (expected e.g. 3.14, -1e-5, 1000, NaN, INF, -INF)");
}

// numpy's str() of a float from its shortest round-trip digits in scientific form ("d.ddde+XX",
// as std::to_chars writes it): positional when 1e-4 <= |v| < 10^positional_digits (16 for
// float64, 6 for float32, 3 for float16, as numpy), with the digits padded by zeros and at
// least one decimal ("123456.0", "0.00012"), else the scientific form ("1e+07", "1.5e-05").
std::string numpy_style(const std::string& sci, double v, int positional_digits) {
  const double a = std::fabs(v);
  if (!(a == 0 || (a >= 1e-4 && a < std::pow(10.0, positional_digits)))) return sci;
  const size_t e_pos = sci.find('e');
  const bool negative = sci[0] == '-';
  std::string digits;
  for (size_t i = negative ? 1 : 0; i < e_pos; ++i) {
    if (sci[i] != '.') digits += sci[i];
  }
  const int exponent = std::atoi(sci.c_str() + e_pos + 1);
  std::string out = negative ? "-" : "";
  if (exponent < 0) {
    out += "0." + std::string(static_cast<size_t>(-exponent - 1), '0') + digits;
  } else if (static_cast<size_t>(exponent) + 1 >= digits.size()) {
    out += digits + std::string(static_cast<size_t>(exponent) + 1 - digits.size(), '0') + ".0";
  } else {
    out += digits.substr(0, static_cast<size_t>(exponent) + 1) + "." + digits.substr(static_cast<size_t>(exponent) + 1);
  }
  return out;
}

template <typename F>
std::string format_real(F v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "INF" : "-INF";
  char sci[64];
  const auto e = std::to_chars(sci, sci + sizeof sci, v, std::chars_format::scientific);
  return numpy_style(std::string(sci, e.ptr), static_cast<double>(v), std::is_same_v<F, float> ? 6 : 16);
}

template <typename T>
std::string number_text(T v) {
  if constexpr (std::is_same_v<T, bool>) {
    return v ? "True" : "False";
  } else if constexpr (std::is_same_v<T, half>) {
    return format_half(v.bits);
  } else if constexpr (std::is_floating_point_v<T>) {
    return format_real(v);
  } else {
    return std::to_string(v);
  }
}

template <typename T>
T text_number(std::string_view text, const std::string& what) {
  if constexpr (std::is_same_v<T, bool>) {
    const std::string_view s = trim(text);
    if (equals_ignoring_case(s, "true")) return true;
    if (equals_ignoring_case(s, "false")) return false;
    const double d = parse_real<double>(text, what);
    return d != 0;  // NaN -> true, as Cast from float
  } else if constexpr (std::is_same_v<T, half>) {
    return half(parse_real<float>(text, what));
  } else if constexpr (std::is_floating_point_v<T>) {
    return parse_real<T>(text, what);
  } else {
    // Integers exactly when the text is one; else through double, truncated toward zero
    // ("100.5" -> 100), NaN and out-of-range values giving the type's minimum (as Cast).
    std::string_view s = trim(text);
    if (!s.empty() && s.front() == '+') s.remove_prefix(1);
    int64_t i = 0;
    const auto r = std::from_chars(s.data(), s.data() + s.size(), i);
    if (!s.empty() && r.ec == std::errc() && r.ptr == s.data() + s.size()) return static_cast<T>(i);
    const double d = parse_real<double>(text, what);
    if (std::isnan(d) || d < -9.2e18 || d > 9.2e18) return std::numeric_limits<T>::min();
    return static_cast<T>(static_cast<int64_t>(d));
  }
}

template <typename T>
void cast_to_strings(const KernelContext& ctx, StringArena& arena) {
  const T* x = ctx.inputs[0].as<const T>();
  auto* y = ctx.outputs[0].as<StringRef>();
  const int64_t n = ctx.outputs[0].count();
  for (int64_t i = 0; i < n; ++i) y[i] = arena.add(number_text(x[i]));
}

template <typename T>
void cast_from_strings(const KernelContext& ctx) {
  const auto* x = ctx.inputs[0].as<const StringRef>();
  T* y = ctx.outputs[0].as<T>();
  const int64_t n = ctx.outputs[0].count();
  for (int64_t i = 0; i < n; ++i) y[i] = text_number<T>(x[i].view(), "Cast: string element " + std::to_string(i));
}

}  // namespace

std::string format_float(double value) { return format_real(value); }
std::string format_float(float value) { return format_real(value); }

std::string format_half(uint16_t bits) {
  const float v = half_bits_to_float(bits);
  if (std::isnan(v) || std::isinf(v)) return format_real(v);
  // The fewest significant digits that read back to the same half (5 always do).
  char sci[64];
  const char* sci_end = sci;
  for (int digits = 1; digits <= 5; ++digits) {
    sci_end = std::to_chars(sci, sci + sizeof sci, v, std::chars_format::scientific, digits - 1).ptr;
    float back = 0;
    std::from_chars(sci, sci_end, back);
    if (float_to_half_bits(back) == bits) break;
  }
  return numpy_style(std::string(static_cast<const char*>(sci), sci_end), static_cast<double>(v), 3);
}

double parse_double(std::string_view text, const std::string& what) { return parse_real<double>(text, what); }
float parse_float(std::string_view text, const std::string& what) { return parse_real<float>(text, what); }

void cast_with_strings(const KernelContext& ctx) {
  const DataType from = ctx.inputs[0].type, to = ctx.outputs[0].type;
  if (from == DataType::kString && to == DataType::kString) {
    copy_strings(ctx);
    return;
  }
  if (to == DataType::kString) {
    StringArena& arena = arena_of(ctx, "Cast");
    KILN_DISPATCH_NUMERIC_WIDE(from, "Cast to string", cast_to_strings<T>(ctx, arena));
    return;
  }
  KILN_DISPATCH_NUMERIC_WIDE(to, "Cast from string", cast_from_strings<T>(ctx));
}

void copy_strings(const KernelContext& ctx) {
  StringArena& arena = arena_of(ctx, "Identity");
  const auto* x = ctx.inputs[0].as<const StringRef>();
  auto* y = ctx.outputs[0].as<StringRef>();
  const int64_t n = ctx.outputs[0].count();
  // Copied (not just the StringRefs) so that outputs never point into the caller's input strings,
  // which the caller may free after the inference; in place (x == y) they are copied too.
  for (int64_t i = 0; i < n; ++i) y[i] = arena.add(x[i].view());
}

}  // namespace kiln::cpu
