// CUDA kernels of Slice and Gather (modes "default", "elements", "nd"; docs/layers.md).
// Slice: starts/axes/steps are host shape inputs, so prepare() turns the slice into a strided
// copy (strided_copy_cuda.cuh): stride * step per axis (negative steps read backwards), base at the
// clamped starts; whole-row slices merge into long runs copied with vector accesses.
// Gather: indices are int32/int64 tensors read on the device; negative indices wrap. An index out
// of range is an error (docs/layers.md). When the indices are host-known (constants, the usual
// case) prepare() checks them all and throws a kiln::Error naming the index, as the CPU
// reference does. When they are computed on the device no host check is possible without a
// synchronization, so the kernels write zero for such an element and set the layer's device
// error flag (KernelContext::device_error), which the runtime reads after the inference and
// turns into an error naming the layer. Default and nd gathers move contiguous slices with vector accesses (up to
// 16 bytes) when the slice length and pointers allow. Layout: kLinear only; any element type.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "src/backends/cuda/cuda_common.h"
#include "src/backends/cuda/strided_copy_cuda.cuh"
#include "src/backends/kernel.h"
#include "src/ir/gather_params.h"
#include "src/ir/op_params.h"
#include "src/ir/op_schema.h"

namespace kiln {
namespace {

using cuda::IndexDiv;

int64_t norm_axis(int64_t axis, int rank) { return axis < 0 ? axis + rank : axis; }

bool linear_io(const Layer& layer, const std::vector<TensorDesc>& inputs) {
  for (const auto& d : inputs) {
    if (d.present && d.format != TensorFormat::kLinear) return false;
  }
  for (int i = 0; i < layer.num_outputs(); ++i) {
    if (!layer.output(i) || layer.output(i)->format() != TensorFormat::kLinear) return false;
  }
  const size_t e = inputs.empty() ? 0 : data_type_size(inputs[0].type);
  return e == 1 || e == 2 || e == 4 || e == 8;
}

bool is_index_type(DataType t) { return t == DataType::kInt32 || t == DataType::kInt64; }

// ---- Slice -------------------------------------------------------------------------------------

class SliceCuda : public Kernel {
 public:
  void prepare(const Layer&, const std::vector<TensorDesc>& inputs, const std::vector<TensorDesc>& outputs,
               int) override {
    const Dims& x = inputs.at(0).dims;
    const Dims& y = outputs.at(0).dims;
    const int rank = x.rank();
    const auto values = [&](size_t i, const char* name) {
      if (!inputs.at(i).value) throw Error(std::string("Slice (CUDA): ") + name + " must be known on the host");
      return inputs[i].value->to_int64();
    };
    const auto starts = values(1, "starts");
    std::vector<int64_t> axes, steps;
    if (inputs.size() > 3 && inputs[3].present) {
      axes = values(3, "axes");
    } else {
      for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
    }
    if (inputs.size() > 4 && inputs[4].present) {
      steps = values(4, "steps");
    } else {
      steps.assign(starts.size(), 1);
    }
    if (axes.size() != starts.size() || steps.size() != starts.size() || y.rank() != rank) {
      throw Error("Slice (CUDA): starts, axes and steps differ in length");
    }
    // As the CPU reference: clamp the start into [0, d] (positive step) or [0, d - 1] (negative).
    std::vector<int64_t> start(static_cast<size_t>(rank), 0), step(static_cast<size_t>(rank), 1);
    for (size_t i = 0; i < axes.size(); ++i) {
      const auto k = static_cast<size_t>(norm_axis(axes[i], rank));
      const int64_t d = x[static_cast<int>(k)];
      if (d == 0) continue;
      int64_t s = starts[i];
      if (s < 0) s += d;
      s = steps[i] > 0 ? std::clamp<int64_t>(s, 0, d) : std::clamp<int64_t>(s, 0, d - 1);
      start[k] = s;
      step[k] = steps[i];
    }
    const auto stride = row_major_strides(x.to_vector());
    map_ = cuda::StridedMap{};
    for (int k = 0; k < rank; ++k) {
      const auto u = static_cast<size_t>(k);
      map_.push(y[k], stride[u] * step[u]);
      if (y[k] > 0) map_.base += start[u] * stride[u];
    }
    elem_ = data_type_size(inputs[0].type);
  }

  void execute(const KernelContext& ctx) override {
    if (ctx.outputs.at(0).count() == 0) return;
    cuda::strided_copy(map_, elem_, ctx.inputs.at(0).data, ctx.outputs.at(0).data, cuda::stream_of(ctx), "Slice");
  }

