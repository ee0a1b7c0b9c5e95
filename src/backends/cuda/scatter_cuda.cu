// CUDA kernel (tactic "cuda") of the Scatter layer: ONNX ScatterElements (mode "elements") and
// ScatterND (mode "nd") with the reductions none / add / mul / max / min. The output starts as a
// copy of data; the updates are then applied so that the result equals the CPU reference
// (scatter_cpu.cpp), which applies them one by one in row-major update order:
// - none: the last update to a position wins. Either a thread per "serial group" applies its
//   updates in order (elements mode with many columns: updates that differ only along `axis` form
//   a column, and columns never share a target), or an owner pass records, per target (per
//   target slice in nd mode), the highest update number with atomicMax in the workspace and a
//   write pass lets only that update write. Both are deterministic.
// - max / min (any type) and add / mul of integers: the result does not depend on the order
//   (integer arithmetic wraps modulo 2^bits), so every update combines atomically (a CAS loop on
//   the aligned 32- or 64-bit word that holds the element, which serves every element width).
// - add / mul of floating-point data: a thread per serial group applies the group's updates in
//   the reference's order (bit-exact) when there are enough groups (or the chains are short);
//   otherwise updates combine atomically, which is correct up to float rounding in the order
//   the atomics land (not bit-reproducible run to run).
// Indices are int32 or int64, negative values wrap. An index out of range is an error: when the
// indices are host-known prepare() checks them and throws as the reference does; otherwise the
// update is skipped and the layer's device error flag (KernelContext::device_error) is set; the
// runtime reads it after the inference and fails naming the layer.
//
// Layout: kLinear only (dense row-major); any element width 1, 2, 4 or 8 bytes (bool only with
// reduction none); rank <= 8.
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "kiln/error.h"
#include "src/ir/op_params.h"
#include "src/ir/scatter_params.h"
#include "src/backends/cuda/cuda_common.h"
#include "src/backends/cuda/element_types_cuda.cuh"
#include "src/backends/cuda/op_helpers_cuda.cuh"
#include "src/ir/op_schema.h"

