// Optimization profiles: the min/opt/max dims of a network's dynamic inputs. The builder takes
// them (BuilderConfig::profiles) and an engine keeps them (Engine::profile), so both
// builder.h and runtime.h include this header.
#pragma once

#include <map>
#include <string>

#include "kiln/types.h"

namespace kiln {

// min/opt/max dims for every dynamic network input. At run time each input's dims must lie
// within [min, max] element-wise; opt is the shape the builder tunes for.
class OptimizationProfile {
 public:
  void set_dimensions(const std::string& input, const Dims& min, const Dims& opt, const Dims& max);
  bool has(const std::string& input) const { return shapes_.count(input) != 0; }
  const Dims& min(const std::string& input) const;
  const Dims& opt(const std::string& input) const;
  const Dims& max(const std::string& input) const;
  struct Shapes {
    Dims min, opt, max;
  };
  const std::map<std::string, Shapes>& all() const { return shapes_; }

 private:
  std::map<std::string, Shapes> shapes_;
};

}  // namespace kiln
