// Shared helpers of the `kiln` subcommands (see common.h): shape-flag parsing and the profile
// built from it, input loading, output comparison and latency statistics. Messages name the
// flag, input or file at fault because they are what the user sees on the command line.
#include "common.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <numeric>
#include <ostream>
#include <set>
#include <sstream>

#include "backends/backend.h"
#include "core/file_io.h"
#include "core/tensor_io.h"
#include "core/text.h"
#include "kiln/error.h"
#include "kiln/onnx_parser.h"
#include "kiln/plugin.h"

namespace kiln::cli {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (true) {
    size_t pos = s.find(sep, start);
    parts.push_back(s.substr(start, pos == std::string_view::npos ? std::string_view::npos : pos - start));
    if (pos == std::string_view::npos) break;
    start = pos + 1;
  }
  return parts;
}

std::string input_list(const Network& network) {
  std::string out;
  for (int i = 0; i < network.num_inputs(); ++i) {
    const Tensor* t = network.input(i);
    if (!out.empty()) out += ", ";
    out += quote(t->name()) + " (" + t->dims().to_string() + ")";
  }
  return out.empty() ? "(none)" : out;
}

const Tensor* find_input(const Network& network, const std::string& name) {
  for (int i = 0; i < network.num_inputs(); ++i)
    if (network.input(i)->name() == name) return network.input(i);
  return nullptr;
}

// The input must exist and `dims` must have its rank and agree with its static extents.
void check_against_input(const Network& network, const std::string& name, const Dims& dims, const std::string& source) {
  const Tensor* input = find_input(network, name);
  if (!input)
    throw Error(source + " names " + quote(name) + ", which is not an input of the network; its inputs are " +
                input_list(network));
  const Dims& declared = input->dims();
  if (declared.rank() != dims.rank())
    throw Error(source + " gives input " + quote(name) + " the shape " + dims.to_string() + " of rank " +
                std::to_string(dims.rank()) + ", but the input has rank " + std::to_string(declared.rank()) + " (" +
                declared.to_string() + ")");
  for (int i = 0; i < dims.rank(); ++i) {
    if (declared[i] != kDynamic && declared[i] != dims[i])
      throw Error(source + " gives input " + quote(name) + " the shape " + dims.to_string() + ", but its dim " +
                  std::to_string(i) + " is fixed to " + std::to_string(declared[i]) + " (" + declared.to_string() +
                  ")");
  }
}

// "Nx3x320x320" for ?x3x320x320: a placeholder per dynamic dim, for the notice's hint.
std::string placeholder_dims(const Dims& dims) {
  std::string out;
  for (int i = 0; i < dims.rank(); ++i) {
    if (i) out += "x";
    if (dims[i] != kDynamic)
      out += std::to_string(dims[i]);
    else
      out += (i == 0) ? std::string("N") : "D" + std::to_string(i);
  }
  return out;
}

std::string quoted_join(const std::set<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "'" : ", '") + n + "'";
  return out;
}

}  // namespace

void add_threads_option(CLI::App& app, int& threads, const std::string& description) {
  const auto check = [](std::string& text) -> std::string {
    int value = -1;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec == std::errc() && end == text.data() + text.size() && value >= 0 && value <= kMaxThreads) return "";
    return quote(text) + " is not a whole number from 0 to " + std::to_string(kMaxThreads) +
           " (kiln's limit on CPU threads; 0: the default)";
  };
  app.add_option("--threads", threads, description)
      ->check(CLI::Validator(check, "0.." + std::to_string(kMaxThreads), "threads"))
      ->capture_default_str();
}

void add_byte_size_option(CLI::App& app, const std::string& flag, std::string& value, const std::string& description) {
  const auto check = [flag](std::string& text) -> std::string {
    try {
      (void)parse_byte_size(text, flag);
      return "";
    } catch (const Error& e) {
      // parse_byte_size names the flag itself; CLI11 adds it again.
      std::string message = e.what();
      if (message.rfind(flag + ": ", 0) == 0) message = message.substr(flag.size() + 2);
      return message;
    }
  };
  app.add_option(flag, value, description)->check(CLI::Validator(check, "BYTES", "byte size"))->type_name("BYTES");
}