namespace kiln::cuda {
namespace {

constexpr int64_t kSerialMinGroups = 256;    // float add/mul: serial with at least this many groups,
constexpr int64_t kSerialShortChain = 64;    // or with chains this short
constexpr int64_t kNoneSerialGroups = 4096;  // reduction none, elements mode: serial above this

using Reduction = ScatterReductionKind;

// ---- combining values ---------------------------------------------------------------------------

// The reference's combine (scatter_cpu.cpp): half through float, integers wrapping.
template <typename T>
__device__ __forceinline__ T combine(T dst, T src, Reduction r) {
  if constexpr (std::is_same_v<T, __half>) {
    const float d = __half2float(dst), s = __half2float(src);
    switch (r) {
      case Reduction::kNone:
        return src;
      case Reduction::kAdd:
        return __float2half_rn(d + s);
      case Reduction::kMul:
        return __float2half_rn(d * s);
      case Reduction::kMax:
        return s > d ? src : dst;
      case Reduction::kMin:
        return s < d ? src : dst;
    }
    return dst;
  } else if constexpr (std::is_same_v<T, bool>) {
    return r == Reduction::kNone ? src : dst;
  } else {
    switch (r) {
      case Reduction::kNone:
        return src;
      case Reduction::kAdd:
        return static_cast<T>(dst + src);
      case Reduction::kMul:
        return static_cast<T>(dst * src);
      case Reduction::kMax:
        return src > dst ? src : dst;
      case Reduction::kMin:
        return src < dst ? src : dst;
    }
    return dst;
  }
}

template <typename To, typename From>
__device__ __forceinline__ To bits_as(From v) {
  static_assert(sizeof(To) == sizeof(From));
  To t;
  memcpy(&t, &v, sizeof(To));
  return t;
}

// dst = combine(dst, v) atomically, by a CAS loop on the aligned word holding dst.
template <typename T>
__device__ __forceinline__ void atomic_combine(T* dst, T v, Reduction r) {
  if constexpr (sizeof(T) == 8) {
    auto* word = reinterpret_cast<unsigned long long*>(dst);
    unsigned long long old = *word, assumed;
    do {
      assumed = old;
      const unsigned long long next = bits_as<unsigned long long>(combine(bits_as<T>(assumed), v, r));
      if (next == assumed) return;
      old = atomicCAS(word, assumed, next);
    } while (old != assumed);
  } else if constexpr (sizeof(T) == 4) {
    auto* word = reinterpret_cast<unsigned int*>(dst);
    unsigned int old = *word, assumed;
    do {
      assumed = old;
      const unsigned int next = bits_as<unsigned int>(combine(bits_as<T>(assumed), v, r));
      if (next == assumed) return;
      old = atomicCAS(word, assumed, next);
    } while (old != assumed);
  } else {
    using Bits = std::conditional_t<sizeof(T) == 2, unsigned short, unsigned char>;
    const uintptr_t p = reinterpret_cast<uintptr_t>(dst);
    auto* word = reinterpret_cast<unsigned int*>(p & ~uintptr_t{3});
    const unsigned shift = static_cast<unsigned>(p & 3) * 8;
    const unsigned mask = ((1u << (8 * sizeof(T))) - 1u) << shift;
    unsigned int old = *word, assumed;
    do {
      assumed = old;
      const T cur = bits_as<T>(static_cast<Bits>((assumed & mask) >> shift));
      const unsigned nb = static_cast<unsigned>(bits_as<Bits>(combine(cur, v, r)));
      const unsigned int next = (assumed & ~mask) | (nb << shift);
      if (next == assumed) return;
      old = atomicCAS(word, assumed, next);
    } while (old != assumed);
  }
}

// ---- targets ----------------------------------------------------------------------------------

struct ScatterArgs {
  bool nd = false;
  bool k32 = true;
  bool idx64 = true;
  const void* indices = nullptr;
  int* flag = nullptr;
  // elements: update u goes to upd_map(u) + wrap(indices[u]) * axis_stride
  oph::SmallMap upd_map;
  int64_t axis_extent = 1, axis_stride = 1;
  // nd: tuple t's slice starts at sum_j wrap(indices[t*k + j], dims[j]) * strides[j]
  int k = 0;
  int64_t tuples = 0, slice = 1;
  int64_t dims[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};
  // serial groups: elements: columns [outer, axis, inner] of the updates; nd: slice positions
  int64_t updates = 0;  // update elements
  int64_t groups = 0, chain = 0, inner = 1;
  IndexDiv inner_div;
};

__device__ __forceinline__ int64_t read_index(const ScatterArgs& a, int64_t i) {
  return a.idx64 ? static_cast<const int64_t*>(a.indices)[i] : static_cast<const int32_t*>(a.indices)[i];
}

// Wraps a negative index; -1 (and the flag set) when out of range.
__device__ __forceinline__ int64_t wrap_checked(const ScatterArgs& a, int64_t idx, int64_t extent) {
  if (idx < -extent || idx >= extent) {
    if (a.flag) *a.flag = 1;
    return -1;
  }
  return idx < 0 ? idx + extent : idx;
}

// Elements mode: the target of update u, or -1.
__device__ __forceinline__ int64_t element_target(const ScatterArgs& a, int64_t u) {
  const int64_t i = wrap_checked(a, read_index(a, u), a.axis_extent);
  return i < 0 ? -1 : oph::map_at(a.upd_map, u, a.k32) + i * a.axis_stride;
}

// Nd mode: the first element of tuple t's target slice, or -1.
__device__ __forceinline__ int64_t slice_target(const ScatterArgs& a, int64_t t) {
  int64_t off = 0;
  for (int j = 0; j < a.k; ++j) {
    const int64_t i = wrap_checked(a, read_index(a, t * a.k + j), a.dims[j]);
    if (i < 0) return -1;
    off += i * a.strides[j];
  }
  return off;
}

// ---- kernels ----------------------------------------------------------------------------------

// Owner pass (reduction none): owner[slot] = max over the updates (tuples) aimed at it of
// their number + 1.
template <typename O>
__global__ void scatter_owner_kernel(O* __restrict__ owner, ScatterArgs a) {
  const int64_t units = a.nd ? a.tuples : a.updates;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t u = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; u < units; u += step) {
    const int64_t t = a.nd ? slice_target(a, u) : element_target(a, u);
    if (t < 0) continue;
    atomicMax(owner + (a.nd ? t / a.slice : t), static_cast<O>(u + 1));
  }
}

// Write pass (reduction none): only the owner writes.
template <typename W, typename O>
__global__ void scatter_owned_write_kernel(const W* __restrict__ updates, const O* __restrict__ owner,
                                           W* __restrict__ y, ScatterArgs a) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < a.updates; e += step) {
    if (a.nd) {
      const int64_t t = e / a.slice;
      const int64_t base = slice_target(a, t);
      if (base < 0 || owner[base / a.slice] != static_cast<O>(t + 1)) continue;
      y[base + (e - t * a.slice)] = updates[e];
    } else {
      const int64_t tgt = element_target(a, e);
      if (tgt < 0 || owner[tgt] != static_cast<O>(e + 1)) continue;
      y[tgt] = updates[e];
    }
  }
}

