// Umbrella header for kiln's public C++ API: networks, the builder, the runtime, the ONNX parser
// and plugins (custom layers). Including it is enough for everything the guides in docs/ show;
// tests/docs_snippets.py compiles their C++ snippets against this header alone.
#pragma once

#include "kiln/builder.h"
#include "kiln/error.h"
#include "kiln/logger.h"
#include "kiln/network.h"
#include "kiln/onnx_parser.h"
#include "kiln/plugin.h"
#include "kiln/runtime.h"
#include "kiln/types.h"