void add_tolerance_option(CLI::App& app, const std::string& flag, double& value, const std::string& description) {
  const auto check = [](std::string& text) -> std::string {
    double v = -1.0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec == std::errc() && end == text.data() + text.size() && std::isfinite(v) && v >= 0) return "";
    return quote(text) + " is not a tolerance (a finite number >= 0, e.g. 1e-5)";
  };
  app.add_option(flag, value, description)->check(CLI::Validator(check, "TOL", "tolerance"))->capture_default_str();
}

HostTensor allocate_output(const std::string& name, DataType type, const Dims& dims) {
  try {
    return HostTensor(type, dims);
  } catch (const Error& e) {
    throw Error("output " + quote(name) + ": " + e.what());
  }
}

std::unique_ptr<Network> load_onnx_network(const std::string& path) {
  require_readable_file(path, "ONNX model");
  auto network = std::make_unique<Network>();
  OnnxParser parser(*network);
  parser.parse_file(path);
  return network;
}

void print_network_io(const Network& network, std::ostream& out) {
  for (int i = 0; i < network.num_inputs(); ++i)
    out << "  in   " << describe_tensor(network.input(i)->name(), network.input(i)->type(), network.input(i)->dims())
        << "\n";
  for (int i = 0; i < network.num_outputs(); ++i)
    out << "  out  " << network.output(i)->name() << ": " << to_string(network.output(i)->type()) << "\n";
}

Dims parse_shape_dims(std::string_view text, const std::string& context) {
  text = trim(text);
  if (text.empty()) throw UsageError(context + ": the dims are empty; write them like 1x3x224x224");
  auto parts = split(text, 'x');
  if (parts.size() > static_cast<size_t>(kMaxDims))
    throw UsageError(context + ": " + std::to_string(parts.size()) + " dims, more than kiln's limit of " +
                     std::to_string(kMaxDims));
  Dims dims;
  for (auto part : parts) {
    part = trim(part);
    int64_t value = 0;
    auto [ptr, ec] = std::from_chars(part.data(), part.data() + part.size(), value);
    if (part.empty() || ec != std::errc() || ptr != part.data() + part.size())
      throw UsageError(context + ": " + quote(std::string(part)) +
                       " is not a whole number; write dims like 1x3x224x224");
    if (value < 1) throw UsageError(context + ": every extent must be at least 1, got " + std::to_string(value));
    dims.push_back(value);
  }
  return dims;
}

std::map<std::string, Dims> parse_shape_list(const std::vector<std::string>& values, const std::string& flag) {
  std::map<std::string, Dims> result;
  for (const auto& value : values) {
    for (auto entry : split(value, ',')) {
      entry = trim(entry);
      const std::string context = flag + " entry " + quote(std::string(entry));
      if (entry.empty())
        throw UsageError(flag + ": empty entry in " + quote(value) + "; write NAME:DIMS[,NAME:DIMS...]");
      size_t colon = entry.rfind(':');
      if (colon == std::string_view::npos)
        throw UsageError(context + ": missing ':' between the input name and the dims; write e.g. images:1x3x224x224");
      std::string name(trim(entry.substr(0, colon)));
      if (name.empty()) throw UsageError(context + ": the input name before ':' is empty");
      Dims dims = parse_shape_dims(entry.substr(colon + 1), context);
      if (!result.emplace(name, dims).second)
        throw UsageError(flag + " gives input " + quote(name) + " more than once");
    }
  }
  return result;
}

namespace {

struct ParsedShapeFlags {
  std::map<std::string, Dims> shapes, mins, opts, maxs;
  std::set<std::string> ranged;  // inputs given by --min/--opt/--max-shapes
};

// Syntax and consistency of the flags alone (no network needed): UsageError on problems.
ParsedShapeFlags parse_shape_flags(const ShapeFlags& flags) {
  ParsedShapeFlags p;
  p.shapes = parse_shape_list(flags.shapes, "--shapes");
  p.mins = parse_shape_list(flags.min_shapes, "--min-shapes");
  p.opts = parse_shape_list(flags.opt_shapes, "--opt-shapes");
  p.maxs = parse_shape_list(flags.max_shapes, "--max-shapes");
  for (const auto* m : {&p.mins, &p.opts, &p.maxs})
    for (const auto& entry : *m) p.ranged.insert(entry.first);
  for (const auto& name : p.ranged) {
    std::string missing;
    if (!p.mins.count(name)) missing += " --min-shapes";
    if (!p.opts.count(name)) missing += " --opt-shapes";
    if (!p.maxs.count(name)) missing += " --max-shapes";
    if (!missing.empty())
      throw UsageError("input '" + name +
                       "': --min-shapes, --opt-shapes and --max-shapes must all be given for it; missing:" + missing);
    if (p.shapes.count(name))
      throw UsageError("input " + quote(name) +
                       " is given both --shapes and --min/--opt/--max-shapes; use one or the other");
    const Dims &lo = p.mins.at(name), &mid = p.opts.at(name), &hi = p.maxs.at(name);
    if (lo.rank() != mid.rank() || mid.rank() != hi.rank())
      throw UsageError("input " + quote(name) + ": --min-shapes " + lo.to_string() + ", --opt-shapes " +
                       mid.to_string() + " and --max-shapes " + hi.to_string() + " differ in rank");
    for (int i = 0; i < lo.rank(); ++i) {
      if (!(lo[i] <= mid[i] && mid[i] <= hi[i]))
        throw UsageError("input " + quote(name) + ": need min <= opt <= max in every dim, but dim " +
                         std::to_string(i) + " has min " + std::to_string(lo[i]) + ", opt " + std::to_string(mid[i]) +
                         ", max " + std::to_string(hi[i]));
    }
  }
  return p;
}

}  // namespace

