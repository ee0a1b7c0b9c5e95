// cuDNN tactics of Convolution (cudnnConvolutionForward / cudnnConvolutionBiasActivationForward)
// and Deconvolution (cudnnConvolutionBackwardData), through cuDNN 9's legacy descriptor API.
//
// Tactics: "cudnn" lets cuDNN's heuristic choose the algorithm (cudnnGet*Algorithm_v7, preferring
// deterministic algorithms); "cudnn_<algorithm>" forces one algorithm so that the builder can time
// them all. prepare() throws kiln::Error when cuDNN declines the algorithm for the shapes (the
// builder then skips the tactic).
//
// Geometry: 1-D runs as 2-D with H = 1, 3-D as 5-D descriptors. cuDNN only takes symmetric pads:
//   - Convolution with pads (b, e), b != e: cuDNN pads min(b, e) itself and the input is first
//     copied into the workspace with the remaining |b - e| zeros on one side (one extra pass).
//   - Deconvolution: with cuDNN pad b the output extent cuDNN accepts is (in-1)*s - 2b + span + r,
//     0 <= r < s; when b - e + output_padding is such an r, cuDNN writes y directly. Otherwise it
//     computes the unpadded transposed convolution into the workspace and the epilogue crops the
//     layer's window out of it (positions past cuDNN's extent receive no tap: they are 0 + bias).
// Post-ops: Convolution with relu or no activation uses cudnnConvolutionBiasActivationForward
// (z = the residual with alpha2 = 1; a zero bias when the layer has none; identity only with
// IMPLICIT_PRECOMP_GEMM, as cuDNN requires); everything else runs the convolution and then one
// epilogue kernel (epilogue_cuda.h) in place on y. Should cuDNN refuse the fused call at run time,
// the kernel falls back to the unfused pair for good.
// Host cost: execute() creates no descriptor and allocates nothing; it sets the handle's stream
// and makes one or two library calls (plus the epilogue kernel). What remains is cuDNN's own cost
// per legacy call, large for its fastest kernels (see docs/cuda-backend.md), which is why the
// graph-API and cuBLASLt tactics exist.
// Types/formats: float32 and float16 (float accumulation: CUDNN_DATA_FLOAT compute type),
// kLinear (NCHW) and kChannelsLast (NHWC / NDHWC; cuDNN then gets a KRSC filter: for constant
// weights the engine-wide prepared copy of conv_cuda.h, shared by every kernel object of the
// layer (shapes x contexts), else re-converted by execute() at every run). float16 uses tensor
// cores (CUDNN_TENSOR_OP_MATH); float32 is restricted to FMA kernels (CUDNN_FMA_MATH) so that it
// never silently runs in TF32.
#include <algorithm>
#include <climits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "src/backends/cuda/conv_cuda.h"
#include "src/backends/cuda/cuda_common.h"
#include "src/backends/cuda/epilogue_cuda.h"

namespace kiln::cuda {
namespace {

// Workspace limits: the heuristic tactic skips algorithms above the first, a forced algorithm
// above the second is declined (prepare throws).
constexpr size_t kHeuristicWorkspaceLimit = size_t{1} << 30;
constexpr size_t kForcedWorkspaceLimit = size_t{4} << 30;

// ---- descriptor owners ----------------------------------------------------------------------

class TensorDescriptor {
 public:
  TensorDescriptor() { KILN_CUDNN_CHECK(cudnnCreateTensorDescriptor(&d_)); }
  ~TensorDescriptor() { cudnnDestroyTensorDescriptor(d_); }
  TensorDescriptor(const TensorDescriptor&) = delete;
  TensorDescriptor& operator=(const TensorDescriptor&) = delete;
  cudnnTensorDescriptor_t get() const { return d_; }