// Order-independent reductions: every update combines atomically.
template <typename T>
__global__ void scatter_atomic_kernel(const T* __restrict__ updates, T* __restrict__ y, ScatterArgs a, Reduction r) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < a.updates; e += step) {
    int64_t tgt;
    if (a.nd) {
      const int64_t t = e / a.slice;
      const int64_t base = slice_target(a, t);
      tgt = base < 0 ? -1 : base + (e - t * a.slice);
    } else {
      tgt = element_target(a, e);
    }
    if (tgt >= 0) atomic_combine(y + tgt, updates[e], r);
  }
}

// A thread per serial group applies the group's updates in the reference's order. Elements:
// group (o, i) of the updates viewed [outer, chain, inner] (update (o*chain + c)*inner + i);
// nd: group s, updates t*slice + s for t in order.
template <typename T>
__global__ void scatter_serial_kernel(const T* __restrict__ updates, T* __restrict__ y, ScatterArgs a, Reduction r) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; g < a.groups; g += step) {
    if (a.nd) {
      for (int64_t t = 0; t < a.tuples; ++t) {
        const int64_t base = slice_target(a, t);
        if (base < 0) continue;
        T& d = y[base + g];
        d = combine(d, updates[t * a.slice + g], r);
      }
    } else {
      const int64_t o = a.k32 ? a.inner_div.div<true>(g) : a.inner_div.div<false>(g);
      const int64_t i = g - o * a.inner;
      for (int64_t c = 0; c < a.chain; ++c) {
        const int64_t u = (o * a.chain + c) * a.inner + i;
        const int64_t tgt = element_target(a, u);
        if (tgt < 0) continue;
        y[tgt] = combine(y[tgt], updates[u], r);
      }
    }
  }
}

// ---- the kernel ---------------------------------------------------------------------------------

enum class ScatterPath { kOwner, kSerial, kAtomic };

bool is_float(DataType t) { return t == DataType::kFloat32 || t == DataType::kFloat16 || t == DataType::kFloat64; }

// The reference's types (cuda::NumericTypes and bool; not int16, uint16, uint32, uint64).
using ScatterTypes = TypeList<DataType::kFloat32, DataType::kFloat16, DataType::kFloat64, DataType::kInt32,
                              DataType::kInt64, DataType::kInt8, DataType::kUInt8, DataType::kBool>;

template <typename Fn>
void dispatch_scatter_type(DataType t, Fn&& fn) {
  if (!dispatch_type(ScatterTypes{}, t, fn)) {
    throw Error(std::string("Scatter: ") + to_string(t) + " tensors are not supported on CUDA");
  }
}

class ScatterCuda : public Kernel {
 public:
  explicit ScatterCuda(const ScatterParams& params) : params_(params), nd_(params.nd), reduction_(params.reduction) {}

