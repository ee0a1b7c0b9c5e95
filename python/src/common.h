// Shared by the binding files of kiln's Python module (python/src/*.cpp): conversions between
// kiln's value types and Python's (dims <-> tuples, DataType <-> numpy/DLPack dtypes, arrays <->
// HostTensor), and the functions each file defines to bind its part of the API.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/plugin.h"

namespace kiln::python {

namespace nb = nanobind;
using namespace nanobind::literals;

// A plugin object made by a creator (or a Python plugin spec), until add_plugin copies it into a layer.
struct PluginObject {
  std::unique_ptr<Plugin> plugin;
};

// A layer attribute from a Python value (int, float, str, lists of them, arrays) and back.
AttrValue attr_from(nb::handle value, const std::string& what);
nb::object attr_to(const AttrValue& value);

// Any array, read-only, on any device (numpy, torch, cupy, jax: buffer protocol or DLPack).
using AnyArray = nb::ndarray<nb::ro>;

Dims dims_from(const std::vector<int64_t>& values);
nb::tuple dims_to_tuple(const Dims& dims);

// DLPack dtype of a kiln type; throws kiln::Error for kString.
nb::dlpack::dtype dlpack_dtype(DataType type);
// kiln type of a DLPack dtype; throws kiln::Error naming `what` for types kiln lacks.
DataType data_type_of(nb::dlpack::dtype dtype, const std::string& what);
// numpy's name of a kiln type ("float32", "bool", ...).
const char* numpy_name(DataType type);

// A host copy of a CPU array (C-contiguous or not); `what` names it in errors.
HostTensor host_tensor_from(const AnyArray& array, const std::string& what);
// A numpy array owning a copy of `tensor` (strings: a numpy array of Python str objects).
nb::object numpy_from(const HostTensor& tensor);

void bind_core(nb::module_& m);
void bind_network(nb::module_& m);
void bind_runtime(nb::module_& m);
void bind_plugins(nb::module_& m);

}  // namespace kiln::python
