// cuBLASLt tactic of 1x1 Convolution ("cublaslt"): a convolution whose kernel is 1 in every
// spatial dim, with stride 1, no padding, dilation 1 and one group, is a matrix product, and
// cuBLASLt launches one for a few microseconds of host time where cuDNN's legacy API costs far
// more per call (docs/cuda-backend.md). The builder times it against the cuDNN tactics.
//
// Matrices (cuBLASLt is column-major; a row-major [R, C] matrix is a column-major [C, R] one):
//   - kChannelsLast: x is a row-major [P, C] matrix (P = N * spatial), y = x * W^T with W [K, C]:
//     one GEMM for any batch, D = y^T [K, P] = op_T(W) [K, C] * x^T [C, P]. Output channels are
//     D's rows, so cuBLASLt's bias epilogue (one value per row) is the layer's bias.
//   - kLinear: y[n] [K, S] = W [K, C] * x[n] [C, S], i.e. D = y[n]^T [S, K] = x[n]^T [S, C] *
//     W^T [C, K], a strided-batched GEMM over n (W's batch stride 0). Output channels are D's
//     columns, which cuBLASLt's bias epilogue cannot address: the bias (and then the activation)
//     goes to kiln's epilogue kernel.
// Fusion: the residual is cuBLASLt's C with beta = 1 (cuBLASLt applies its epilogue to
// alpha*A*B + beta*C + bias, which is conv + bias + residual, then the activation); relu and
// gelu_tanh (cuBLASLt's GELU is the tanh form; float16 only) are epilogues; everything else (other activations,
// the bias in kLinear) runs in one epilogue kernel (epilogue_cuda.h) in place on y. Where
// cuBLASLt has no algorithm for the most fused form, prepare() tries less fused ones.
// Types: float32 with CUBLAS_COMPUTE_32F (no TF32, as in matmul_cublaslt.cpp) and float16 with
// float accumulation (CUBLAS_COMPUTE_32F, float scale); the weights are used as stored (no copy).
// Alignment: algorithms are chosen for 256-byte and for 16-byte aligned operands (the runtime
// aligns activations to 256 bytes; user I/O may be less); execute() takes the first plan the
// actual pointers satisfy, else runs kiln's direct kernel (launch_conv_direct), never a wrong
// result. The same fallback serves cases cuBLASLt cannot take at all (no algorithm, empty
// reductions, extents past int32), so that one odd shape of a profile does not fail the layer.
// Host cost: descriptors, layouts and algorithms are made once in prepare(); execute() picks a
// plan by alignment, updates the bias pointer when it changed, and calls cublasLtMatmul with the
// thread's handle (plus the epilogue kernel when something is left unfused): no allocation, no
// heuristic, no synchronization.
#include <cublasLt.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/error.h"
#include "kiln/logger.h"
#include "src/backends/cuda/conv_cuda.h"
#include "src/backends/cuda/cublaslt_util.h"
#include "src/backends/cuda/cuda_common.h"
#include "src/backends/cuda/epilogue_cuda.h"

