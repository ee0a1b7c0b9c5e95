// CUDA kernels of Concatenation and Split (docs/layers.md). Around the axis, the whole tensor
// is [outer, whole_row] and part k is [outer, row_k] placed at column offset_k of every whole
// row (rows counted in memory order, so a kChannelsLast tensor concatenated along C has
// outer = N * spatial and row_k = C_k). Two tactics:
//   - "cuda": one launch moves every part (blockIdx.y picks the part; up to kMaxParts parts per
//     launch, more take further launches), with the widest vector access (up to 16 bytes) that
//     all rows, offsets and pointers allow;
//   - "cuda_memcpy2d": one cudaMemcpy2DAsync per part (the copy engine's strided copy).
// Formats: every part and the whole in one format, kLinear or kChannelsLast (any axis).
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "src/backends/cuda/cuda_common.h"
#include "src/backends/cuda/strided_copy_cuda.cuh"
#include "src/backends/kernel.h"
#include "src/ir/data_params.h"
#include "src/ir/op_params.h"
#include "src/ir/op_schema.h"

namespace kiln {
namespace {

using cuda::IndexDiv;

constexpr int kMaxParts = 32;

// The parts of one launch; passed by value (about 1.6 KB of kernel parameters).
struct PartTable {
  int num = 0;
  int64_t whole_row = 0;  // vector units
  void* ptr[kMaxParts] = {};
  int64_t row[kMaxParts] = {};     // vector units per outer row of the part
  int64_t offset[kMaxParts] = {};  // where that row sits in the whole row
  int64_t count[kMaxParts] = {};   // outer * row
  IndexDiv row_div[kMaxParts];
};

template <typename W, bool kSplit, bool k32>
struct ConcatSplitBody {
  W* whole;
  PartTable t;
  __host__ __device__ __forceinline__ int64_t count(int k) const { return t.count[k]; }
  __host__ __device__ __forceinline__ void operator()(int k, int64_t i) const {
    W* part = static_cast<W*>(t.ptr[k]);
    const int64_t o = t.row_div[k].template div<k32>(i);
    const int64_t w = o * t.whole_row + t.offset[k] + (i - o * t.row[k]);
    if constexpr (kSplit) {
      part[i] = cuda::load_ro(whole + w);
    } else {
      whole[w] = cuda::load_ro(part + i);
    }
  }
};

// Geometry shared by both tactics, in elements.
struct Layout {
  int64_t outer = 1, whole_row = 0;
  std::vector<int64_t> row, offset;
};

Layout layout_of(const std::vector<TensorDesc>& parts, const TensorDesc& whole, int64_t axis_attr, const char* what) {
  const int rank = whole.dims.rank();
  const int64_t axis = axis_attr < 0 ? axis_attr + rank : axis_attr;
  if (axis < 0 || axis >= rank)
    throw Error(std::string(what) + ": axis " + std::to_string(axis_attr) + " out of range");
  const auto order = cuda::memory_order(rank, whole.format);
  const int pos = static_cast<int>(std::find(order.begin(), order.end(), static_cast<int>(axis)) - order.begin());
  const auto mem = cuda::memory_dims(whole.dims, whole.format);
  Layout l;
  int64_t inner = 1;
  for (int m = 0; m < rank; ++m) {
    if (m < pos) l.outer *= mem[static_cast<size_t>(m)];
    if (m > pos) inner *= mem[static_cast<size_t>(m)];
  }
  int64_t acc = 0;
  for (const TensorDesc& p : parts) {
    if (p.dims.rank() != rank) throw Error(std::string(what) + ": parts must have the whole tensor's rank");
    l.row.push_back(p.dims[static_cast<int>(axis)] * inner);
    l.offset.push_back(acc);
    acc += l.row.back();
  }
  l.whole_row = acc;
  if (acc != whole.dims[static_cast<int>(axis)] * inner) {
    throw Error(std::string(what) + ": the parts' extents along the axis do not add up to the whole tensor's");
  }
  return l;
}

class ConcatSplitCuda : public Kernel {
 public:
  ConcatSplitCuda(const Layer& layer, bool split, bool memcpy2d)
      : axis_(split ? params_of<SplitParams>(layer).axis : params_of<ConcatenationParams>(layer).axis),
        split_(split),
        memcpy2d_(memcpy2d) {}

  void prepare(const Layer&, const std::vector<TensorDesc>& inputs, const std::vector<TensorDesc>& outputs,
               int) override {
    const auto& parts = split_ ? outputs : inputs;
    const TensorDesc& whole = split_ ? inputs.at(0) : outputs.at(0);
    layout_ = layout_of(parts, whole, axis_, what());
    elem_ = data_type_size(whole.type);
  }

