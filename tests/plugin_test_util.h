// Shared by the plugin-authoring tests (CPU and CUDA): the creator of a plugin without fields.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kiln/plugin.h"

namespace kiln::test {

// Makes P (default-constructed) under P's own type name and namespace; no fields.
template <class P>
struct FieldlessCreator : PluginCreator {
  std::string name() const override { return P().type(); }
  std::string plugin_namespace() const override { return P().plugin_namespace(); }
  std::vector<PluginFieldSpec> field_schema() const override { return {}; }
  std::unique_ptr<Plugin> create(const std::string&, const PluginFieldCollection&) const override {
    return std::make_unique<P>();
  }
};

}  // namespace kiln::test