void check_shape_flags(const ShapeFlags& flags) { parse_shape_flags(flags); }

OptimizationProfile make_profile(const Network& network, const ShapeFlags& flags, std::ostream& notices) {
  const ParsedShapeFlags parsed = parse_shape_flags(flags);
  const auto& shapes = parsed.shapes;
  const auto& mins = parsed.mins;
  const auto& opts = parsed.opts;
  const auto& maxs = parsed.maxs;
  const auto& ranged = parsed.ranged;
  for (const auto& [name, dims] : shapes) check_against_input(network, name, dims, "--shapes");
  for (const auto& name : ranged) {
    check_against_input(network, name, mins.at(name), "--min-shapes");
    check_against_input(network, name, opts.at(name), "--opt-shapes");
    check_against_input(network, name, maxs.at(name), "--max-shapes");
  }

  OptimizationProfile profile;
  for (int i = 0; i < network.num_inputs(); ++i) {
    const Tensor* input = network.input(i);
    const std::string& name = input->name();
    if (!input->dims().is_dynamic()) continue;  // fixed shape: nothing to choose
    if (auto it = shapes.find(name); it != shapes.end()) {
      profile.set_dimensions(name, it->second, it->second, it->second);
    } else if (ranged.count(name)) {
      profile.set_dimensions(name, mins.at(name), opts.at(name), maxs.at(name));
    } else {
      Dims chosen = input->dims();
      for (int d = 0; d < chosen.rank(); ++d)
        if (chosen[d] == kDynamic) chosen[d] = 1;
      notices << "notice: input '" << name << "' has dynamic dims " << input->dims().to_string() << "; using "
              << chosen.to_string() << " — pass --shapes " << name << ":" << placeholder_dims(input->dims())
              << " to choose\n";
      profile.set_dimensions(name, chosen, chosen, chosen);
    }
  }
  return profile;
}

OptimizationProfile profile_from_input_dims(const Network& network, const std::map<std::string, Dims>& dims,
                                            const std::string& source) {
  OptimizationProfile profile;
  for (const auto& [name, d] : dims) check_against_input(network, name, d, source);
  for (int i = 0; i < network.num_inputs(); ++i) {
    const Tensor* input = network.input(i);
    auto it = dims.find(input->name());
    if (it == dims.end()) throw Error(source + " gives no tensor for network input " + quote(input->name()));
    if (input->dims().is_dynamic()) profile.set_dimensions(input->name(), it->second, it->second, it->second);
  }
  return profile;
}

