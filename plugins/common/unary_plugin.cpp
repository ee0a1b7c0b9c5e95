// UnaryPlugin's builder answers, its checked enqueue, and the field readers shared by the
// element-wise built-in plugins' creators (see unary_plugin.h).
#include "plugins/common/unary_plugin.h"

#include <cmath>
#include <cstdint>
#include <string>

#include "kiln/error.h"
#include "kiln/logger.h"

#ifdef KILN_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace kiln::plugins {
namespace {

// The type/format combinations the element-wise kernels run, per device. Element-wise ops do
// not care about the layout, so on either device both formats are the same kernel over n
// elements (channels-last memory is as dense as linear memory). On the CPU, accepting
// channels-last keeps a network's channels-last region going through the plugin (TinyYolo's
// TemperatureSwish between every two convolutions) instead of cutting it into linear islands.
struct Combination {
  DeviceType device;
  DataType type;
  TensorFormat format;
};
constexpr Combination kSupported[] = {
    {DeviceType::kCPU, DataType::kFloat32, TensorFormat::kLinear},
    {DeviceType::kCPU, DataType::kFloat32, TensorFormat::kChannelsLast},
    {DeviceType::kCUDA, DataType::kFloat32, TensorFormat::kLinear},
    {DeviceType::kCUDA, DataType::kFloat32, TensorFormat::kChannelsLast},
    {DeviceType::kCUDA, DataType::kFloat16, TensorFormat::kLinear},
    {DeviceType::kCUDA, DataType::kFloat16, TensorFormat::kChannelsLast},
};

bool is_supported(DeviceType device, DataType type, TensorFormat format) {
  for (const Combination& c : kSupported) {
    if (c.device == device && c.type == type && c.format == format) return true;
  }
  return false;
}

bool is_supported_type(DeviceType device, DataType type) {
  for (const Combination& c : kSupported) {
    if (c.device == device && c.type == type) return true;
  }
  return false;
}

}  // namespace

std::string plugin_label(const std::string& type, const std::string& layer_name) {
  return layer_name.empty() ? type + " layer" : type + " layer '" + layer_name + "'";
}

std::string UnaryPlugin::label() const { return plugin_label(type(), layer_name_); }

std::vector<DataType> UnaryPlugin::output_types(const std::vector<DataType>& input_types) const {
  if (input_types.size() != 1) {
    throw Error(label() + ": expects exactly 1 input, got " + std::to_string(input_types.size()));
  }
  return {input_types[0]};
}

DimsExprs UnaryPlugin::output_dims(int index, const std::vector<DimsExprs>& inputs, ExprBuilder& exprs) const {
  if (index != 0 || inputs.size() != 1) {
    throw Error(label() + ": has 1 input and 1 output; asked for output " + std::to_string(index) + " of " +
                std::to_string(inputs.size()) + " inputs");
  }
  return inputs[0];
}

bool UnaryPlugin::supports_format_combination(int pos, const std::vector<PluginTensorDesc>& in_out, int num_inputs,
                                              int num_outputs) const {
  if (num_inputs != 1 || num_outputs != 1 || pos < 0 || pos > 1 || in_out.size() < static_cast<size_t>(pos) + 1) {
    return false;
  }
  const PluginTensorDesc& in = in_out[0];
  if (!is_supported(target_device(), in.type, in.format)) return false;
  if (pos == 0) return true;
  return in_out[1].type == in.type && in_out[1].format == in.format;
}

