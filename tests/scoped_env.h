// Sets an environment variable for a scope and restores the previous value: kernels and the
// builder read some settings at every prepare() / supports() / build, and other tests must not
// see one test's values.
#pragma once

#include <cstdlib>
#include <optional>
#include <string>

namespace kiln::test {

class ScopedEnv {
 public:
  // value nullptr: unset for the scope.
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = std::string(old);
    if (value) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_.c_str(), old_->c_str(), 1);
    } else {
      unsetenv(name_.c_str());
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

}  // namespace kiln::test