uint64_t parse_byte_size(std::string_view text, const std::string& flag) {
  std::string_view s = trim(text);
  uint64_t value = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (s.empty() || ec != std::errc() || ptr == s.data())
    throw UsageError(flag + ": " + quote(text) + " is not a size; write bytes like 1073741824, 512M or 2G");
  std::string unit(ptr, s.data() + s.size());
  for (auto& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  static const std::map<std::string, int> kShift = {{"", 0},     {"b", 0},   {"k", 10},   {"kb", 10}, {"kib", 10},
                                                    {"m", 20},   {"mb", 20}, {"mib", 20}, {"g", 30},  {"gb", 30},
                                                    {"gib", 30}, {"t", 40},  {"tb", 40},  {"tib", 40}};
  auto it = kShift.find(unit);
  if (it == kShift.end())
    throw UsageError(flag + ": unknown unit " + quote(unit) + " in " + quote(std::string(text)) +
                     "; use K, M, G or T (powers of 1024)");
  if (it->second && value > (UINT64_MAX >> it->second))
    throw UsageError(flag + ": " + quote(std::string(text)) + " is too large");
  return value << it->second;
}

std::string format_bytes(uint64_t bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  std::ostringstream out;
  out.setf(std::ios::fixed);
  out.precision(u == 0 ? 0 : 1);
  out << v << " " << kUnits[u];
  return out.str();
}

void require_readable_file(const std::string& path, const std::string& what) { (void)check_regular_file(path, what); }

void require_directory(const std::string& path, const std::string& what) {
  std::error_code ec;
  if (!std::filesystem::is_directory(path, ec))
    throw Error(what + " " + quote(path) + " " +
                (std::filesystem::exists(path, ec) ? "is not a directory" : "does not exist"));
}

void make_output_directory(const std::string& path, const std::string& flag) {
  namespace fs = std::filesystem;
  const std::string where = "cannot create " + flag + " folder " + quote(path) + ": ";
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (fs::is_directory(st)) return;
  if (fs::exists(st)) throw Error(where + "a file of that name exists and is not a folder");
  fs::create_directories(path, ec);
  if (!ec) return;
  const std::string reason = ec.message();
  // A file where a parent folder should be says more than the raw error ("Not a directory").
  fs::path prefix;
  for (const auto& part : fs::path(path)) {
    prefix /= part;
    const fs::file_status s = fs::status(prefix, ec);
    if (fs::exists(s) && !fs::is_directory(s)) throw Error(where + quote(prefix.string()) + " is a file, not a folder");
  }
  throw Error(where + reason);
}

std::vector<uint8_t> read_file_bytes(const std::string& path, const std::string& what, uint64_t max_bytes) {
  return read_whole_file(path, what, max_bytes);
}

void write_file_bytes(const std::string& path, const std::vector<uint8_t>& bytes, const std::string& what) {
  write_file_atomically(path, bytes.data(), bytes.size(), what);
}

std::vector<InputTensor> load_inputs(const std::vector<std::string>& input_names, const std::string& inputs_dir,
                                     const std::vector<std::string>& assignments) {
  namespace fs = std::filesystem;
  if (inputs_dir.empty() == assignments.empty())
    throw UsageError(
        "give the inputs either with --inputs-dir DIR or with --input NAME=FILE (one per input), not both or neither");
  auto load = [](const std::string& name, const std::string& file) {
    std::string ext = fs::path(file).extension().string();
    if (ext != ".npy" && ext != ".pb")
      throw Error("input " + quote(name) + ": file " + quote(file) + " is neither .npy nor .pb (ONNX TensorProto)");
    require_readable_file(file, "input file");
    return InputTensor{name, file, load_tensor_file(file)};
  };
  std::vector<InputTensor> result;
  if (!inputs_dir.empty()) {
    require_directory(inputs_dir, "inputs folder");
    for (size_t i = 0; i < input_names.size(); ++i) {
      const std::string& name = input_names[i];
      const std::vector<std::string> candidates = {
          (fs::path(inputs_dir) / ("input_" + std::to_string(i) + ".pb")).string(),
          (fs::path(inputs_dir) / ("input_" + std::to_string(i) + ".npy")).string(),
          (fs::path(inputs_dir) / (sanitize_file_name(name) + ".npy")).string()};
      auto found = std::find_if(candidates.begin(), candidates.end(), [](const std::string& c) {
        std::error_code ec;
        return fs::is_regular_file(c, ec);
      });
      if (found == candidates.end())
        throw Error("no file for input " + quote(name) + " (input #" + std::to_string(i) + ") in '" + inputs_dir +
                    "': expected input_" + std::to_string(i) + ".pb, input_" + std::to_string(i) + ".npy or " +
                    sanitize_file_name(name) + ".npy");
      // A file found by its conventional name must really be in the folder: a symbolic link
      // there that leads elsewhere is refused (the folder may come with a downloaded model).
      const std::string file =
          resolve_inside_folder(inputs_dir, fs::path(*found).filename().string(), "input file", "the inputs folder")
              .string();
      result.push_back(load(name, file));
    }
    return result;
  }
  std::map<std::string, std::string> files;
  for (const auto& a : assignments) {
    size_t eq = a.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == a.size())
      throw UsageError("--input " + quote(a) + ": write NAME=FILE, e.g. --input images=images.npy");
    std::string name = a.substr(0, eq);
    if (std::find(input_names.begin(), input_names.end(), name) == input_names.end()) {
      std::string known;
      for (const auto& n : input_names) known += (known.empty() ? "'" : ", '") + n + "'";
      throw Error("--input names " + quote(name) + ", which is not an input; the inputs are " + known);
    }
    if (!files.emplace(name, a.substr(eq + 1)).second)
      throw UsageError("--input gives " + quote(name) + " more than once");
  }
  std::set<std::string> missing;
  for (const auto& n : input_names)
    if (!files.count(n)) missing.insert(n);
  if (!missing.empty()) throw UsageError("no --input given for " + quoted_join(missing) + "; every input needs a file");
  for (const auto& n : input_names) result.push_back(load(n, files.at(n)));
  return result;
}