 private:
  cuda::StridedMap map_;
  size_t elem_ = 1;
};

bool supports_slice(const Layer& layer, const std::vector<TensorDesc>& inputs) {
  if (inputs.size() < 3 || !linear_io(layer, {inputs[0]})) return false;
  for (size_t i = 1; i < inputs.size(); ++i) {
    if (i != 2 && inputs[i].present && !inputs[i].value) return false;  // ends only shape the output
  }
  return true;
}

// ---- Gather kernels ----------------------------------------------------------------------------

// Wraps a negative index; false when out of range.
template <typename I>
__host__ __device__ __forceinline__ bool wrap_index(I raw, int64_t extent, int64_t& out) {
  int64_t a = static_cast<int64_t>(raw);
  if (a < 0) a += extent;
  out = a;
  return a >= 0 && a < extent;
}

__host__ __device__ __forceinline__ void flag_error(int* error) {
  if (error) *error = 1;
}

// out[o, t, j] = data[o, idx[t], j] over [outer, n, inner] (inner in vector units).
struct GatherDefaultParams {
  int64_t n = 0, inner = 0, extent = 0;
  IndexDiv inner_div, n_div;
};

template <typename W, typename I, bool k32>
struct GatherDefaultBody {
  const W* data;
  const I* idx;
  W* out;
  int* error;
  GatherDefaultParams p;
  __host__ __device__ __forceinline__ void operator()(int64_t i) const {
    const int64_t q = p.inner_div.template div<k32>(i);
    const int64_t j = i - q * p.inner;
    const int64_t o = p.n_div.template div<k32>(q);
    const int64_t t = q - o * p.n;
    int64_t a;
    if (!wrap_index(cuda::load_ro(idx + t), p.extent, a)) {
      out[i] = W{};
      flag_error(error);
      return;
    }
    out[i] = cuda::load_ro(data + (o * p.extent + a) * p.inner + j);
  }
};

// GatherElements: out[c] = data[c with c[axis] = idx[c]]; out and idx share dims.
struct GatherElementsParams {
  int rank = 0, axis = 0;
  int64_t extent = 0, axis_stride = 0;
  IndexDiv div[kMaxDims];
  int64_t stride[kMaxDims] = {};  // data strides, 0 on the gather axis
};

template <typename W, typename I, bool k32>
struct GatherElementsBody {
  const W* data;
  const I* idx;
  W* out;
  int* error;
  GatherElementsParams p;
  __host__ __device__ __forceinline__ void operator()(int64_t i) const {
    int64_t rest = i, off = 0;
    KILN_UNROLL
    for (int k = kMaxDims - 1; k >= 0; --k) {
      if (k < p.rank) {
        int64_t c = rest;
        if (k > 0) {
          const int64_t q = p.div[k].template div<k32>(rest);
          c = rest - q * p.div[k].d;
          rest = q;
        }
        off += c * p.stride[k];
      }
    }
    int64_t a;
    if (!wrap_index(cuda::load_ro(idx + i), p.extent, a)) {
      out[i] = W{};
      flag_error(error);
      return;
    }
    out[i] = cuda::load_ro(data + off + a * p.axis_stride);
  }
};

// GatherND: out[b, t, s] = data[b, tuple(b, t)..., s] (slice and strides in vector units).
struct GatherNdParams {
  int k = 0;
  int64_t slice = 0, tuples = 0, batch_stride = 0;
  IndexDiv slice_div, tuples_div;
  int64_t extent[kMaxDims] = {};
  int64_t stride[kMaxDims] = {};
};

template <typename W, typename I, bool k32>
struct GatherNdBody {
  const W* data;
  const I* idx;
  W* out;
  int* error;
  GatherNdParams p;
  __host__ __device__ __forceinline__ void operator()(int64_t i) const {
    const int64_t q = p.slice_div.template div<k32>(i);  // batch * tuples + tuple
    const int64_t s = i - q * p.slice;
    const int64_t b = p.tuples_div.template div<k32>(q);
    int64_t off = b * p.batch_stride + s;
    bool ok = true;
    const I* tuple = idx + q * p.k;
    KILN_UNROLL
    for (int j = 0; j < kMaxDims; ++j) {
      if (j < p.k) {
        int64_t a;
        ok = wrap_index(cuda::load_ro(tuple + j), p.extent[j], a) && ok;
        off += a * p.stride[j];
      }
    }
    if (!ok) {
      out[i] = W{};
      flag_error(error);
      return;
    }
    out[i] = cuda::load_ro(data + off);
  }
};

// ---- Gather host side --------------------------------------------------------------------------

// The CPU reference's message for a bad host-known index.
void check_index(int64_t idx, int64_t extent, int64_t axis) {
  if (idx < -extent || idx >= extent) {
    throw Error("Gather: index " + std::to_string(idx) + " is out of range for axis " + std::to_string(axis) +
                " of extent " + std::to_string(extent) + " (valid: " + std::to_string(-extent) + " to " +
                std::to_string(extent - 1) + ")");
  }
}

class GatherCuda : public Kernel {
 public:
  explicit GatherCuda(const GatherParams& params)
      : params_(params), mode_(params.mode), batch_dims_(params.batch_dims) {}

