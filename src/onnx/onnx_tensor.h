// ONNX TensorProto -> kiln::HostTensor: element types, dims, raw_data, the typed repeated fields
// (float_data, int32_data, ...) and external data files (data_location = EXTERNAL). Used by the
// importer for initializers and tensor attributes, and usable by anything else that reads
// serialized ONNX tensors (e.g. test_data_set_*/input_*.pb).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "kiln/types.h"
#include "src/onnx/onnx_proto.h"

namespace kiln {

// The kiln type of an ONNX TensorProto::DataType value; nullopt when kiln has no such type.
std::optional<DataType> data_type_from_onnx(int32_t onnx_type);
// "FLOAT", "INT64", "BFLOAT16", ... (for messages); "type <n>" for unknown values.
std::string onnx_data_type_name(int32_t onnx_type);

// Converts a TensorProto. External data is resolved relative to base_dir; its location must be a
// relative path inside base_dir, and offset/length must lie within the file. `what` names the
// tensor in error messages (e.g. "initializer 'conv1.weight'"). Throws kiln::Error.
HostTensor tensor_from_proto(const onnx::TensorProto& proto, const std::string& base_dir, const std::string& what);

}  // namespace kiln
