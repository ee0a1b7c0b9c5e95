// The process-wide table of prepared kernel states held by loaded engines (prepared_state.h).
#include "src/backends/prepared_state.h"

#include <cstdlib>
#include <mutex>
#include <string>
#include <unordered_map>

namespace kiln {
namespace {

struct Table {
  std::mutex mutex;
  std::unordered_map<std::string, std::weak_ptr<const std::vector<uint8_t>>> states;
};

Table& table() {
  static Table* t = new Table;  // never destroyed: engines may outlive static destruction order
  return *t;
}

bool states_ignored() {
  const char* v = std::getenv("KILN_COMPILED_PLANS");
  return v && std::string(v) == "0";
}

}  // namespace

std::shared_ptr<const void> hold_prepared_states(const std::vector<PreparedState>& states) {
  auto held = std::make_shared<std::vector<std::shared_ptr<const std::vector<uint8_t>>>>();
  if (states.empty()) return held;
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  for (auto it = t.states.begin(); it != t.states.end();) {
    it = it->second.expired() ? t.states.erase(it) : std::next(it);
  }
  for (const PreparedState& s : states) {
    if (!s.bytes) continue;
    std::weak_ptr<const std::vector<uint8_t>>& slot = t.states[s.key];
    if (auto existing = slot.lock()) {
      held->push_back(std::move(existing));
    } else {
      slot = s.bytes;
      held->push_back(s.bytes);
    }
  }
  return held;
}

std::shared_ptr<const std::vector<uint8_t>> find_prepared_state(const std::string& key) {
  if (states_ignored()) return nullptr;
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  const auto it = t.states.find(key);
  return it == t.states.end() ? nullptr : it->second.lock();
}

size_t prepared_state_count() {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  size_t n = 0;
  for (const auto& [key, state] : t.states) n += state.expired() ? 0 : 1;
  return n;
}

}  // namespace kiln