  void execute(const KernelContext& ctx) override {
    const auto& parts = split_ ? ctx.outputs : ctx.inputs;
    void* whole = split_ ? ctx.inputs.at(0).data : ctx.outputs.at(0).data;
    const cudaStream_t stream = cuda::stream_of(ctx);
    if (layout_.outer == 0 || layout_.whole_row == 0) return;
    if (memcpy2d_) return execute_memcpy2d(parts, whole, stream);
    std::vector<int64_t> multiples{layout_.whole_row};
    std::vector<const void*> pointers{whole};
    for (size_t k = 0; k < parts.size(); ++k) {
      if (layout_.row[k] == 0) continue;
      multiples.push_back(layout_.row[k]);
      multiples.push_back(layout_.offset[k]);
      pointers.push_back(parts[k].data);
    }
    const size_t w = cuda::vector_bytes(elem_, multiples, pointers);
    const int64_t f = static_cast<int64_t>(w / elem_);
    PartTable t;
    t.whole_row = layout_.whole_row / f;
    int64_t max_count = 0;
    auto flush = [&]() {
      if (t.num == 0) return;
      const bool k32 = layout_.outer * t.whole_row < cuda::kFast32Limit;
      cuda::dispatch_bytes(w, what(), [&](auto tag) {
        using W = typename decltype(tag)::type;
        W* p = static_cast<W*>(whole);
        if (split_) {
          if (k32)
            cuda::launch_for_each_part(ConcatSplitBody<W, true, true>{p, t}, t.num, max_count, stream);
          else
            cuda::launch_for_each_part(ConcatSplitBody<W, true, false>{p, t}, t.num, max_count, stream);
        } else {
          if (k32)
            cuda::launch_for_each_part(ConcatSplitBody<W, false, true>{p, t}, t.num, max_count, stream);
          else
            cuda::launch_for_each_part(ConcatSplitBody<W, false, false>{p, t}, t.num, max_count, stream);
        }
      });
      t.num = 0;
      max_count = 0;
    };
    for (size_t k = 0; k < parts.size(); ++k) {
      if (layout_.row[k] == 0) continue;
      const int i = t.num++;
      t.ptr[i] = parts[k].data;
      t.row[i] = layout_.row[k] / f;
      t.offset[i] = layout_.offset[k] / f;
      t.count[i] = layout_.outer * t.row[i];
      t.row_div[i] = IndexDiv(t.row[i]);
      max_count = std::max(max_count, t.count[i]);
      if (t.num == kMaxParts) flush();
    }
    flush();
  }

 private:
  const char* what() const { return split_ ? "Split" : "Concatenation"; }

  void execute_memcpy2d(const std::vector<TensorView>& parts, void* whole, cudaStream_t stream) const {
    const size_t e = elem_;
    for (size_t k = 0; k < parts.size(); ++k) {
      if (layout_.row[k] == 0) continue;
      char* w = static_cast<char*>(whole) + layout_.offset[k] * static_cast<int64_t>(e);
      const size_t width = static_cast<size_t>(layout_.row[k]) * e, pitch = static_cast<size_t>(layout_.whole_row) * e;
      const size_t height = static_cast<size_t>(layout_.outer);
      if (split_) {
        cuda::copy_2d_async(parts[k].data, width, w, pitch, width, height, stream);
      } else {
        cuda::copy_2d_async(w, pitch, parts[k].data, width, width, height, stream);
      }
    }
  }

  int64_t axis_;
  bool split_, memcpy2d_;
  Layout layout_;
  size_t elem_ = 1;
};

// Every part and the whole in one format; element widths the kernels move.
bool same_formats(const Layer& layer, const std::vector<TensorDesc>& inputs) {
  if (inputs.empty()) return false;
  const TensorFormat f = inputs[0].format;
  for (const auto& d : inputs) {
    if (d.present && d.format != f) return false;
  }
  for (int i = 0; i < layer.num_outputs(); ++i) {
    if (!layer.output(i) || layer.output(i)->format() != f) return false;
  }
  const size_t e = data_type_size(inputs[0].type);
  return e == 1 || e == 2 || e == 4 || e == 8;
}

bool supports_concat(const Layer& layer, const std::vector<TensorDesc>& inputs) { return same_formats(layer, inputs); }

// Split's input 1 (sizes) is a host shape input, not a part: only input 0 has a format that matters.
bool supports_split(const Layer& layer, const std::vector<TensorDesc>& inputs) {
  return !inputs.empty() && same_formats(layer, {inputs[0]});
}

// cudaMemcpy2DAsync takes pitches up to the device's memPitch (2^31 - 1 bytes on current GPUs):
// keep the whole tensor below that.
bool pitch_fits(const std::vector<TensorDesc>& inputs, bool split) {
  int64_t count = 0;
  for (size_t i = 0; i < (split ? size_t{1} : inputs.size()); ++i) {
    if (!inputs[i].present) continue;
    if (inputs[i].dims.is_dynamic()) return false;
    count += inputs[i].dims.volume();
  }
  return count * static_cast<int64_t>(data_type_size(inputs.at(0).type)) < (int64_t{1} << 31);
}

KernelFactory factory(bool split, bool memcpy2d) {
  return [split, memcpy2d](const Layer& layer) { return std::make_unique<ConcatSplitCuda>(layer, split, memcpy2d); };
}

}  // namespace

KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCUDA, kLayerConcatenation, "cuda", 10, supports_concat,
                                 factory(false, false)});
KILN_REGISTER_KERNEL(KernelEntry{
    DeviceType::kCUDA, kLayerConcatenation, "cuda_memcpy2d", 5,
    [](const Layer& l, const std::vector<TensorDesc>& in) { return supports_concat(l, in) && pitch_fits(in, false); },
    factory(false, true)});
KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCUDA, kLayerSplit, "cuda", 10, supports_split, factory(true, false)});
KILN_REGISTER_KERNEL(KernelEntry{
    DeviceType::kCUDA, kLayerSplit, "cuda_memcpy2d", 5,
    [](const Layer& l, const std::vector<TensorDesc>& in) { return supports_split(l, in) && pitch_fits(in, true); },
    factory(true, true)});

}  // namespace kiln