CompareResult compare_tensors(const std::string& name, const HostTensor& actual, const HostTensor& reference,
                              double rtol, double atol) {
  CompareResult r;
  r.name = name;
  r.count = reference.count();
  if (actual.dims() != reference.dims()) {
    r.shape_mismatch = true;
    r.note = "shape " + actual.dims().to_string() + " differs from the reference's " + reference.dims().to_string();
    return r;
  }
  if (actual.type() == DataType::kString || reference.type() == DataType::kString) {
    // Strings match exactly; the note shows the first difference.
    if (actual.type() != reference.type()) {
      r.note = std::string("type ") + to_string(actual.type()) + " differs from the reference's " +
               to_string(reference.type());
      return r;
    }
    for (int64_t i = 0; i < reference.count(); ++i) {
      if (actual.string_at(i) == reference.string_at(i)) continue;
      if (r.violations++ == 0) {
        r.note = "element " + std::to_string(i) + " is " + quote(std::string(actual.string_at(i))) +
                 ", the reference '" + std::string(reference.string_at(i)) + "'";
      }
    }
    r.pass = r.violations == 0;
    return r;
  }
  const std::vector<double> a = actual.to_double();
  const std::vector<double> b = reference.to_double();
  double scale = 1.0;
  for (double v : b)
    if (std::isfinite(v)) scale = std::max(scale, std::fabs(v));
  double rel_sum = 0.0;
  int64_t above = 0, nonfinite_mismatch = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    const double x = a[i], y = b[i];
    if (!std::isfinite(x) || !std::isfinite(y)) {
      const bool same = (std::isnan(x) && std::isnan(y)) || x == y;
      if (!same) {
        ++nonfinite_mismatch;
        ++r.violations;
        r.max_abs_err = std::numeric_limits<double>::infinity();
        r.max_rel_err = std::numeric_limits<double>::infinity();
      }
      continue;
    }
    const double abs_err = std::fabs(x - y);
    const double rel_err = abs_err / std::max(std::fabs(y), 1e-3);
    r.max_abs_err = std::max(r.max_abs_err, abs_err);
    r.max_rel_err = std::max(r.max_rel_err, rel_err);
    rel_sum += rel_err;
    if (rel_err > 1e-5) ++above;
    if (abs_err > rtol * std::fabs(y) + atol * scale) ++r.violations;
  }
  if (!b.empty()) {
    r.mean_rel_err = rel_sum / static_cast<double>(b.size());
    r.share_rel_above_1e5 = static_cast<double>(above) / static_cast<double>(b.size());
  }
  if (nonfinite_mismatch) r.note = std::to_string(nonfinite_mismatch) + " NaN/Inf element(s) differ from the reference";
  r.pass = r.violations == 0;
  return r;
}

LatencyStats compute_latency_stats(std::vector<double> samples_ms) {
  LatencyStats s;
  s.iterations = static_cast<int>(samples_ms.size());
  if (samples_ms.empty()) return s;
  std::sort(samples_ms.begin(), samples_ms.end());
  const size_t n = samples_ms.size();
  s.min_ms = samples_ms.front();
  s.max_ms = samples_ms.back();
  s.median_ms = (n % 2) ? samples_ms[n / 2] : 0.5 * (samples_ms[n / 2 - 1] + samples_ms[n / 2]);
  s.mean_ms = std::accumulate(samples_ms.begin(), samples_ms.end(), 0.0) / static_cast<double>(n);
  s.p99_ms = nearest_rank_percentile(samples_ms, 99.0);
  return s;
}