  void prepare(const Layer& layer, const std::vector<TensorDesc>& inputs, const std::vector<TensorDesc>&,
               int) override {
    const Dims& data = inputs[0].dims;
    const Dims& idx = inputs[1].dims;
    const Dims& upd = inputs[2].dims;
    const std::string where = "Scatter layer '" + layer.name() + "': ";
    const int rank = data.rank();
    std::vector<int64_t> dstride(static_cast<size_t>(rank), 1);
    for (int i = rank - 2; i >= 0; --i)
      dstride[static_cast<size_t>(i)] = dstride[static_cast<size_t>(i + 1)] * data[i + 1];
    a_ = ScatterArgs{};
    a_.nd = nd_;
    a_.idx64 = inputs[1].type == DataType::kInt64;
    a_.updates = upd.volume();
    data_count_ = data.volume();
    a_.k32 = std::max(data_count_, a_.updates) < kFast32Limit;
    if (nd_) {
      a_.k = static_cast<int>(idx[idx.rank() - 1]);
      a_.slice = 1;
      for (int i = a_.k; i < rank; ++i) a_.slice *= data[i];
      a_.tuples = a_.k > 0 ? idx.volume() / a_.k : 0;
      for (int j = 0; j < a_.k; ++j) {
        a_.dims[j] = data[j];
        a_.strides[j] = dstride[static_cast<size_t>(j)];
      }
      a_.groups = a_.slice;
      a_.chain = a_.tuples;
      slots_ = a_.slice > 0 ? data_count_ / a_.slice : 0;
    } else {
      const int axis = scatter_axis(params_, rank);
      axis_ = axis;
      std::vector<int64_t> ext, str;
      for (int i = 0; i < rank; ++i) {
        if (i != axis && upd[i] > data[i]) {
          throw Error(where + "updates dims " + upd.to_string() + " exceed data dims " + data.to_string() +
                      " at axis " + std::to_string(i));
        }
        ext.push_back(upd[i]);
        str.push_back(i == axis ? 0 : dstride[static_cast<size_t>(i)]);
      }
      a_.upd_map = oph::small_map(ext, str);
      a_.axis_extent = data[axis];
      a_.axis_stride = dstride[static_cast<size_t>(axis)];
      a_.chain = upd[axis];
      a_.inner = 1;
      for (int i = axis + 1; i < rank; ++i) a_.inner *= upd[i];
      a_.inner_div = IndexDiv(a_.inner);
      a_.groups = a_.chain > 0 ? a_.updates / a_.chain : 0;
      slots_ = data_count_;
    }
    reports_errors_ = inputs[1].value == nullptr;
    if (inputs[1].value) check_indices(*inputs[1].value, data, where);

    const DataType t = inputs[0].type;
    if (reduction_ == Reduction::kNone) {
      path_ = !nd_ && a_.groups >= kNoneSerialGroups ? ScatterPath::kSerial : ScatterPath::kOwner;
    } else if (is_float(t) && (reduction_ == Reduction::kAdd || reduction_ == Reduction::kMul)) {
      const bool serial = a_.groups >= kSerialMinGroups || a_.chain <= kSerialShortChain;
      path_ = serial ? ScatterPath::kSerial : ScatterPath::kAtomic;
    } else {
      path_ = ScatterPath::kAtomic;
    }
    owner64_ = (nd_ ? a_.tuples : a_.updates) >= int64_t{0xffffffff};
  }

  size_t workspace_size() const override {
    const size_t owner = path_ == ScatterPath::kOwner ? static_cast<size_t>(slots_) * (owner64_ ? 8 : 4) : 0;
    return owner;
  }

  bool reports_device_errors() const override { return reports_errors_; }

  void execute(const KernelContext& ctx) override {
    const cudaStream_t stream = stream_of(ctx);
    const TensorView& data = ctx.inputs[0];
    const TensorView& y = ctx.outputs[0];
    const size_t es = data_type_size(data.type);
    if (data_count_ > 0 && y.data != data.data) {
      KILN_CUDA_CHECK(
          cudaMemcpyAsync(y.data, data.data, static_cast<size_t>(data_count_) * es, cudaMemcpyDeviceToDevice, stream));
    }
    if (a_.updates == 0 || data_count_ == 0) return;
    ScatterArgs a = a_;
    a.indices = ctx.inputs[1].data;
    a.flag = reports_errors_ ? ctx.device_error : nullptr;
    const void* upd = ctx.inputs[2].data;
    switch (path_) {
      case ScatterPath::kOwner: {
        void* owner = ctx.workspace;
        KILN_CUDA_CHECK(cudaMemsetAsync(owner, 0, static_cast<size_t>(slots_) * (owner64_ ? 8 : 4), stream));
        if (owner64_) {
          run_owner<unsigned long long>(a, upd, y.data, owner, es, stream);
        } else {
          run_owner<unsigned int>(a, upd, y.data, owner, es, stream);
        }
        return;
      }
      case ScatterPath::kSerial:
        dispatch_scatter_type(data.type, [&](auto tag) {
          using T = typename decltype(tag)::type;
          scatter_serial_kernel<T><<<grid_for(a.groups), kBlock, 0, stream>>>(static_cast<const T*>(upd),
                                                                              static_cast<T*>(y.data), a, reduction_);
          KILN_CUDA_CHECK_LAUNCH();
        });
        return;
      case ScatterPath::kAtomic:
        dispatch_scatter_type(data.type, [&](auto tag) {
          using T = typename decltype(tag)::type;
          if constexpr (!std::is_same_v<T, bool>) {
            scatter_atomic_kernel<T><<<grid_for(a.updates), kBlock, 0, stream>>>(
                static_cast<const T*>(upd), static_cast<T*>(y.data), a, reduction_);
            KILN_CUDA_CHECK_LAUNCH();
          }
        });
        return;
    }
  }