  void prepare(const Layer&, const std::vector<TensorDesc>& inputs, const std::vector<TensorDesc>& outputs,
               int) override {
    data_ = inputs.at(0).dims;
    idx_ = inputs.at(1).dims;
    out_ = outputs.at(0).dims;
    elem_ = data_type_size(inputs[0].type);
    index_type_ = inputs[1].type;
    const HostTensor* value = inputs[1].value;
    const std::vector<int64_t> known = value ? value->to_int64() : std::vector<int64_t>{};
    const int rank = data_.rank();
    switch (mode_) {
      case GatherMode::kDefault:
      case GatherMode::kElements: {
        axis_ = gather_axis(params_, rank);
        for (int64_t v : known) check_index(v, data_[axis_], axis_);
        break;
      }
      case GatherMode::kNd: {
        const int b = static_cast<int>(batch_dims_), q = idx_.rank();
        const int k = q > 0 ? static_cast<int>(idx_[q - 1]) : 0;
        if (q < 1 || b < 0 || b + k > rank) throw Error("Gather nd: indices do not fit the data");
        for (size_t t = 0; t < known.size(); ++t) {
          const int j = static_cast<int>(t % static_cast<size_t>(k));
          check_index(known[t], data_[b + j], b + j);
        }
        break;
      }
    }
    reports_errors_ = value == nullptr;
  }

  bool reports_device_errors() const override { return reports_errors_; }

  void execute(const KernelContext& ctx) override {
    const TensorView& data = ctx.inputs.at(0);
    const TensorView& idx = ctx.inputs.at(1);
    const TensorView& y = ctx.outputs.at(0);
    if (y.count() == 0) return;
    const cudaStream_t stream = cuda::stream_of(ctx);
    int* error = reports_errors_ ? ctx.device_error : nullptr;
    const auto by_index_type = [&](auto&& fn) {
      if (index_type_ == DataType::kInt64) {
        fn(static_cast<const int64_t*>(idx.data));
      } else {
        fn(static_cast<const int32_t*>(idx.data));
      }
    };
    by_index_type([&](auto* indices) {
      switch (mode_) {
        case GatherMode::kDefault:
          return run_default(data.data, indices, y.data, error, stream);
        case GatherMode::kElements:
          return run_elements(data.data, indices, y.data, error, stream);
        case GatherMode::kNd:
          return run_nd(data.data, indices, y.data, error, stream);
      }
    });
  }

 private:
  template <typename I>
  void run_default(const void* data, const I* idx, void* out, int* error, cudaStream_t stream) const {
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < data_.rank(); ++i) {
      if (i < axis_) outer *= data_[i];
      if (i > axis_) inner *= data_[i];
    }
    const int64_t n = idx_.volume();
    const size_t w = cuda::vector_bytes(elem_, {inner}, {data, out});
    GatherDefaultParams p;
    p.n = n;
    p.inner = inner / static_cast<int64_t>(w / elem_);
    p.extent = data_[axis_];
    p.inner_div = IndexDiv(p.inner);
    p.n_div = IndexDiv(n);
    const int64_t total = outer * n * p.inner;
    cuda::dispatch_bytes(w, "Gather", [&](auto tag) {
      using W = typename decltype(tag)::type;
      const auto* d = static_cast<const W*>(data);
      auto* o = static_cast<W*>(out);
      if (total < cuda::kFast32Limit) {
        cuda::launch_for_each(GatherDefaultBody<W, I, true>{d, idx, o, error, p}, total, stream);
      } else {
        cuda::launch_for_each(GatherDefaultBody<W, I, false>{d, idx, o, error, p}, total, stream);
      }
    });
  }

