// Shared base of kiln's element-wise, one-input one-output built-in plugins (TemperatureSwish,
// ThresholdReLU, GELU, Mish): identity shapes, output type = input type, the type/format table
// per device, and an enqueue that checks its arguments and dispatches to the plugin's CPU
// function or CUDA launcher. A subclass only supplies its identity, its fields and the two
// kernels. Also the small field readers the creators share.
//
// Layout: element-wise ops ignore the layout, so any format works as long as input and output
// have the same one; the kernels see `n` contiguous elements. In-place (output == input) is
// allowed; partially overlapping buffers are not.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/plugin.h"
#include "kiln/types.h"

namespace kiln::plugins {

// What UnaryPlugin::enqueue returns (kiln reports the code with the layer name; the message is
// logged through kiln's logger before returning).
enum UnaryStatus : int {
  kUnaryOk = 0,
  kUnaryBadArguments = 1,  // wrong tensor count, null pointer, dims or types that do not match
  kUnaryUnsupported = 2,   // type/format/device not in supports_format_combination's table
  kUnaryNoCuda = 3,        // asked to run on CUDA in a build without CUDA
  kUnaryMisaligned = 4,    // a pointer not aligned to its element size
  kUnaryCudaError = 5,     // the kernel launch failed (the CUDA error is logged)
};

class UnaryPlugin : public Plugin {
 public:
  int num_outputs() const override { return 1; }
  // {input_types[0]}; throws kiln::Error unless exactly one input type is given.
  std::vector<DataType> output_types(const std::vector<DataType>& input_types) const override;
  // The input's dim expressions, unchanged (dynamic dims stay symbolic).
  DimsExprs output_dims(int index, const std::vector<DimsExprs>& inputs, ExprBuilder& exprs) const override;
  // CPU: float32 linear. CUDA: float32 or float16, linear or channels-last; the output must
  // equal the input's type and format.
  bool supports_format_combination(int pos, const std::vector<PluginTensorDesc>& in_out, int num_inputs,
                                   int num_outputs) const override;
  int enqueue(const std::vector<PluginTensorDesc>& input_descs, const std::vector<PluginTensorDesc>& output_descs,
              const void* const* inputs, void* const* outputs, void* workspace, const PluginExecContext& exec) override;

  const std::string& layer_name() const { return layer_name_; }
  // "GELU layer 'name'" for messages.
  std::string label() const;

 protected:
  explicit UnaryPlugin(std::string layer_name) : layer_name_(std::move(layer_name)) {}

  // y[i] = f(x[i]) for i < n (n >= 1), float32 on the host, up to num_threads threads.
  virtual void run_cpu(const float* x, float* y, int64_t n, int num_threads) const = 0;
  // Launches y = f(x) over n >= 1 elements of `type` (float32 or float16) on `stream` (a
  // cudaStream_t, never null). Returns 0 or the cudaError_t of the launch; kUnaryNoCuda in a
  // build without CUDA.
  virtual int run_cuda(const void* x, void* y, int64_t n, DataType type, void* stream) const = 0;

 private:
  std::string layer_name_;
};

// ---- field helpers for the creators ------------------------------------------------------

// A float32 scalar field spec with a default (not required).
PluginFieldSpec float32_field_spec(const std::string& name, float default_value, const std::string& description);
// A string field spec with a default (not required).
PluginFieldSpec string_field_spec(const std::string& name, const std::string& default_value,
                                  const std::string& description);

// The float32 scalar field `name`, or `default_value` when absent. Throws kiln::Error naming
// `where` and the field when it has another type or count, or is not finite.
float read_float32_field(const PluginFieldCollection& fields, const std::string& name, float default_value,
                         const std::string& where);
// The string field `name`, or `default_value` when absent; kiln::Error when of another type.
std::string read_string_field(const PluginFieldCollection& fields, const std::string& name,
                              const std::string& default_value, const std::string& where);

// "TemperatureSwish layer 'name'" (or "TemperatureSwish layer" when the name is empty).
std::string plugin_label(const std::string& type, const std::string& layer_name);

}  // namespace kiln::plugins
