// The library's access to what runtime.h keeps private: the constructors of Engine and
// ExecutionContext and their implementation objects. Only kiln's own code (the runtime and the
// Python bindings) includes this header; it is not installed.
#pragma once

#include <memory>

#include "kiln/runtime.h"

namespace kiln::detail {

struct RuntimeAccess {
  static std::shared_ptr<Engine> make_engine(std::unique_ptr<EngineImpl> impl) {
    return std::shared_ptr<Engine>(new Engine(std::move(impl)));
  }
  static std::unique_ptr<ExecutionContext> make_context(std::shared_ptr<Engine> engine,
                                                        std::unique_ptr<ContextImpl> impl) {
    return std::unique_ptr<ExecutionContext>(new ExecutionContext(std::move(engine), std::move(impl)));
  }
  static EngineImpl& impl(Engine& engine) { return engine.impl(); }
  static ContextImpl& impl(ExecutionContext& context) { return context.impl(); }
};

}  // namespace kiln::detail