int UnaryPlugin::enqueue(const std::vector<PluginTensorDesc>& input_descs,
                         const std::vector<PluginTensorDesc>& output_descs, const void* const* inputs,
                         void* const* outputs, void* workspace, const PluginExecContext& exec) {
  const auto fail = [&](int code, const std::string& message) {
    log(Severity::kError, label() + ": " + message);
    return code;
  };
  if (input_descs.size() != 1 || output_descs.size() != 1) {
    return fail(kUnaryBadArguments, "expects 1 input and 1 output, got " + std::to_string(input_descs.size()) +
                                        " and " + std::to_string(output_descs.size()));
  }
  const PluginTensorDesc& in = input_descs[0];
  const PluginTensorDesc& out = output_descs[0];
  if (in.dims != out.dims || in.type != out.type || in.format != out.format) {
    return fail(kUnaryBadArguments, std::string("output must match the input; got input ") + to_string(in.type) + " " +
                                        in.dims.to_string() + " " + to_string(in.format) + ", output " +
                                        to_string(out.type) + " " + out.dims.to_string() + " " + to_string(out.format));
  }
  int64_t n = 0;
  try {
    n = in.dims.volume();
  } catch (const Error& e) {
    return fail(kUnaryBadArguments, std::string("needs concrete input dims: ") + e.what());
  }
  if (n == 0) return kUnaryOk;
  if (inputs == nullptr || outputs == nullptr || inputs[0] == nullptr || outputs[0] == nullptr) {
    return fail(kUnaryBadArguments, "got a null input or output pointer for " + std::to_string(n) + " elements");
  }
  if (!is_supported_type(exec.device, in.type)) {
    return fail(kUnaryUnsupported, std::string("does not run ") + to_string(in.type) + " on " + to_string(exec.device) +
                                       " (CPU: float32; CUDA: float32, float16)");
  }
  const size_t element_size = data_type_size(in.type);
  if (reinterpret_cast<uintptr_t>(inputs[0]) % element_size != 0 ||
      reinterpret_cast<uintptr_t>(outputs[0]) % element_size != 0) {
    return fail(kUnaryMisaligned,
                "input and output must be aligned to their element size (" + std::to_string(element_size) + " bytes)");
  }

  if (exec.device == DeviceType::kCPU) {
    run_cpu(static_cast<const float*>(inputs[0]), static_cast<float*>(outputs[0]), n, exec.num_threads);
    return kUnaryOk;
  }
#ifdef KILN_HAVE_CUDA
  if (exec.stream == nullptr) {
    return fail(kUnaryBadArguments, "got no CUDA stream (plugins never launch on the default stream)");
  }
  const int rc = run_cuda(inputs[0], outputs[0], n, in.type, exec.stream);
  if (rc != 0) {
    const auto err = static_cast<cudaError_t>(rc);
    return fail(kUnaryCudaError,
                std::string("CUDA kernel launch failed: ") + cudaGetErrorName(err) + ": " + cudaGetErrorString(err));
  }
  return kUnaryOk;
#else
  return fail(kUnaryNoCuda,
              "asked to run on CUDA, but this kiln was built without CUDA "
              "(configure with -DKILN_WITH_CUDA=ON on a machine with the CUDA toolkit)");
#endif
}

// ---- field helpers -----------------------------------------------------------------------

PluginFieldSpec float32_field_spec(const std::string& name, float default_value, const std::string& description) {
  PluginFieldSpec spec;
  spec.name = name;
  spec.type = PluginFieldType::kFloat32;
  spec.count = 1;
  spec.required = false;
  spec.default_value = PluginField::float32(name, {default_value});
  spec.description = description;
  return spec;
}

PluginFieldSpec string_field_spec(const std::string& name, const std::string& default_value,
                                  const std::string& description) {
  PluginFieldSpec spec;
  spec.name = name;
  spec.type = PluginFieldType::kString;
  spec.count = 1;
  spec.required = false;
  spec.default_value = PluginField::string(name, default_value);
  spec.description = description;
  return spec;
}

float read_float32_field(const PluginFieldCollection& fields, const std::string& name, float default_value,
                         const std::string& where) {
  const PluginField* field = fields.find(name);
  if (field == nullptr) return default_value;
  if (field->type != PluginFieldType::kFloat32 || field->f32.size() != 1) {
    throw Error(where + ": field '" + name + "' must be one float32 value, got " + to_string(field->type) + " with " +
                std::to_string(field->count()) + " value(s)");
  }
  const float value = field->f32[0];
  if (!std::isfinite(value)) {
    throw Error(where + ": field '" + name + "' must be finite, got " + std::to_string(value));
  }
  return value;
}

std::string read_string_field(const PluginFieldCollection& fields, const std::string& name,
                              const std::string& default_value, const std::string& where) {
  const PluginField* field = fields.find(name);
  if (field == nullptr) return default_value;
  if (field->type != PluginFieldType::kString) {
    throw Error(where + ": field '" + name + "' must be a string, got " + to_string(field->type));
  }
  return field->str;
}

}  // namespace kiln::plugins