 private:
  cudnnTensorDescriptor_t d_ = nullptr;
};

class FilterDescriptor {
 public:
  FilterDescriptor() { KILN_CUDNN_CHECK(cudnnCreateFilterDescriptor(&d_)); }
  ~FilterDescriptor() { cudnnDestroyFilterDescriptor(d_); }
  FilterDescriptor(const FilterDescriptor&) = delete;
  FilterDescriptor& operator=(const FilterDescriptor&) = delete;
  cudnnFilterDescriptor_t get() const { return d_; }

 private:
  cudnnFilterDescriptor_t d_ = nullptr;
};

class ConvolutionDescriptor {
 public:
  ConvolutionDescriptor() { KILN_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&d_)); }
  ~ConvolutionDescriptor() { cudnnDestroyConvolutionDescriptor(d_); }
  ConvolutionDescriptor(const ConvolutionDescriptor&) = delete;
  ConvolutionDescriptor& operator=(const ConvolutionDescriptor&) = delete;
  cudnnConvolutionDescriptor_t get() const { return d_; }

 private:
  cudnnConvolutionDescriptor_t d_ = nullptr;
};

class ActivationDescriptor {
 public:
  ActivationDescriptor() { KILN_CUDNN_CHECK(cudnnCreateActivationDescriptor(&d_)); }
  ~ActivationDescriptor() { cudnnDestroyActivationDescriptor(d_); }
  ActivationDescriptor(const ActivationDescriptor&) = delete;
  ActivationDescriptor& operator=(const ActivationDescriptor&) = delete;
  cudnnActivationDescriptor_t get() const { return d_; }

 private:
  cudnnActivationDescriptor_t d_ = nullptr;
};

// ---- geometry helpers -----------------------------------------------------------------------

// cuDNN's rank for a shape: 4 for 1-D/2-D (1-D as H = 1), 5 for 3-D.
int cudnn_rank(const ConvShape& s) { return s.spatial_rank == 3 ? 5 : 4; }

int to_int(int64_t v, const std::string& what) {
  if (v < 0 || v > INT_MAX) throw Error(what + ": extent " + std::to_string(v) + " does not fit cuDNN's 32-bit dims");
  return static_cast<int>(v);
}

// [a, b, spatial...] in cuDNN's rank (the right-aligned slots of Spatial3).
std::vector<int> nd_dims(int rank, int64_t a, int64_t b, const Spatial3& sp, const std::string& what) {
  std::vector<int> d{to_int(a, what), to_int(b, what)};
  for (int i = 5 - rank; i < 3; ++i) d.push_back(to_int(sp[static_cast<size_t>(i)], what));
  return d;
}

std::vector<int> nd_spatial(int rank, const Spatial3& sp, const std::string& what) {
  std::vector<int> d;
  for (int i = 5 - rank; i < 3; ++i) d.push_back(to_int(sp[static_cast<size_t>(i)], what));
  return d;
}

// A packed activation tensor [N, C, spatial...] in `format`.
void set_tensor(const TensorDescriptor& desc, DataType type, TensorFormat format, const std::vector<int>& dims) {
  const int rank = static_cast<int>(dims.size());
  std::vector<int> strides(dims.size());
  if (format == TensorFormat::kChannelsLast) {
    int acc = dims[1];
    strides[1] = 1;
    for (int i = rank - 1; i >= 2; --i) {
      strides[static_cast<size_t>(i)] = acc;
      acc *= dims[static_cast<size_t>(i)];
    }
    strides[0] = acc;
  } else {
    int acc = 1;
    for (int i = rank - 1; i >= 0; --i) {
      strides[static_cast<size_t>(i)] = acc;
      acc *= dims[static_cast<size_t>(i)];
    }
  }
  KILN_CUDNN_CHECK(cudnnSetTensorNdDescriptor(desc.get(), cudnn_type(type), rank, dims.data(), strides.data()));
}

void set_filter(const FilterDescriptor& desc, DataType type, TensorFormat format, const std::vector<int>& dims) {
  const cudnnTensorFormat_t f = format == TensorFormat::kChannelsLast ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
  KILN_CUDNN_CHECK(
      cudnnSetFilterNdDescriptor(desc.get(), cudnn_type(type), f, static_cast<int>(dims.size()), dims.data()));
}

