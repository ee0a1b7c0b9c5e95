// The kernel registry: (device, layer type, tactic) -> factory, ordered by priority.
#include <algorithm>

#include "kiln/error.h"
#include "src/backends/kernel.h"
#include "src/core/text.h"

namespace kiln {

namespace {
std::string key(DeviceType device, const std::string& type) { return std::string(to_string(device)) + "/" + type; }
}  // namespace

KernelRegistry& KernelRegistry::instance() {
  static KernelRegistry registry;
  return registry;
}

void KernelRegistry::add(KernelEntry entry) {
  auto& list = entries_[key(entry.device, entry.layer_type)];
  for (const auto& e : list) {
    if (e.tactic == entry.tactic) {
      throw Error("kernel " + quote(entry.tactic) + " for layer type " + quote(entry.layer_type) + " on " +
                  to_string(entry.device) + " is registered twice");
    }
  }
  list.push_back(std::move(entry));
  // Highest priority first; ties by tactic name so the order never depends on link order.
  std::sort(list.begin(), list.end(), [](const KernelEntry& a, const KernelEntry& b) {
    return a.priority != b.priority ? a.priority > b.priority : a.tactic < b.tactic;
  });
}

std::vector<const KernelEntry*> KernelRegistry::find(DeviceType device, const std::string& layer_type) const {
  std::vector<const KernelEntry*> r;
  auto it = entries_.find(key(device, layer_type));
  if (it != entries_.end()) {
    for (const auto& e : it->second) r.push_back(&e);
  }
  return r;
}

const KernelEntry* KernelRegistry::find(DeviceType device, const std::string& layer_type,
                                        const std::string& tactic) const {
  for (const KernelEntry* e : find(device, layer_type)) {
    if (e->tactic == tactic) return e;
  }
  return nullptr;
}

}  // namespace kiln
