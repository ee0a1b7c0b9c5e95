// Typed op parameters: a layer type whose schema says with_params<P>() has its attributes
// decoded into a P (enums by name, ranges, required attributes and defaults checked in one
// place, P::decode) when the layer is created, loaded from an engine or validated; the result is
// cached for the layer (and decoded again when its attributes have been edited since). Shape inference and every kernel
// read the same P through params_of<P>(layer) instead of decoding string keys again.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <typeinfo>
#include <utility>
#include <vector>

#include "kiln/error.h"
#include "kiln/network.h"

namespace kiln {

// Reads one layer's attributes for a params decoder: absent attributes take the schema's
// default; every failure throws kiln::Error "layer '<name>' (<type>): attribute '<attr>' ...".
class ParamReader {
 public:
  explicit ParamReader(const Layer& layer) : layer_(layer) {}
  const Layer& layer() const { return layer_; }

  int64_t get_int(const std::string& name) const;
  double get_float(const std::string& name) const;
  std::string get_string(const std::string& name) const;
  std::vector<int64_t> get_ints(const std::string& name) const;
  std::vector<std::string> get_strings(const std::string& name) const;

  // An int in [lo, hi].
  int64_t int_in(const std::string& name, int64_t lo, int64_t hi) const;
  // 0 or 1.
  bool get_bool(const std::string& name) const { return int_in(name, 0, 1) != 0; }
  // A list whose values are all >= `min` (any length; the rank is checked against shapes later).
  std::vector<int64_t> ints_at_least(const std::string& name, int64_t min) const;
  // A string attribute naming one of `allowed` (name, value pairs); the error lists the names.
  template <typename E>
  E get_enum(const std::string& name, std::initializer_list<std::pair<std::string_view, E>> allowed) const {
    const std::string v = get_string(name);
    std::string names;
    for (const auto& [n, e] : allowed) {
      if (v == n) return e;
      names += (names.empty() ? "\"" : ", \"") + std::string(n) + "\"";
    }
    fail(name, "is \"" + v + "\"; allowed values: " + names);
  }

  // Throws "layer '<name>' (<type>): attribute '<attr>' <message>".
  [[noreturn]] void fail(const std::string& name, const std::string& message) const;

 private:
  const Layer& layer_;
};

// Decodes (and caches) the params of `layer` when its schema has a params type; nothing for
// other layer types. Throws kiln::Error naming the layer and the attribute.
void decode_params(const Layer& layer);
// Drops the cached params of a layer about to be destroyed (Network does this).
void forget_params(const Layer& layer);

namespace detail {
// The cached params of `layer` (decoded first when needed), checked to be of type `type`.
const void* params_ptr(const Layer& layer, const std::type_info& type);
}  // namespace detail

// The decoded params of `layer` (decoded now when the layer's attributes changed since the last
// decode). The reference stays valid until the layer's attributes are edited and its params read
// again, or the layer is destroyed; kernels copy what they keep. Thread-safe.
template <typename P>
const P& params_of(const Layer& layer) {
  return *static_cast<const P*>(detail::params_ptr(layer, typeid(P)));
}

}  // namespace kiln