void set_convolution(const ConvolutionDescriptor& desc, const ConvShape& s, const Spatial3& pads,
                     const std::string& what) {
  const int rank = cudnn_rank(s);
  const std::vector<int> p = nd_spatial(rank, pads, what), st = nd_spatial(rank, s.stride, what),
                         dl = nd_spatial(rank, s.dilation, what);
  KILN_CUDNN_CHECK(cudnnSetConvolutionNdDescriptor(desc.get(), rank - 2, p.data(), st.data(), dl.data(),
                                                   CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  KILN_CUDNN_CHECK(cudnnSetConvolutionGroupCount(desc.get(), to_int(s.group, what)));
  KILN_CUDNN_CHECK(
      cudnnSetConvolutionMathType(desc.get(), s.type == DataType::kFloat16 ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH));
}

size_t element_size(const ConvShape& s) { return data_type_size(s.type); }

std::string layer_label(const Layer& layer, const char* type, const std::string& tactic) {
  return std::string(type) + " layer '" + layer.name() + "' (CUDA tactic " + tactic + ")";
}

bool falls_back(cudnnStatus_t status) {
  const int category = CUDNN_STATUS_CATEGORY(static_cast<int>(status));
  return category == CUDNN_STATUS_NOT_SUPPORTED || category == CUDNN_STATUS_BAD_PARAM;
}

// ---- algorithm choice -----------------------------------------------------------------------
//
// Convolution runs cudnnConvolutionForward and Deconvolution cudnnConvolutionBackwardData; both
// choose their algorithm the same way (choose_algorithm below) through these traits: the
// algorithm and perf types and cuDNN's heuristic and workspace queries of the direction. The
// descriptors are passed in the forward convolution's roles: `x` the convolution's input (the
// deconvolution's dx), `y` its output (the deconvolution's input dy).

struct ForwardAlgorithms {
  using Algo = cudnnConvolutionFwdAlgo_t;
  using Perf = cudnnConvolutionFwdAlgoPerf_t;
  static constexpr int kCount = CUDNN_CONVOLUTION_FWD_ALGO_COUNT;
  static void heuristic(cudnnHandle_t handle, cudnnTensorDescriptor_t x, cudnnFilterDescriptor_t w,
                        cudnnConvolutionDescriptor_t conv, cudnnTensorDescriptor_t y, int* returned, Perf* perf) {
    KILN_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(handle, x, w, conv, y, kCount, returned, perf));
  }
  static cudnnStatus_t workspace(cudnnHandle_t handle, cudnnTensorDescriptor_t x, cudnnFilterDescriptor_t w,
                                 cudnnConvolutionDescriptor_t conv, cudnnTensorDescriptor_t y, Algo algo,
                                 size_t* bytes) {
    return cudnnGetConvolutionForwardWorkspaceSize(handle, x, w, conv, y, algo, bytes);
  }
};

struct BackwardDataAlgorithms {
  using Algo = cudnnConvolutionBwdDataAlgo_t;
  using Perf = cudnnConvolutionBwdDataAlgoPerf_t;
  static constexpr int kCount = CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT;
  static void heuristic(cudnnHandle_t handle, cudnnTensorDescriptor_t dx, cudnnFilterDescriptor_t w,
                        cudnnConvolutionDescriptor_t conv, cudnnTensorDescriptor_t dy, int* returned, Perf* perf) {
    KILN_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(handle, w, dy, conv, dx, kCount, returned, perf));
  }
  static cudnnStatus_t workspace(cudnnHandle_t handle, cudnnTensorDescriptor_t dx, cudnnFilterDescriptor_t w,
                                 cudnnConvolutionDescriptor_t conv, cudnnTensorDescriptor_t dy, Algo algo,
                                 size_t* bytes) {
    return cudnnGetConvolutionBackwardDataWorkspaceSize(handle, w, dy, conv, dx, algo, bytes);
  }
};