namespace kiln::cuda {
namespace {

constexpr uint64_t kMaxWorkspace = uint64_t{32} << 20;
constexpr size_t kAlignLevels[] = {256, 16};

// What cuBLASLt computes itself; the rest goes to the epilogue kernel.
struct Fusion {
  bool bias = false;      // CUBLASLT_EPILOGUE_*BIAS
  bool act = false;       // CUBLASLT_EPILOGUE_RELU* / GELU*
  bool residual = false;  // C = residual, beta = 1
  bool operator==(const Fusion& o) const { return bias == o.bias && act == o.act && residual == o.residual; }
};

// One algorithm for operands of at least the given alignments (bytes).
struct Plan {
  LtDescPtr desc;
  LtLayoutPtr a, b, d;
  cublasLtMatmulAlgo_t algo{};
  size_t workspace = 0;
  int algo_id = -1;
  size_t align_x = 1, align_w = 1, align_y = 1, align_r = 1, align_bias = 1;
  const void* bias_in_desc = nullptr;  // the bias pointer last written into desc
};

bool all_equal(const std::vector<int64_t>& v, int64_t value) {
  return std::all_of(v.begin(), v.end(), [value](int64_t x) { return x == value; });
}

// A 1x1 convolution with stride 1, no padding, dilation 1 and one group (attributes and w only;
// prepare() checks the shapes).
bool is_pointwise(const Layer& layer, const std::vector<TensorDesc>& inputs) {
  const Dims& w = inputs[1].dims;
  for (int i = 2; i < w.rank(); ++i) {
    if (w[i] != 1) return false;
  }
  // A 1x1 window with unit strides: auto_pad (SAME or VALID) pads nothing, explicit pads must be 0.
  const ConvParams& p = params_of<ConvParams>(layer);
  return p.group == 1 && all_equal(p.window.strides, 1) && all_equal(p.window.dilations, 1) &&
         (p.window.auto_pad != AutoPad::kNotSet || all_equal(p.window.pads, 0));
}

bool supports_lt_conv(const Layer& layer, const std::vector<TensorDesc>& inputs) {
  return conv_operands_supported(layer, inputs, true) && is_pointwise(layer, inputs);
}

const char* epilogue_name(cublasLtEpilogue_t e) {
  switch (e) {
    case CUBLASLT_EPILOGUE_DEFAULT:
      return "none";
    case CUBLASLT_EPILOGUE_BIAS:
      return "bias";
    case CUBLASLT_EPILOGUE_RELU:
      return "relu";
    case CUBLASLT_EPILOGUE_RELU_BIAS:
      return "bias+relu";
    case CUBLASLT_EPILOGUE_GELU:
      return "gelu";
    case CUBLASLT_EPILOGUE_GELU_BIAS:
      return "bias+gelu";
    default:
      return "?";
  }
}

class LtConvolution : public Kernel {
 public:
  explicit LtConvolution(const Layer& layer) : post_(conv_post_op(layer)) {}