  template <typename I>
  void run_elements(const void* data, const I* idx, void* out, int* error, cudaStream_t stream) const {
    GatherElementsParams p;
    p.rank = out_.rank();
    p.axis = axis_;
    p.extent = data_[axis_];
    const auto stride = row_major_strides(data_.to_vector());
    p.axis_stride = stride[static_cast<size_t>(axis_)];
    for (int k = 0; k < p.rank; ++k) {
      p.div[k] = IndexDiv(out_[k]);
      p.stride[k] = k == axis_ ? 0 : stride[static_cast<size_t>(k)];
    }
    const int64_t total = out_.volume();
    cuda::dispatch_bytes(elem_, "Gather", [&](auto tag) {
      using W = typename decltype(tag)::type;
      const auto* d = static_cast<const W*>(data);
      auto* o = static_cast<W*>(out);
      if (total < cuda::kFast32Limit) {
        cuda::launch_for_each(GatherElementsBody<W, I, true>{d, idx, o, error, p}, total, stream);
      } else {
        cuda::launch_for_each(GatherElementsBody<W, I, false>{d, idx, o, error, p}, total, stream);
      }
    });
  }

  template <typename I>
  void run_nd(const void* data, const I* idx, void* out, int* error, cudaStream_t stream) const {
    const int b = static_cast<int>(batch_dims_), q = idx_.rank();
    const int k = static_cast<int>(idx_[q - 1]);
    int64_t batches = 1, tuples = 1, slice = 1;
    for (int i = 0; i < b; ++i) batches *= data_[i];
    for (int i = b; i < q - 1; ++i) tuples *= idx_[i];
    for (int i = b + k; i < data_.rank(); ++i) slice *= data_[i];
    const auto stride = row_major_strides(data_.to_vector());
    const size_t w = cuda::vector_bytes(elem_, {slice}, {data, out});
    const int64_t f = static_cast<int64_t>(w / elem_);
    GatherNdParams p;
    p.k = k;
    p.slice = slice / f;
    p.tuples = tuples;
    // Strides of the indexed axes and of the batch are multiples of the slice, hence of f.
    p.batch_stride = (b > 0 ? stride[static_cast<size_t>(b - 1)] : data_.volume()) / f;
    p.slice_div = IndexDiv(p.slice);
    p.tuples_div = IndexDiv(tuples);
    for (int j = 0; j < k; ++j) {
      p.extent[j] = data_[b + j];
      p.stride[j] = stride[static_cast<size_t>(b + j)] / f;
    }
    const int64_t total = batches * tuples * p.slice;
    cuda::dispatch_bytes(w, "Gather", [&](auto tag) {
      using W = typename decltype(tag)::type;
      const auto* d = static_cast<const W*>(data);
      auto* o = static_cast<W*>(out);
      if (total < cuda::kFast32Limit) {
        cuda::launch_for_each(GatherNdBody<W, I, true>{d, idx, o, error, p}, total, stream);
      } else {
        cuda::launch_for_each(GatherNdBody<W, I, false>{d, idx, o, error, p}, total, stream);
      }
    });
  }

  GatherParams params_;
  GatherMode mode_;
  int64_t batch_dims_;
  int axis_ = 0;
  Dims data_, idx_, out_;
  size_t elem_ = 1;
  DataType index_type_ = DataType::kInt64;
  bool reports_errors_ = false;  // indices computed on the device: out-of-range ones set the flag
};

bool supports_gather(const Layer& layer, const std::vector<TensorDesc>& inputs) {
  if (inputs.size() < 2 || !linear_io(layer, {inputs[0]}) || inputs[1].format != TensorFormat::kLinear) return false;
  if (!is_index_type(inputs[1].type)) return false;
  const GatherParams& p = params_of<GatherParams>(layer);
  if (p.mode == GatherMode::kNd) {
    const Dims& idx = inputs[1].dims;
    if (idx.rank() < 1 || idx[idx.rank() - 1] > kMaxDims || p.batch_dims < 0) return false;
  }
  return true;
}

}  // namespace

KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCUDA, kLayerSlice, "cuda", 10, supports_slice,
                                 [](const Layer&) { return std::make_unique<SliceCuda>(); }});
KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCUDA, kLayerGather, "cuda", 10, supports_gather, [](const Layer& layer) {
                                   return std::make_unique<GatherCuda>(params_of<GatherParams>(layer));
                                 }});

}  // namespace kiln