// An algorithm and its workspace (bytes rounded to the workspace granule).
template <class Traits>
struct AlgoChoice {
  typename Traits::Algo algo;
  size_t bytes = 0;
};

// The forced algorithm when there is one (declined when cuDNN does not support it for these
// descriptors or it needs more than kForcedWorkspaceLimit); otherwise the first algorithm of
// cuDNN's heuristic that succeeds within kHeuristicWorkspaceLimit, deterministic ones first.
// Throws kiln::Error starting with `what`.
template <class Traits>
AlgoChoice<Traits> choose_algorithm(const std::string& what, const std::optional<typename Traits::Algo>& forced,
                                    cudnnTensorDescriptor_t x, cudnnFilterDescriptor_t w,
                                    cudnnConvolutionDescriptor_t conv, cudnnTensorDescriptor_t y) {
  const cudnnHandle_t handle = cudnn_handle();
  if (forced) {
    size_t bytes = 0;
    const cudnnStatus_t st = Traits::workspace(handle, x, w, conv, y, *forced, &bytes);
    if (st != CUDNN_STATUS_SUCCESS) {
      throw Error(what + ": cuDNN does not support this algorithm for these shapes (" + cudnnGetErrorString(st) + ")");
    }
    if (bytes > kForcedWorkspaceLimit) {
      throw Error(what + ": the algorithm needs " + std::to_string(bytes >> 20) + " MiB of workspace; declined");
    }
    return {*forced, workspace_granule(bytes)};
  }
  typename Traits::Perf perf[Traits::kCount];
  int returned = 0;
  Traits::heuristic(handle, x, w, conv, y, &returned, perf);
  for (int pass = 0; pass < 2; ++pass) {
    for (int i = 0; i < returned; ++i) {
      const typename Traits::Perf& p = perf[i];
      if (p.status != CUDNN_STATUS_SUCCESS || (pass == 0 && p.determinism != CUDNN_DETERMINISTIC)) continue;
      size_t bytes = 0;
      if (Traits::workspace(handle, x, w, conv, y, p.algo, &bytes) != CUDNN_STATUS_SUCCESS ||
          bytes > kHeuristicWorkspaceLimit) {
        continue;
      }
      return {p.algo, workspace_granule(bytes)};
    }
  }
  throw Error(what + ": cuDNN's heuristic found no usable algorithm for these shapes");
}

// ---- Convolution ----------------------------------------------------------------------------

class CudnnConvolution : public Kernel {
 public:
  CudnnConvolution(const Layer& layer, std::string tactic, std::optional<cudnnConvolutionFwdAlgo_t> forced)
      : tactic_(std::move(tactic)), forced_(forced), post_(conv_post_op(layer)) {}