  void prepare(const Layer& layer, const std::vector<TensorDesc>& inputs, const std::vector<TensorDesc>& outputs,
               int) override {
    what_ = "Convolution layer '" + layer.name() + "' (CUDA tactic cublaslt)";
    s_ = make_conv_shape(layer, inputs, outputs, false);
    for (size_t i = 0; i < 3; ++i) {
      if (s_.kernel[i] != 1 || s_.stride[i] != 1 || s_.pad_begin[i] != 0 || s_.pad_end[i] != 0 || s_.dilation[i] != 1) {
        throw Error(what_ + ": not a 1x1 convolution with stride 1, no padding and dilation 1");
      }
    }
    if (s_.group != 1) throw Error(what_ + ": grouped convolutions are not matrix products");
    has_bias_ = inputs.size() > 2 && inputs[2].present;
    has_residual_ = inputs.size() > 3 && inputs[3].present;
    channels_last_ = s_.format == TensorFormat::kChannelsLast;
    sm_target_ = sm_count_target(params_of<ConvParams>(layer).concurrent_streams);
    plans_.clear();
    fusion_ = Fusion{};
    const int64_t spatial = s_.in_volume();
    const int64_t rows = s_.batch * spatial;  // P
    // Nothing to compute, or nothing cuBLASLt can take: the direct kernel (which returns at once
    // for empty outputs and handles C == 0 as bias + residual).
    if (rows == 0 || s_.out_channels == 0 || s_.in_channels == 0 || !lt_fits_int32(rows) ||
        !lt_fits_int32(s_.out_channels) || !lt_fits_int32(s_.in_channels) || !lt_fits_int32(s_.batch) ||
        !lt_fits_int32(s_.in_channels * spatial) || !lt_fits_int32(s_.out_channels * spatial)) {
      kiln::log(Severity::kVerbose, what_ + ": kiln's direct kernel (no cuBLASLt product for these extents)");
      return;
    }
    // GELU only in float16: cuBLASLt's tanh may be an approximation whose error float32's
    // tolerance would see (float16's output rounding hides it); kiln's epilogue applies it otherwise.
    const bool fp16 = s_.type == DataType::kFloat16;
    const bool act_fusable =
        post_.enabled && (post_.kind == ActivationType::kRelu || (post_.kind == ActivationType::kGeluTanh && fp16));
    // Most fused first; in kLinear the bias (and so the activation after it) cannot be fused.
    const bool bias_fusable = has_bias_ && channels_last_;
    const bool act_first = act_fusable && (!has_bias_ || bias_fusable);
    std::vector<Fusion> configs = {{bias_fusable, act_first, has_residual_},
                                   {bias_fusable, false, has_residual_},
                                   {false, false, has_residual_},
                                   {false, false, false}};
    std::vector<Fusion> tried;
    for (const Fusion& f : configs) {
      if (std::find(tried.begin(), tried.end(), f) != tried.end()) continue;
      tried.push_back(f);
      fusion_ = f;
      make_plans();
      if (!plans_.empty()) break;
    }
    if (plans_.empty()) {
      fusion_ = Fusion{};
      kiln::log(Severity::kVerbose, what_ + ": cuBLASLt offers no algorithm; kiln's direct kernel runs instead");
      return;
    }
    std::string line = what_ + ": " + (channels_last_ ? "NHWC, one GEMM" : "NCHW, strided-batched GEMM") +
                       " m=" + std::to_string(m_) + " n=" + std::to_string(n_) + " k=" + std::to_string(k_) +
                       (batch_ > 1 ? " batch=" + std::to_string(batch_) : "") + ", cuBLASLt epilogue " +
                       epilogue_name(epilogue()) + (fusion_.residual ? ", residual as C" : "") +
                       ", kiln epilogue: " + describe_rest() + "; algorithms:";
    for (const Plan& p : plans_) {
      line += " [align " + std::to_string(p.align_y) + ": id " + std::to_string(p.algo_id) + ", workspace " +
              std::to_string(p.workspace) + "]";
    }
    kiln::log(Severity::kVerbose, line);
  }

  size_t workspace_size() const override {
    size_t w = 0;
    for (const Plan& p : plans_) w = std::max(w, p.workspace);
    return w;
  }