 private:
  template <typename O>
  void run_owner(const ScatterArgs& a, const void* upd, void* y, void* owner_ptr, size_t es, cudaStream_t stream) {
    auto* owner = static_cast<O*>(owner_ptr);
    const int64_t units = a.nd ? a.tuples : a.updates;
    scatter_owner_kernel<O><<<grid_for(units), kBlock, 0, stream>>>(owner, a);
    KILN_CUDA_CHECK_LAUNCH();
    dispatch_bytes(es, "Scatter", [&](auto tag) {
      using W = typename decltype(tag)::type;
      scatter_owned_write_kernel<W, O>
          <<<grid_for(a.updates), kBlock, 0, stream>>>(static_cast<const W*>(upd), owner, static_cast<W*>(y), a);
      KILN_CUDA_CHECK_LAUNCH();
    });
  }

  // Host-known indices: the reference's range checks, at build time.
  void check_indices(const HostTensor& indices, const Dims& data, const std::string& where) const {
    const std::vector<int64_t> v = indices.to_int64();
    auto check = [&](int64_t idx, int axis) {
      const int64_t extent = data[axis];
      if (idx < -extent || idx >= extent) {
        throw Error(where + "index " + std::to_string(idx) + " is out of range for axis " + std::to_string(axis) +
                    " of extent " + std::to_string(extent) + " (valid: " + std::to_string(-extent) + " to " +
                    std::to_string(extent - 1) + ")");
      }
    };
    if (nd_) {
      for (size_t i = 0; i < v.size(); ++i) check(v[i], static_cast<int>(i % static_cast<size_t>(a_.k)));
    } else {
      for (int64_t idx : v) check(idx, axis_);
    }
  }

  ScatterParams params_;
  bool nd_;
  Reduction reduction_;
  int axis_ = 0;
  ScatterArgs a_;
  int64_t data_count_ = 0, slots_ = 0;
  bool owner64_ = false;
  bool reports_errors_ = false;  // indices computed on the device: out-of-range ones set the flag
  ScatterPath path_ = ScatterPath::kOwner;
};

bool scatter_supports(const Layer& layer, const std::vector<TensorDesc>& inputs) {
  if (inputs.size() < 3) return false;
  for (const auto& d : inputs) {
    if (d.present && d.format != TensorFormat::kLinear) return false;
  }
  if (layer.output(0) && layer.output(0)->format() != TensorFormat::kLinear) return false;
  if (inputs[0].dims.rank() > kMaxDims || inputs[2].type != inputs[0].type) return false;
  if (inputs[1].type != DataType::kInt32 && inputs[1].type != DataType::kInt64) return false;
  if (params_of<ScatterParams>(layer).reduction != ScatterReductionKind::kNone && inputs[0].type == DataType::kBool) {
    return false;
  }
  return in_list(ScatterTypes{}, inputs[0].type);
}

}  // namespace

KILN_REGISTER_KERNEL(KernelEntry{
    DeviceType::kCUDA, kLayerScatter, "cuda", 100, scatter_supports,
    [](const Layer& layer) { return std::make_unique<ScatterCuda>(params_of<ScatterParams>(layer)); }});

}  // namespace kiln::cuda