  void prepare(const Layer& layer, const std::vector<TensorDesc>& inputs, const std::vector<TensorDesc>& outputs,
               int) override {
    const std::string what = layer_label(layer, "Convolution", tactic_);
    s_ = make_conv_shape(layer, inputs, outputs, false);
    has_bias_ = inputs.size() > 2 && inputs[2].present;
    has_residual_ = inputs.size() > 3 && inputs[3].present;
    const int rank = cudnn_rank(s_);

    // cuDNN pads min(b, e) on both sides; the rest is padded into the workspace.
    Spatial3 sym{0, 0, 0};
    pad_input_ = false;
    for (size_t i = 0; i < 3; ++i) {
      sym[i] = std::min(s_.pad_begin[i], s_.pad_end[i]);
      padded_[i] = s_.in[i] + s_.pad_begin[i] + s_.pad_end[i] - 2 * sym[i];
      shift_[i] = sym[i] - s_.pad_begin[i];
      pad_input_ = pad_input_ || padded_[i] != s_.in[i];
    }
    pad_bytes_ =
        pad_input_
            ? workspace_granule(static_cast<size_t>(s_.batch * s_.in_channels * padded_[0] * padded_[1] * padded_[2]) *
                                element_size(s_))
            : 0;

    const std::vector<int> y_dims = nd_dims(rank, s_.batch, s_.out_channels, s_.out, what);
    set_tensor(x_, s_.type, s_.format, nd_dims(rank, s_.batch, s_.in_channels, padded_, what));
    set_tensor(y_, s_.type, s_.format, y_dims);
    set_filter(w_, s_.type, s_.format, nd_dims(rank, s_.out_channels, s_.in_channels / s_.group, s_.kernel, what));
    set_convolution(conv_, s_, sym, what);
    std::vector<int> check(static_cast<size_t>(rank));
    KILN_CUDNN_CHECK(cudnnGetConvolutionNdForwardOutputDim(conv_.get(), x_.get(), w_.get(), rank, check.data()));
    if (check != y_dims) throw Error(what + ": cuDNN's output shape differs from the layer's");

    const auto choice = choose_algorithm<ForwardAlgorithms>(what, forced_, x_.get(), w_.get(), conv_.get(), y_.get());
    algo_ = choice.algo;
    algo_bytes_ = choice.bytes;

    fused_ =
        (post_.enabled ? post_.kind == ActivationType::kRelu
                       : (has_bias_ || has_residual_) && algo_ == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM);
    if (fused_) {
      KILN_CUDNN_CHECK(cudnnSetActivationDescriptor(
          act_.get(), post_.enabled ? CUDNN_ACTIVATION_RELU : CUDNN_ACTIVATION_IDENTITY, CUDNN_NOT_PROPAGATE_NAN, 0.0));
      std::vector<int> b_dims(static_cast<size_t>(rank), 1);
      b_dims[1] = y_dims[1];
      set_tensor(bias_, s_.type, TensorFormat::kLinear, b_dims);
      if (!has_bias_) {
        const size_t bytes = static_cast<size_t>(s_.out_channels) * element_size(s_);
        zero_bias_.reserve(bytes);
        zero_now(zero_bias_.data(), bytes);
      }
    }
    if (s_.format == TensorFormat::kChannelsLast) filter_.prepare(inputs[1], s_.kernel_volume());
  }

  size_t workspace_size() const override { return pad_bytes_ + algo_bytes_; }

  void execute(const KernelContext& ctx) override {
    const cudaStream_t stream = stream_of(ctx);
    const cudnnHandle_t handle = cudnn_handle();
    KILN_CUDNN_CHECK(cudnnSetStream(handle, stream));
    auto* ws = static_cast<unsigned char*>(ctx.workspace);
    const void* x = ctx.inputs[0].data;
    if (pad_input_) {
      EpilogueArgs pad;
      pad.type = s_.type;
      pad.format = s_.format;
      pad.batch = s_.batch;
      pad.channels = s_.in_channels;
      pad.out = padded_;
      pad.source = x;
      pad.src = s_.in;
      pad.shift = shift_;
      pad.y = ws;
      launch_epilogue(pad, stream);
      x = ws;
    }
    void* algo_ws = algo_bytes_ ? ws + pad_bytes_ : nullptr;
    const void* w = ctx.inputs[1].data;
    if (s_.format == TensorFormat::kChannelsLast) w = filter_.get(w, stream);
    const void* bias = has_bias_ ? ctx.inputs[2].data : nullptr;
    const void* residual = has_residual_ ? ctx.inputs[3].data : nullptr;
    void* y = ctx.outputs[0].data;
    const float one = 1.0f, zero = 0.0f;

    if (fused_) {
      const float alpha2 = residual ? 1.0f : 0.0f;
      const cudnnStatus_t status = cudnnConvolutionBiasActivationForward(
          handle, &one, x_.get(), x, w_.get(), w, conv_.get(), algo_, algo_ws, algo_bytes_, &alpha2, y_.get(),
          residual ? residual : y, bias_.get(), bias ? bias : zero_bias_.data(), act_.get(), y_.get(), y);
      if (status == CUDNN_STATUS_SUCCESS) return;
      if (!falls_back(status)) {
        throw_cudnn_error(status, "cudnnConvolutionBiasActivationForward", __FILE__, __LINE__);
      }
      fused_ = false;  // cuDNN declined the fused form: run the unfused pair from now on
    }
    KILN_CUDNN_CHECK(cudnnConvolutionForward(handle, &one, x_.get(), x, w_.get(), w, conv_.get(), algo_, algo_ws,
                                             algo_bytes_, &zero, y_.get(), y));
    EpilogueArgs e = output_epilogue(s_, y);
    e.bias = bias;
    e.residual = residual;
    e.post = post_;
    launch_epilogue(e, stream);
  }

