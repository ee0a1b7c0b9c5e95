// Shared by builder tests whose networks read "x" and write one float32 "y" on the CPU: run an
// engine, and compare two engines' outputs.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "kiln/kiln.h"

namespace kiln::test {

inline HostTensor run_x_to_y(const std::vector<uint8_t>& bytes, const HostTensor& x, const std::string& source) {
  auto engine = Runtime().deserialize(bytes.data(), bytes.size(), source);
  auto ctx = engine->create_execution_context();
  HostTensor y(DataType::kFloat32, ctx->tensor_shape("y"));
  ctx->set_tensor_address("x", const_cast<void*>(x.data()));
  ctx->set_tensor_address("y", y.data());
  ctx->execute();
  return y;
}

// Every element of `a` finite and within 1e-4 relative (plus 1e-4 absolute) of `b`'s.
inline void expect_close(const HostTensor& a, const HostTensor& b) {
  ASSERT_EQ(a.count(), b.count());
  for (int64_t i = 0; i < a.count(); ++i) {
    ASSERT_TRUE(std::isfinite(a.as<float>()[i])) << "element " << i;
    ASSERT_NEAR(a.as<float>()[i], b.as<float>()[i], 1e-4f * (1.0f + std::fabs(b.as<float>()[i]))) << "element " << i;
  }
}

}  // namespace kiln::test
