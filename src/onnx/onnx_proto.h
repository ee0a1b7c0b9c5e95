// The ONNX protobuf messages (namespace `onnx`), from Debian's libonnx-dev when CMake found it
// (it defines KILN_ONNX_PROTO_FROM_LIBONNX, ONNX_ML=1 and ONNX_NAMESPACE=onnx) or else from
// the onnx.pb.h that CMake generates from onnx.proto. Include this, never the two directly.
#pragma once

#ifdef KILN_ONNX_PROTO_FROM_LIBONNX
#include <onnx/onnx_pb.h>
#else
#include "onnx.pb.h"
#endif