 private:
  std::string tactic_;
  std::optional<cudnnConvolutionFwdAlgo_t> forced_;
  PostOp post_;
  ConvShape s_;
  bool has_bias_ = false, has_residual_ = false, pad_input_ = false, fused_ = false;
  Spatial3 padded_{1, 1, 1}, shift_{0, 0, 0};
  size_t pad_bytes_ = 0, algo_bytes_ = 0;
  cudnnConvolutionFwdAlgo_t algo_ = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM;
  TensorDescriptor x_, y_, bias_;
  FilterDescriptor w_;
  ConvolutionDescriptor conv_;
  ActivationDescriptor act_;
  DeviceBuffer zero_bias_;
  ChannelsLastFilter filter_;
};

// ---- Deconvolution --------------------------------------------------------------------------

class CudnnDeconvolution : public Kernel {
 public:
  CudnnDeconvolution(const Layer& layer, std::string tactic, std::optional<cudnnConvolutionBwdDataAlgo_t> forced)
      : tactic_(std::move(tactic)), forced_(forced), post_(conv_post_op(layer)) {}

  void prepare(const Layer& layer, const std::vector<TensorDesc>& inputs, const std::vector<TensorDesc>& outputs,
               int) override {
    const std::string what = layer_label(layer, "Deconvolution", tactic_);
    s_ = make_conv_shape(layer, inputs, outputs, true);
    has_bias_ = inputs.size() > 2 && inputs[2].present;
    const int rank = cudnn_rank(s_);

    // Per dim: cuDNN pad b writes y directly when b - e + output_padding is in [0, s); else
    // pad 0 into a full-size buffer cropped at offset b (see the file comment).
    Spatial3 pads{0, 0, 0};
    crop_ = false;
    for (size_t i = 0; i < 3; ++i) {
      const int64_t s = s_.stride[i], span = s_.dilation[i] * (s_.kernel[i] - 1) + 1;
      const int64_t r = s_.pad_begin[i] - s_.pad_end[i] + s_.output_padding[i];
      if (r >= 0 && r < s) {
        pads[i] = s_.pad_begin[i];
        full_[i] = s_.out[i];
        shift_[i] = 0;
      } else {
        crop_ = true;
        pads[i] = 0;
        full_[i] =
            (s_.in[i] - 1) * s + span + std::min(std::max<int64_t>(0, s_.output_padding[i] - s_.pad_end[i]), s - 1);
        shift_[i] = s_.pad_begin[i];
      }
    }
    crop_bytes_ =
        crop_ ? workspace_granule(static_cast<size_t>(s_.batch * s_.out_channels * full_[0] * full_[1] * full_[2]) *
                                  element_size(s_))
              : 0;

    const std::vector<int> x_dims = nd_dims(rank, s_.batch, s_.in_channels, s_.in, what);
    set_tensor(dy_, s_.type, s_.format, x_dims);
    set_tensor(dx_, s_.type, s_.format, nd_dims(rank, s_.batch, s_.out_channels, full_, what));
    set_filter(w_, s_.type, s_.format, nd_dims(rank, s_.in_channels, s_.out_channels / s_.group, s_.kernel, what));
    set_convolution(conv_, s_, pads, what);
    std::vector<int> check(static_cast<size_t>(rank));
    KILN_CUDNN_CHECK(cudnnGetConvolutionNdForwardOutputDim(conv_.get(), dx_.get(), w_.get(), rank, check.data()));
    if (check != x_dims) throw Error(what + ": the transposed geometry does not map back onto the input's shape");

    const auto choice =
        choose_algorithm<BackwardDataAlgorithms>(what, forced_, dx_.get(), w_.get(), conv_.get(), dy_.get());
    algo_ = choice.algo;
    algo_bytes_ = choice.bytes;
    if (s_.format == TensorFormat::kChannelsLast) filter_.prepare(inputs[1], s_.kernel_volume());
  }

