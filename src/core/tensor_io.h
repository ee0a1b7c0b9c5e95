// Reading and writing tensors as .npy files and as serialized ONNX TensorProto (.pb) files
// (the ONNX backend-test layout: input_<i>.pb / output_<i>.pb). Errors name the file.
#pragma once

#include <string>

#include "kiln/types.h"

namespace kiln {

HostTensor load_npy(const std::string& path);
void save_npy(const std::string& path, const HostTensor& tensor);
// Returns the tensor; `name` receives the TensorProto's name when non-null.
HostTensor load_tensor_pb(const std::string& path, std::string* name = nullptr);
void save_tensor_pb(const std::string& path, const HostTensor& tensor, const std::string& name);
// By extension: .npy or .pb.
HostTensor load_tensor_file(const std::string& path);
// Replaces characters outside [A-Za-z0-9_.-] with '_' (output file names).
std::string sanitize_file_name(const std::string& name);

}  // namespace kiln