  void execute(const KernelContext& ctx) override {
    const cudaStream_t stream = stream_of(ctx);
    const void* x = ctx.inputs[0].data;
    const void* w = ctx.inputs[1].data;
    const void* bias = has_bias_ ? ctx.inputs[2].data : nullptr;
    const void* residual = has_residual_ ? ctx.inputs[3].data : nullptr;
    void* y = ctx.outputs[0].data;
    Plan* plan = pick_plan(x, w, bias, residual, y);
    if (!plan) {
      launch_conv_direct(s_, x, w, bias, residual, y, post_, stream);
      return;
    }
    if (fusion_.bias && plan->bias_in_desc != bias) {
      KILN_CUBLAS_CHECK(
          cublasLtMatmulDescSetAttribute(plan->desc.get(), CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
      plan->bias_in_desc = bias;
    }
    const float alpha = 1.0f, beta = fusion_.residual ? 1.0f : 0.0f;
    // cuBLASLt's A and B (see the file comment); C is y itself when beta is 0 (not read).
    const void* a = channels_last_ ? w : x;
    const void* b = channels_last_ ? x : w;
    const void* c = fusion_.residual ? residual : y;
    KILN_CUBLAS_CHECK(cublasLtMatmul(cublaslt_handle(), plan->desc.get(), &alpha, a, plan->a.get(), b, plan->b.get(),
                                     &beta, c, plan->d.get(), y, plan->d.get(), &plan->algo, ctx.workspace,
                                     ctx.workspace ? ctx.workspace_size : 0, stream));
    EpilogueArgs e = output_epilogue(s_, y);
    e.bias = fusion_.bias ? nullptr : bias;
    e.residual = fusion_.residual ? nullptr : residual;
    if (!fusion_.act) e.post = post_;
    if (!epilogue_is_identity(e)) launch_epilogue(e, stream);
  }

 private:
  cublasLtEpilogue_t epilogue() const {
    const bool gelu = post_.kind == ActivationType::kGeluTanh;
    if (fusion_.act) {
      if (fusion_.bias) return gelu ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_RELU_BIAS;
      return gelu ? CUBLASLT_EPILOGUE_GELU : CUBLASLT_EPILOGUE_RELU;
    }
    return fusion_.bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  }

  std::string describe_rest() const {
    std::string r;
    if (has_bias_ && !fusion_.bias) r += "bias ";
    if (has_residual_ && !fusion_.residual) r += "residual ";
    if (post_.enabled && !fusion_.act) r += std::string(to_string(post_.kind)) + " ";
    if (r.empty()) return "none";
    r.pop_back();
    return r;
  }

  // Plans for each alignment level the shapes allow (plans_ stays empty when cuBLASLt has no
  // algorithm for fusion_).
  void make_plans() {
    plans_.clear();
    const size_t es = data_type_size(s_.type);
    const int64_t spatial = s_.in_volume();
    const cudaDataType_t dt = s_.type == DataType::kFloat16 ? CUDA_R_16F : CUDA_R_32F;
    // Alignment the batch strides keep (kLinear): every batch entry's pointer must be aligned too.
    size_t stride_x = 256, stride_y = 256;
    if (channels_last_) {
      m_ = s_.out_channels;
      n_ = s_.batch * spatial;
      k_ = s_.in_channels;
      batch_ = 1;
    } else {
      m_ = spatial;
      n_ = s_.out_channels;
      k_ = s_.in_channels;
      batch_ = s_.batch;
      if (batch_ > 1) {
        stride_x = lt_alignment_of(static_cast<uint64_t>(s_.in_channels * spatial) * es);
        stride_y = lt_alignment_of(static_cast<uint64_t>(s_.out_channels * spatial) * es);
      }
    }
    for (const size_t level : kAlignLevels) {
      Plan p;
      p.align_x = std::min(level, stride_x);
      p.align_w = level;
      p.align_y = std::min(level, stride_y);
      p.align_r = fusion_.residual ? p.align_y : 1;
      p.align_bias = fusion_.bias ? level : 1;
      if (!plans_.empty()) {
        const Plan& prev = plans_.back();
        if (prev.align_x == p.align_x && prev.align_w == p.align_w && prev.align_y == p.align_y &&
            prev.align_r == p.align_r && prev.align_bias == p.align_bias) {
          continue;  // the strides already limit alignment below this level
        }
      }
      if (configure(dt, &p)) plans_.push_back(std::move(p));
    }
  }

  bool configure(cudaDataType_t dt, Plan* p) const {
    cublasLtMatmulDesc_t desc = nullptr;
    KILN_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    p->desc.reset(desc);
    const cublasOperation_t op_a = channels_last_ ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_b = CUBLAS_OP_N;
    KILN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
    KILN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));
    const cublasLtEpilogue_t epi = epilogue();
    KILN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    if (sm_target_ > 0) {
      // Tuned for several streams: kernels for a share of the SMs (the others' work runs beside).
      const int32_t sms = sm_target_;
      KILN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, &sms, sizeof(sms)));
    }
    if (fusion_.bias) {
      // The heuristic reads the bias pointer's alignment from its value: a stand-in with exactly
      // the alignment this plan requires (execute() sets the real pointer), as matmul_cublaslt.cpp.
      const void* stand_in = reinterpret_cast<const void*>(p->align_bias);
      KILN_CUBLAS_CHECK(
          cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &stand_in, sizeof(stand_in)));
    }
    const int32_t batch = static_cast<int32_t>(batch_);
    const int64_t spatial = s_.in_volume();
    uint32_t al_a = 0, al_b = 0;
    if (channels_last_) {
      // A = W: column-major [C, K] (ld C), transposed; B = x: column-major [C, P] (ld C).
      p->a = lt_layout(dt, static_cast<uint64_t>(k_), static_cast<uint64_t>(m_), k_);
      p->b = lt_layout(dt, static_cast<uint64_t>(k_), static_cast<uint64_t>(n_), k_);
      p->d = lt_layout(dt, static_cast<uint64_t>(m_), static_cast<uint64_t>(n_), m_);
      al_a = static_cast<uint32_t>(p->align_w);
      al_b = static_cast<uint32_t>(p->align_x);
    } else {
      // A = x[n]: column-major [S, C] (ld S); B = W: column-major [C, K] (ld C), the same for
      // every n (batch stride 0); D = y[n]: column-major [S, K] (ld S).
      p->a = lt_layout(dt, static_cast<uint64_t>(m_), static_cast<uint64_t>(k_), m_, batch, s_.in_channels * spatial);
      p->b = lt_layout(dt, static_cast<uint64_t>(k_), static_cast<uint64_t>(n_), k_, batch, 0);
      p->d = lt_layout(dt, static_cast<uint64_t>(m_), static_cast<uint64_t>(n_), m_, batch, s_.out_channels * spatial);
      al_a = static_cast<uint32_t>(p->align_x);
      al_b = static_cast<uint32_t>(p->align_w);
    }
    const uint32_t al_d = static_cast<uint32_t>(p->align_y);
    const uint32_t al_c = fusion_.residual ? static_cast<uint32_t>(p->align_r) : al_d;
    const LtPrefPtr pref = lt_preference(kMaxWorkspace, al_a, al_b, al_c, al_d);
    cublasLtMatmulHeuristicResult_t results[4] = {};
    int count = 0;
    const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(cublaslt_handle(), desc, p->a.get(), p->b.get(),
                                                             p->d.get(), p->d.get(), pref.get(), 4, results, &count);
    if (st == CUBLAS_STATUS_NOT_SUPPORTED) return false;
    KILN_CUBLAS_CHECK(st);
    for (int i = 0; i < count; ++i) {
      if (results[i].state != CUBLAS_STATUS_SUCCESS) continue;
      p->algo = results[i].algo;
      p->workspace = results[i].workspaceSize;
      int id = -1;
      size_t written = 0;
      if (cublasLtMatmulAlgoConfigGetAttribute(&p->algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof(id), &written) ==
          CUBLAS_STATUS_SUCCESS) {
        p->algo_id = id;
      }
      return true;
    }
    return false;
  }

  Plan* pick_plan(const void* x, const void* w, const void* bias, const void* residual, const void* y) {
    const auto addr = [](const void* ptr) { return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(ptr)); };
    for (Plan& p : plans_) {
      if (addr(x) % p.align_x != 0 || addr(w) % p.align_w != 0 || addr(y) % p.align_y != 0) continue;
      if (fusion_.residual && addr(residual) % p.align_r != 0) continue;
      if (fusion_.bias && addr(bias) % p.align_bias != 0) continue;
      return &p;
    }
    return nullptr;
  }

  PostOp post_;
  std::string what_;
  ConvShape s_;
  bool has_bias_ = false, has_residual_ = false, channels_last_ = false;
  Fusion fusion_;
  int sm_target_ = 0;  // cuda::sm_count_target of the layer's concurrent_streams
  int64_t m_ = 0, n_ = 0, k_ = 0, batch_ = 1;
  std::vector<Plan> plans_;  // by decreasing alignment; empty: the direct kernel runs
};

}  // namespace

// Above the cuDNN tactics: a build without timing takes the matrix product for the 1x1
// convolutions it supports (cheapest to launch); timed builds choose by the device time.
KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCUDA, kLayerConvolution, "cublaslt", 102, supports_lt_conv,
                                 [](const Layer& layer) { return std::make_unique<LtConvolution>(layer); }});

}  // namespace kiln::cuda