  size_t workspace_size() const override { return crop_bytes_ + algo_bytes_; }

  void execute(const KernelContext& ctx) override {
    const cudaStream_t stream = stream_of(ctx);
    const cudnnHandle_t handle = cudnn_handle();
    KILN_CUDNN_CHECK(cudnnSetStream(handle, stream));
    auto* ws = static_cast<unsigned char*>(ctx.workspace);
    void* algo_ws = algo_bytes_ ? ws + crop_bytes_ : nullptr;
    const void* w = ctx.inputs[1].data;
    if (s_.format == TensorFormat::kChannelsLast) w = filter_.get(w, stream);
    void* y = ctx.outputs[0].data;
    void* dx = crop_ ? static_cast<void*>(ws) : y;
    const float one = 1.0f, zero = 0.0f;
    KILN_CUDNN_CHECK(cudnnConvolutionBackwardData(handle, &one, w_.get(), w, dy_.get(), ctx.inputs[0].data, conv_.get(),
                                                  algo_, algo_ws, algo_bytes_, &zero, dx_.get(), dx));
    EpilogueArgs e = output_epilogue(s_, y);
    if (crop_) {
      e.source = dx;
      e.src = full_;
      e.shift = shift_;
    }
    e.bias = has_bias_ ? ctx.inputs[2].data : nullptr;
    e.post = post_;
    launch_epilogue(e, stream);
  }

 private:
  std::string tactic_;
  std::optional<cudnnConvolutionBwdDataAlgo_t> forced_;
  PostOp post_;
  ConvShape s_;
  bool has_bias_ = false, crop_ = false;
  Spatial3 full_{1, 1, 1}, shift_{0, 0, 0};
  size_t crop_bytes_ = 0, algo_bytes_ = 0;
  cudnnConvolutionBwdDataAlgo_t algo_ = CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
  TensorDescriptor dy_, dx_;
  FilterDescriptor w_;
  ConvolutionDescriptor conv_;
  ChannelsLastFilter filter_;
};

// ---- registration ---------------------------------------------------------------------------

// What an algorithm needs that is knowable from the attributes and the (constant) weights;
// everything else is left to cuDNN in prepare().
struct AlgoNeeds {
  bool unit_stride = false, unit_dilation = false, two_d = false;
  std::vector<int64_t> square_kernels;  // allowed k for a k x k kernel; empty: any
  // Grouped convolutions refused: on the H200 (cuDNN 9.14) WINOGRAD_NONFUSED computed a float32
  // depthwise 5x5 convolution (32 groups, 15x15) with errors of 1.8e-2 where every other
  // algorithm agreed with the CPU reference to 1e-4 (op table case conv/conv_depthwise_wide).
  bool ungrouped = false;
};

bool all_ones(const std::vector<int64_t>& v) {
  return std::all_of(v.begin(), v.end(), [](int64_t x) { return x == 1; });
}

bool meets(const AlgoNeeds& n, const Layer& layer, const std::vector<TensorDesc>& inputs) {
  const WindowParams& window = params_of<ConvParams>(layer).window;
  if (n.unit_stride && !all_ones(window.strides)) return false;
  if (n.unit_dilation && !all_ones(window.dilations)) return false;
  if (n.ungrouped && params_of<ConvParams>(layer).group != 1) return false;
  const Dims& w = inputs[1].dims;
  if (n.two_d && w.rank() == 5) return false;
  if (!n.square_kernels.empty()) {
    if (w.rank() != 4 || w[2] != w[3]) return false;
    if (std::find(n.square_kernels.begin(), n.square_kernels.end(), w[2]) == n.square_kernels.end()) return false;
  }
  return true;
}