double nearest_rank_percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0.0;
  const size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(sorted.size())));
  return sorted[std::min(std::max<size_t>(rank, 1), sorted.size()) - 1];
}

std::string format_fixed(double value, int precision) {
  std::ostringstream s;
  s.setf(std::ios::fixed);
  s.precision(precision);
  s << value;
  return s.str();
}

DeviceIo::DeviceIo(Backend& b, size_t n) : backend(&b), bytes(n) {
  device = b.allocate(std::max<size_t>(n, 1));
  try {
    pinned = b.allocate_host(std::max<size_t>(n, 1));
  } catch (...) {
    b.release(device);
    throw;
  }
}

DeviceIo::~DeviceIo() {
  backend->release(device);
  backend->release_host(pinned);
}

std::shared_ptr<Engine> load_engine_file(const std::string& path, bool allow_embedded_plugins,
                                         bool allow_compiled_plans) {
  require_readable_file(path, "engine file");
  Runtime runtime;
  runtime.set_allow_embedded_plugins(allow_embedded_plugins);
  runtime.set_allow_compiled_plans(allow_compiled_plans);
  return runtime.deserialize_file(path);
}

std::vector<std::string> engine_input_names(const Engine& engine) {
  std::vector<std::string> names;
  for (const auto& info : engine.io_tensors())
    if (info.mode == TensorIOMode::kInput) names.push_back(info.name);
  return names;
}

std::string describe_tensor(const std::string& name, DataType type, const Dims& dims) {
  return name + ": " + to_string(type) + " " + dims.to_string();
}

std::vector<std::string> load_plugins(const std::vector<std::string>& libraries) {
  std::vector<std::string> names;
  for (const std::string& library : libraries) {
    for (std::string& name : load_plugin_library(library)) names.push_back(std::move(name));
  }
  return names;
}

}  // namespace kiln::cli

