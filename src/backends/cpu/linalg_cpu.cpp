// CPU reference kernel of the linear algebra layers (src/ir/ops_linalg.h). Det: each M x M
// matrix is copied to double, factored by Gaussian elimination with partial pivoting (the
// largest magnitude in the column as pivot, so a zero on the diagonal needs no special case),
// and the determinant is the product of the pivots, negated once per row swap. A singular
// matrix gives exactly 0 once a pivot column is all zeros.
//
// Layout: dense row-major (TensorFormat::kLinear); no alignment is assumed.
#include <cmath>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kiln/error.h"
#include "src/backends/cpu/cpu_utils.h"
#include "src/backends/kernel.h"
#include "src/ir/ops_linalg.h"

namespace kiln {
namespace {

// The determinant of the n x n row-major matrix a (overwritten by its factorization).
double determinant(std::vector<double>& a, int64_t n) {
  double det = 1.0;
  for (int64_t k = 0; k < n; ++k) {
    int64_t pivot = k;
    for (int64_t r = k + 1; r < n; ++r) {
      if (std::fabs(a[r * n + k]) > std::fabs(a[pivot * n + k])) pivot = r;
    }
    if (a[pivot * n + k] == 0.0) return 0.0;
    if (pivot != k) {
      for (int64_t c = 0; c < n; ++c) std::swap(a[k * n + c], a[pivot * n + c]);
      det = -det;
    }
    const double p = a[k * n + k];
    det *= p;
    for (int64_t r = k + 1; r < n; ++r) {
      const double f = a[r * n + k] / p;
      for (int64_t c = k + 1; c < n; ++c) a[r * n + c] -= f * a[k * n + c];
    }
  }
  return det;
}

// half converts through float; float and double directly.
template <typename T>
double to_double(T v) {
  if constexpr (std::is_same_v<T, half>)
    return static_cast<double>(static_cast<float>(v));
  else
    return static_cast<double>(v);
}
template <typename T>
T from_double(double v) {
  if constexpr (std::is_same_v<T, half>)
    return half(static_cast<float>(v));
  else
    return static_cast<T>(v);
}

template <typename T>
void det(const KernelContext& ctx) {
  const Dims& d = ctx.inputs[0].dims;
  const int64_t n = d[d.rank() - 1];
  const int64_t matrices = ctx.outputs[0].count();
  const T* x = ctx.inputs[0].as<const T>();
  T* y = ctx.outputs[0].as<T>();
  cpu::parallel_for(
      matrices, ctx.num_threads,
      [&](int64_t begin, int64_t end) {
        std::vector<double> a(static_cast<size_t>(n * n));
        for (int64_t m = begin; m < end; ++m) {
          const T* src = x + m * n * n;
          for (int64_t i = 0; i < n * n; ++i) a[static_cast<size_t>(i)] = to_double(src[i]);
          y[m] = from_double<T>(determinant(a, n));
        }
      },
      64);
}

void det_kernel(const KernelContext& ctx) {
  switch (ctx.inputs[0].type) {
    case DataType::kFloat32:
      det<float>(ctx);
      break;
    case DataType::kFloat64:
      det<double>(ctx);
      break;
    case DataType::kFloat16:
      det<half>(ctx);
      break;
    default:
      throw Error(std::string("Det: unsupported data type ") + to_string(ctx.inputs[0].type));
  }
}

}  // namespace

KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCPU, kLayerDet, "reference", 0, nullptr, function_kernel(det_kernel)});

}  // namespace kiln