// One registered tactic: its name, priority, forced algorithm (none: cuDNN's heuristic) and
// what the algorithm needs.
template <class Traits>
struct Tactic {
  const char* name;
  int priority;
  std::optional<typename Traits::Algo> algo;
  AlgoNeeds needs;
};

const AlgoNeeds kAny{};
const AlgoNeeds kFft{true, true, false, {}};
const AlgoNeeds kFft2d{true, true, true, {}};
const AlgoNeeds kWinograd{true, true, true, {3}, true};
const AlgoNeeds kWinogradNonfused{true, true, true, {3, 5}, true};

const std::vector<Tactic<ForwardAlgorithms>>& forward_tactics() {
  static const std::vector<Tactic<ForwardAlgorithms>> t = {
      {"cudnn", 100, std::nullopt, kAny},
      {"cudnn_implicit_precomp_gemm", 90, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, kAny},
      {"cudnn_implicit_gemm", 80, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, kAny},
      {"cudnn_gemm", 70, CUDNN_CONVOLUTION_FWD_ALGO_GEMM, kAny},
      {"cudnn_winograd", 60, CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD, kWinograd},
      {"cudnn_winograd_nonfused", 55, CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED, kWinogradNonfused},
      {"cudnn_fft_tiling", 50, CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING, kFft},
      {"cudnn_fft", 45, CUDNN_CONVOLUTION_FWD_ALGO_FFT, kFft2d},
  };
  return t;
}

const std::vector<Tactic<BackwardDataAlgorithms>>& backward_data_tactics() {
  static const std::vector<Tactic<BackwardDataAlgorithms>> t = {
      {"cudnn", 100, std::nullopt, kAny},
      {"cudnn_algo1", 90, CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, kAny},
      {"cudnn_algo0", 80, CUDNN_CONVOLUTION_BWD_DATA_ALGO_0, kAny},  // non-deterministic (atomics)
      {"cudnn_winograd", 60, CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD, kWinograd},
      {"cudnn_winograd_nonfused", 55, CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED, kWinogradNonfused},
      {"cudnn_fft_tiling", 50, CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING, kFft},
      {"cudnn_fft", 45, CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT, kFft2d},
  };
  return t;
}

// Registers a kernel per tactic of `tactics` for `layer_type`: a KernelType made with the tactic's
// name and algorithm, supported where `operands_ok` and the algorithm's needs hold.
template <class KernelType, class Traits, class OperandsOk>
void register_tactics(const char* layer_type, const std::vector<Tactic<Traits>>& tactics, OperandsOk operands_ok) {
  for (const Tactic<Traits>& t : tactics) {
    const AlgoNeeds needs = t.needs;
    const std::string name = t.name;
    const auto algo = t.algo;
    KernelRegistry::instance().add(
        KernelEntry{DeviceType::kCUDA, layer_type, name, t.priority,
                    [needs, operands_ok](const Layer& layer, const std::vector<TensorDesc>& inputs) {
                      return operands_ok(layer, inputs) && meets(needs, layer, inputs);
                    },
                    [name, algo](const Layer& layer) { return std::make_unique<KernelType>(layer, name, algo); }});
  }
}

struct Registrar {
  Registrar() {
    register_tactics<CudnnConvolution>(kLayerConvolution, forward_tactics(),
                                       [](const Layer& layer, const std::vector<TensorDesc>& inputs) {
                                         return conv_operands_supported(layer, inputs, true);
                                       });
    register_tactics<CudnnDeconvolution>(kLayerDeconvolution, backward_data_tactics(),
                                         [](const Layer& layer, const std::vector<TensorDesc>& inputs) {
                                           return inputs.size() <= 3 && conv_operands_supported(layer, inputs, true);
                                         });
  }
} registrar;

}  // namespace
}  // namespace kiln::cuda