namespace kiln::cli {

// ---- layer precisions -------------------------------------------------------------------------

bool glob_match(std::string_view pattern, std::string_view name) {
  // Iterative wildcard match: on a mismatch, retry from the last '*' with one more character.
  size_t p = 0, n = 0, star = std::string_view::npos, mark = 0;
  while (n < name.size()) {
    if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      mark = n;
    } else if (p < pattern.size() && pattern[p] == name[n]) {
      ++p;
      ++n;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      n = ++mark;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

namespace {

// The entries of the flag's values: split at ',' (and new lines in @FILE contents).
std::vector<std::string> layer_precision_entries(const std::vector<std::string>& specs) {
  std::vector<std::string> entries;
  for (const std::string& spec : specs) {
    std::string text = spec;
    if (!spec.empty() && spec[0] == '@') {
      const std::vector<uint8_t> bytes = read_file_bytes(spec.substr(1), "--layer-precisions file", kMaxFlagFileBytes);
      text.assign(bytes.begin(), bytes.end());
    }
    std::string current;
    for (char c : text + ",") {
      if (c == ',' || c == '\n' || c == '\r') {
        while (!current.empty() && std::isspace(static_cast<unsigned char>(current.back()))) current.pop_back();
        size_t start = 0;
        while (start < current.size() && std::isspace(static_cast<unsigned char>(current[start]))) ++start;
        if (start < current.size()) entries.push_back(current.substr(start));
        current.clear();
      } else {
        current += c;
      }
    }
  }
  return entries;
}

}  // namespace

int apply_layer_precisions(Network& network, const std::vector<std::string>& specs) {
  int set = 0;
  for (const std::string& entry : layer_precision_entries(specs)) {
    const size_t colon = entry.rfind(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == entry.size()) {
      throw UsageError("--layer-precisions entry " + quote(entry) + " is not NAME:PRECISION (e.g. '/encoder/*:fp32')");
    }
    const std::string pattern = entry.substr(0, colon);
    const std::string prec = entry.substr(colon + 1);
    DataType type;
    if (prec == "fp32" || prec == "float32") {
      type = DataType::kFloat32;
    } else if (prec == "fp16" || prec == "float16") {
      type = DataType::kFloat16;
    } else {
      throw UsageError("--layer-precisions entry " + quote(entry) + ": unknown precision '" + prec +
                       "' (valid: fp32, fp16)");
    }
    int matched = 0;
    for (int i = 0; i < network.num_layers(); ++i) {
      Layer* layer = network.layer(i);
      if (!glob_match(pattern, layer->name())) continue;
      layer->set_precision(type);
      ++matched;
    }
    if (matched == 0) {
      throw UsageError("--layer-precisions entry " + quote(entry) + ": no layer is named '" + pattern +
                       "' (layer names are the ONNX node names; `kiln debug layers` lists them)");
    }
    set += matched;
  }
  return set;
}

// ---- reference files --------------------------------------------------------------------------

std::string find_reference(const std::string& dir, size_t index, const std::string& name) {
  namespace fs = std::filesystem;
  const std::vector<std::string> candidates = {(fs::path(dir) / ("output_" + std::to_string(index) + ".pb")).string(),
                                               (fs::path(dir) / ("output_" + std::to_string(index) + ".npy")).string(),
                                               (fs::path(dir) / (sanitize_file_name(name) + ".npy")).string()};
  for (const auto& c : candidates) {
    std::error_code ec;
    if (fs::is_regular_file(c, ec)) return c;
  }
  return "";
}

// ---- running an engine once -------------------------------------------------------------------

void settle_output(ExecutionContext& context, const std::string& name, HostTensor& value) {
  const Dims actual = context.tensor_shape(name);
  if (actual != value.dims()) {  // a data-dependent output: its leading bytes hold the result
    HostTensor trimmed(value.type(), actual);
    if (trimmed.nbytes()) std::memcpy(trimmed.data(), value.data(), trimmed.nbytes());
    value = std::move(trimmed);
  }
  // String elements point into the context's storage: keep copies of the characters.
  if (value.type() == DataType::kString)
    value = HostTensor::from_bytes(DataType::kString, value.dims(), value.data(), value.nbytes());
}

std::vector<std::pair<std::string, HostTensor>> run_engine_once(Engine& engine,
                                                                const std::vector<InputTensor>& inputs) {
  std::unique_ptr<ExecutionContext> context = engine.create_execution_context();
  const bool on_device = engine.device() != DeviceType::kCPU;
  Backend* backend = on_device ? &get_backend(engine.device()) : nullptr;
  std::vector<void*> device_buffers;
  struct Release {
    Backend* backend;
    std::vector<void*>& buffers;
    ~Release() {
      for (void* p : buffers) backend->release(p);
    }
  } release{backend, device_buffers};
  auto device_copy = [&](const void* data, size_t bytes) {
    device_buffers.push_back(backend->allocate(std::max<size_t>(bytes, 1)));
    if (data && bytes) backend->copy_host_to_device(device_buffers.back(), data, bytes, nullptr);
    return device_buffers.back();
  };
  for (const auto& in : inputs) {
    const TensorInfo& info = engine.io_tensor(in.name);
    if (in.value.type() != info.type) {
      throw Error("input " + quote(in.name) + " is " + std::string(to_string(info.type)) + ", but " + quote(in.file) +
                  " holds " + to_string(in.value.type()));
    }
    if (info.dims.is_dynamic()) context->set_input_shape(in.name, in.value.dims());
    context->set_tensor_address(in.name, on_device ? device_copy(in.value.data(), in.value.nbytes())
                                                   : const_cast<void*>(static_cast<const void*>(in.value.data())));
  }
  std::vector<std::pair<std::string, HostTensor>> outputs;
  // Reserved: the bound host addresses must not move when the vector grows.
  outputs.reserve(engine.io_tensors().size());
  std::vector<void*> output_device;
  for (const auto& info : engine.io_tensors()) {
    if (info.mode != TensorIOMode::kOutput) continue;
    const Dims dims = context->max_tensor_shape(info.name);
    if (dims.is_dynamic()) throw Error("output " + quote(info.name) + " has the unresolved shape " + dims.to_string());
    outputs.emplace_back(info.name, allocate_output(info.name, info.type, dims));
    HostTensor& value = outputs.back().second;
    void* address = on_device ? device_copy(nullptr, value.nbytes()) : value.data();
    output_device.push_back(address);
    context->set_tensor_address(info.name, address);
  }
  context->execute();
  for (size_t i = 0; i < outputs.size(); ++i) {
    auto& [name, value] = outputs[i];
    if (on_device && value.nbytes())
      backend->copy_device_to_host(value.data(), output_device[i], value.nbytes(), nullptr);
    settle_output(*context, name, value);
  }
  return outputs;
}

}  // namespace kiln::cli
