// cuBLASLt tactics of MatrixMultiply and Gemm, float32 and float16 (compute in float32, no TF32,
// so float32 results stay close to the CPU reference; float16 runs on tensor cores).
//
// Tactics: "cublaslt" takes cuBLASLt's best heuristic, "cublaslt_h1" / "cublaslt_h2" its second
// and third (the builder times all three; where the heuristic returns fewer, the last one is
// used); "cublaslt_h3" .. "cublaslt_h7" its 4th to 8th, tried at builder optimization level 5
// only (KernelEntry::min_optimization_level). Algorithms are chosen in prepare().
//
// Row-major trick: kiln's row-major y[M,N] is the column-major matrix y^T[N,M], so we compute
// y^T = op(b)^T op(a)^T: cuBLASLt's "A" is kiln's b and its "B" kiln's a, both used as stored
// (a row-major [R,C] is a column-major [C,R] with leading dim C) with the transposes swapped.
// Batches: when b has no batch and a is not transposed, a's batch folds into M (one GEMM);
// otherwise the longest run of trailing batch dims over which each operand is either dense or
// broadcast (stride 0) is one strided-batch call, and the remaining outer dims are a host loop of
// calls (several cublasLtMatmul per execute).
// Gemm: a C that is a row vector along N with beta = 1 is the bias epilogue; a C of the output's
// size is cuBLASLt's C with beta; any other broadcast of C is first written into y by a small
// kernel and then used as C with beta (in place). relu and gelu_tanh (cuBLASLt's GELU is the tanh
// form) are fused epilogues; other activations run as an in-place kernel afterwards.
//
// Alignment: cuBLASLt algorithms assume a minimum pointer alignment. Plans are made for 256-byte
// and 16-byte aligned operands; execute() takes the first plan the actual pointers satisfy and
// otherwise runs kiln's tiled kernel (matmul_cuda.cu), never a wrong result.
#include <cublasLt.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/error.h"
#include "src/backends/cuda/cublaslt_util.h"
#include "src/backends/cuda/cuda_common.h"
#include "src/backends/cuda/matmul_cuda.h"
#include "src/ir/matmul_params.h"
#include "src/ir/op_params.h"
#include "src/ir/op_schema.h"

namespace kiln::cuda {
namespace {

constexpr size_t kMaxWorkspace = size_t{32} << 20;
constexpr int kHeuristics = 8;  // results asked of the heuristic: "cublaslt" .. "cublaslt_h7"
constexpr size_t kAlignLevels[] = {256, 16};

using DescPtr = LtDescPtr;
using LayoutPtr = LtLayoutPtr;

size_t alignment_of(uint64_t v) { return lt_alignment_of(v); }

bool fits_int32(int64_t v) { return lt_fits_int32(v); }

// How Gemm's C enters the product.
enum class CMode { kNone, kBias, kFull, kSeed };

// One cuBLASLt call pattern, minus pointers: the same for every outer slice.
struct Shape {
  uint64_t a_rows, a_cols, a_ld;  // cuBLASLt's A (kiln b), column-major
  uint64_t b_rows, b_cols, b_ld;  // cuBLASLt's B (kiln a)
  uint64_t d_rows, d_cols, d_ld;
  bool trans_a = false, trans_b = false;
  int32_t batch_count = 1;
  int64_t stride_a = 0, stride_b = 0, stride_d = 0;
};

// Element offsets of one outer slice: kiln a, kiln b, y.
struct Slice {
  int64_t a = 0, b = 0, y = 0;
};

struct Plan {
  DescPtr desc;
  LayoutPtr la, lb, ld;
  cublasLtMatmulAlgo_t algo{};
  size_t workspace = 0;
  size_t align_a = 1, align_b = 1, align_y = 1, align_c = 1;  // required base alignment (kiln names)
};

class LtMatmul : public Kernel {
 public:
  LtMatmul(const Layer& layer, bool gemm, int heuristic) : gemm_(gemm), heuristic_(heuristic) {
    name_ = std::string(gemm ? "Gemm" : "MatrixMultiply") + " layer '" + layer.name() + "'";
    if (gemm) {
      const GemmParams& g = params_of<GemmParams>(layer);
      ta_ = g.trans_a;
      tb_ = g.trans_b;
      terms_.alpha = static_cast<float>(g.alpha);
      terms_.beta = static_cast<float>(g.beta);
      terms_.post = read_post_op(layer);
      sm_target_ = sm_count_target(g.concurrent_streams);
    } else {
      ta_ = params_of<MatMulParams>(layer).transpose_a;
      tb_ = params_of<MatMulParams>(layer).transpose_b;
      sm_target_ = sm_count_target(params_of<MatMulParams>(layer).concurrent_streams);
    }
  }

  void prepare(const Layer&, const std::vector<TensorDesc>& inputs, const std::vector<TensorDesc>&, int) override {
    type_ = inputs[0].type;
    g_ = matmul_geometry(inputs[0].dims, inputs[1].dims, ta_, tb_, name_);
    plans_.clear();
    slices_.clear();
    has_c_ = gemm_ && inputs.size() > 2 && inputs[2].present;
    if (has_c_) gemm_c_strides(inputs[2].dims, g_.m, g_.n, &terms_.c_rs, &terms_.c_cs);
    // Empty products and extents past int32 go to the tiled kernel (execute() finds no plan).
    if (g_.m == 0 || g_.n == 0 || g_.k == 0 || g_.batch == 0) return;
    if (!fits_int32(g_.m * g_.batch) || !fits_int32(g_.n) || !fits_int32(g_.k) || !fits_int32(g_.a_rows * g_.batch) ||
        !fits_int32(g_.a_cols) || !fits_int32(g_.b_rows) || !fits_int32(g_.b_cols)) {
      return;
    }
    const Shape shape = make_shape();
    if (shape.batch_count == 0) return;

    // Candidate configurations, most fused first.
    CMode mode = CMode::kNone;
    if (has_c_ && terms_.beta != 0.0f) {
      if (inputs[2].dims.volume() == g_.m * g_.n) {
        mode = CMode::kFull;
      } else if (terms_.c_rs == 0 && terms_.c_cs == 1 && terms_.beta == 1.0f) {
        mode = CMode::kBias;
      } else {
        mode = CMode::kSeed;
      }
    }
    const bool can_fuse_act = terms_.post.enabled && (terms_.post.kind == ActivationType::kRelu ||
                                                      terms_.post.kind == ActivationType::kGeluTanh);
    struct Config {
      CMode mode;
      bool fuse_act;
    };
    std::vector<Config> configs = {{mode, can_fuse_act}};
    if (can_fuse_act) configs.push_back({mode, false});
    if (mode == CMode::kBias) configs.push_back({CMode::kSeed, false});
    for (const Config& c : configs) {
      mode_ = c.mode;
      fused_act_ = c.fuse_act;
      make_plans(shape);
      if (!plans_.empty()) break;
    }
  }

  size_t workspace_size() const override {
    size_t w = 0;
    for (const Plan& p : plans_) w = std::max(w, p.workspace);
    return w;
  }

  void execute(const KernelContext& ctx) override {
    const void* a = ctx.inputs[0].data;
    const void* b = ctx.inputs[1].data;
    const void* c = has_c_ && ctx.inputs.size() > 2 ? ctx.inputs[2].data : nullptr;
    void* y = ctx.outputs[0].data;
    const cudaStream_t stream = stream_of(ctx);
    const Plan* plan = pick_plan(a, b, c, y);
    if (!plan) {
      GemmTerms t = terms_;
      t.c = c;
      launch_tiled_matmul(type_, g_, a, b, y, gemm_ ? &t : nullptr, stream);
      return;
    }
    if (mode_ == CMode::kSeed) launch_broadcast_c(type_, c, terms_.c_rs, terms_.c_cs, y, g_.m * g_.batch, g_.n, stream);
    if (mode_ == CMode::kBias) {
      KILN_CUBLAS_CHECK(
          cublasLtMatmulDescSetAttribute(plan->desc.get(), CUBLASLT_MATMUL_DESC_BIAS_POINTER, &c, sizeof(c)));
    }
    const float alpha = gemm_ ? terms_.alpha : 1.0f;
    const float beta = (mode_ == CMode::kFull || mode_ == CMode::kSeed) ? terms_.beta : 0.0f;
    const size_t es = data_type_size(type_);
    const auto* pa = static_cast<const char*>(a);
    const auto* pb = static_cast<const char*>(b);
    auto* py = static_cast<char*>(y);
    const char* pc = mode_ == CMode::kFull ? static_cast<const char*>(c) : py;
    const cublasLtHandle_t handle = cublaslt_handle();
    for (const Slice& s : slices_) {
      // cuBLASLt's A is kiln's b and its B kiln's a (row-major trick, see the file comment).
      KILN_CUBLAS_CHECK(cublasLtMatmul(handle, plan->desc.get(), &alpha, pb + s.b * es, plan->la.get(), pa + s.a * es,
                                       plan->lb.get(), &beta, pc + s.y * es, plan->ld.get(), py + s.y * es,
                                       plan->ld.get(), &plan->algo, ctx.workspace,
                                       ctx.workspace ? ctx.workspace_size : 0, stream));
    }
    if (terms_.post.enabled && !fused_act_) {
      launch_activation_inplace(type_, y, g_.batch * g_.m * g_.n, terms_.post, stream);
    }
  }

 private:
  // Folds or splits the batch into one strided-batch shape plus outer slices (slices_).
  Shape make_shape() {
    Shape s;
    s.trans_a = g_.b_trans;
    s.trans_b = g_.a_trans;
    s.a_rows = static_cast<uint64_t>(g_.b_cols);
    s.a_cols = static_cast<uint64_t>(g_.b_rows);
    s.a_ld = static_cast<uint64_t>(g_.b_cols);
    s.b_rows = static_cast<uint64_t>(g_.a_cols);
    s.b_cols = static_cast<uint64_t>(g_.a_rows);
    s.b_ld = static_cast<uint64_t>(g_.a_cols);
    s.d_rows = static_cast<uint64_t>(g_.n);
    s.d_cols = static_cast<uint64_t>(g_.m);
    s.d_ld = static_cast<uint64_t>(g_.n);
    const int rank = g_.batch_rank;
    bool b_broadcast = true;
    for (int i = 0; i < rank; ++i) b_broadcast = b_broadcast && g_.b_bstride[i] == 0;
    if (rank == 0 || (b_broadcast && !g_.a_trans)) {
      // One GEMM: a's dense batch (if any) stacks into M.
      s.b_cols = static_cast<uint64_t>(g_.a_rows * g_.batch);
      s.d_cols = static_cast<uint64_t>(g_.m * g_.batch);
      slices_.push_back(Slice{});
      return s;
    }
    // Trailing dims [split, rank) over which both operands are dense or broadcast.
    const auto linear = [&](const int64_t* st, int from) {
      bool zero = true;
      for (int i = from; i < rank; ++i) zero = zero && st[i] == 0;
      if (zero) return true;
      for (int i = from; i < rank; ++i) {
        if (st[i] == 0) return false;
        if (i + 1 < rank && st[i] != st[i + 1] * g_.batch_dims[i + 1]) return false;
      }
      return true;
    };
    int split = rank;
    while (split > 0 && linear(g_.a_bstride, split - 1) && linear(g_.b_bstride, split - 1)) --split;
    int64_t inner = 1;
    for (int i = split; i < rank; ++i) inner *= g_.batch_dims[i];
    if (!fits_int32(inner)) {
      s.batch_count = 0;
      return s;
    }
    s.batch_count = static_cast<int32_t>(inner);
    s.stride_a = g_.b_bstride[rank - 1];
    s.stride_b = g_.a_bstride[rank - 1];
    s.stride_d = g_.m * g_.n;
    int64_t outer = 1;
    for (int i = 0; i < split; ++i) outer *= g_.batch_dims[i];
    slices_.reserve(static_cast<size_t>(outer));
    for (int64_t o = 0; o < outer; ++o) {
      Slice sl;
      int64_t rem = o;
      for (int i = split - 1; i >= 0; --i) {
        const int64_t idx = rem % g_.batch_dims[i];
        rem /= g_.batch_dims[i];
        sl.a += idx * g_.a_bstride[i];
        sl.b += idx * g_.b_bstride[i];
        sl.y += idx * g_.y_bstride[i];
      }
      slices_.push_back(sl);
    }
    return s;
  }

  LayoutPtr make_layout(cudaDataType_t dt, uint64_t rows, uint64_t cols, uint64_t ld, const Shape& s,
                        int64_t stride) const {
    return lt_layout(dt, rows, cols, static_cast<int64_t>(ld), s.batch_count, stride);
  }

  cublasLtEpilogue_t epilogue() const {
    const bool bias = mode_ == CMode::kBias;
    if (fused_act_ && terms_.post.kind == ActivationType::kRelu) {
      return bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
    }
    if (fused_act_ && terms_.post.kind == ActivationType::kGeluTanh) {
      return bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
    }
    return bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  }

  // One plan per alignment level the slices allow; plans_ stays empty when cuBLASLt has no
  // algorithm for this configuration.
  void make_plans(const Shape& s) {
    plans_.clear();
    const size_t es = data_type_size(type_);
    size_t off_a = 256, off_b = 256, off_y = 256;
    for (const Slice& sl : slices_) {
      off_a = std::min(off_a, alignment_of(static_cast<uint64_t>(sl.a) * es));
      off_b = std::min(off_b, alignment_of(static_cast<uint64_t>(sl.b) * es));
      off_y = std::min(off_y, alignment_of(static_cast<uint64_t>(sl.y) * es));
    }
    const cudaDataType_t dt = type_ == DataType::kFloat16 ? CUDA_R_16F : CUDA_R_32F;
    for (const size_t level : kAlignLevels) {
      Plan p;
      p.align_a = std::min(level, off_a);
      p.align_b = std::min(level, off_b);
      p.align_y = std::min(level, off_y);
      p.align_c = mode_ == CMode::kFull ? p.align_y : (mode_ == CMode::kBias ? level : 1);
      if (!plans_.empty()) {
        const Plan& prev = plans_.back();
        if (prev.align_a == p.align_a && prev.align_b == p.align_b && prev.align_y == p.align_y &&
            prev.align_c == p.align_c) {
          continue;  // the offsets already limit alignment below this level
        }
      }
      if (!configure(s, dt, &p)) continue;
      plans_.push_back(std::move(p));
    }
  }

  bool configure(const Shape& s, cudaDataType_t dt, Plan* p) const {
    cublasLtMatmulDesc_t desc = nullptr;
    KILN_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    p->desc.reset(desc);
    const cublasOperation_t op_a = s.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_b = s.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    KILN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
    KILN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));
    const cublasLtEpilogue_t epi = epilogue();
    KILN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    if (sm_target_ > 0) {  // tuned for several streams (conv_cublaslt.cpp does the same)
      const int32_t sms = sm_target_;
      KILN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, &sms, sizeof(sms)));
    }
    if (mode_ == CMode::kBias) {
      // The heuristic reads the bias pointer's alignment from its value: a stand-in with exactly
      // the alignment this plan requires (execute() sets the real pointer).
      const void* stand_in = reinterpret_cast<const void*>(p->align_c);
      KILN_CUBLAS_CHECK(
          cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &stand_in, sizeof(stand_in)));
    }
    p->la = make_layout(dt, s.a_rows, s.a_cols, s.a_ld, s, s.stride_a);
    p->lb = make_layout(dt, s.b_rows, s.b_cols, s.b_ld, s, s.stride_b);
    p->ld = make_layout(dt, s.d_rows, s.d_cols, s.d_ld, s, s.stride_d);

    // cuBLASLt's A/B are kiln's b/a.
    const uint32_t al_a = static_cast<uint32_t>(p->align_b), al_b = static_cast<uint32_t>(p->align_a);
    const uint32_t al_c = static_cast<uint32_t>(mode_ == CMode::kFull ? p->align_c : p->align_y);
    const uint32_t al_d = static_cast<uint32_t>(p->align_y);
    const LtPrefPtr pref = lt_preference(kMaxWorkspace, al_a, al_b, al_c, al_d);

    std::array<cublasLtMatmulHeuristicResult_t, kHeuristics> results{};
    int count = 0;
    const cublasStatus_t st =
        cublasLtMatmulAlgoGetHeuristic(cublaslt_handle(), desc, p->la.get(), p->lb.get(), p->ld.get(), p->ld.get(),
                                       pref.get(), kHeuristics, results.data(), &count);
    if (st == CUBLAS_STATUS_NOT_SUPPORTED) return false;
    KILN_CUBLAS_CHECK(st);
    // Keep the successful results in order; take the requested rank or the last one there is.
    std::vector<const cublasLtMatmulHeuristicResult_t*> ok;
    for (int i = 0; i < count; ++i) {
      if (results[static_cast<size_t>(i)].state == CUBLAS_STATUS_SUCCESS)
        ok.push_back(&results[static_cast<size_t>(i)]);
    }
    if (ok.empty()) return false;
    const auto* chosen = ok[static_cast<size_t>(std::min<int>(heuristic_, static_cast<int>(ok.size()) - 1))];
    p->algo = chosen->algo;
    p->workspace = chosen->workspaceSize;
    return true;
  }

  const Plan* pick_plan(const void* a, const void* b, const void* c, const void* y) const {
    const auto addr = [](const void* ptr) { return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(ptr)); };
    for (const Plan& p : plans_) {
      if (addr(a) % p.align_a != 0 || addr(b) % p.align_b != 0 || addr(y) % p.align_y != 0) continue;
      if ((mode_ == CMode::kFull || mode_ == CMode::kBias) && addr(c) % p.align_c != 0) continue;
      return &p;
    }
    return nullptr;
  }

  bool gemm_;
  int heuristic_;
  std::string name_;
  bool ta_ = false, tb_ = false;
  int sm_target_ = 0;  // cuda::sm_count_target of the layer's concurrent_streams
  GemmTerms terms_;    // MatrixMultiply: alpha 1, no C, no post-op

  DataType type_ = DataType::kFloat32;
  MatmulGeometry g_;
  bool has_c_ = false;
  CMode mode_ = CMode::kNone;
  bool fused_act_ = false;
  std::vector<Slice> slices_;
  std::vector<Plan> plans_;  // by decreasing alignment; empty: the tiled kernel runs
};

bool linear_formats(const std::vector<TensorDesc>& inputs) {
  for (const TensorDesc& d : inputs) {
    if (d.present && d.format != TensorFormat::kLinear) return false;
  }
  return true;
}

// float32/float16, linear, shapes matmul_geometry accepts. Cases cuBLASLt cannot take (empty
// products, extents past int32, no algorithm, unaligned pointers) run the tiled kernel instead,
// so that one odd profile point does not cost the layer cuBLASLt at every shape.
bool lt_supports(const Layer& layer, const std::vector<TensorDesc>& inputs, bool gemm) {
  if (inputs.size() < 2 || !linear_formats(inputs) || !is_cuda_float(inputs[0].type)) return false;
  if (inputs[1].type != inputs[0].type) return false;
  // A MatrixMultiply's fused bias or activation comes only from CPU builds (activation_fusion).
  if (!gemm && (inputs.size() > 2 || !layer.attrs().get_string("activation", "").empty())) return false;
  if (gemm) {
    if (inputs[0].dims.rank() != 2 || inputs[1].dims.rank() != 2) return false;
    if (inputs.size() > 2 && inputs[2].present && (inputs[2].type != inputs[0].type || inputs[2].dims.rank() > 2)) {
      return false;
    }
  }
  try {
    const bool ta = attr_int(layer, gemm ? "trans_a" : "transpose_a") != 0;
    const bool tb = attr_int(layer, gemm ? "trans_b" : "transpose_b") != 0;
    matmul_geometry(inputs[0].dims, inputs[1].dims, ta, tb, layer.name());
  } catch (const Error&) {
    return false;
  }
  return true;
}

// min_level: the builder optimization level from which the builder tries the tactic (5 for the
// heuristic's 4th to 8th results: slow to try, rarely faster).
KernelEntry lt_entry(const char* layer_type, const char* tactic, int priority, int heuristic, int min_level = 0) {
  const bool gemm = std::string(layer_type) == kLayerGemm;
  return KernelEntry{
      DeviceType::kCUDA,
      layer_type,
      tactic,
      priority,
      [gemm](const Layer& layer, const std::vector<TensorDesc>& inputs) { return lt_supports(layer, inputs, gemm); },
      [gemm, heuristic](const Layer& layer) { return std::make_unique<LtMatmul>(layer, gemm, heuristic); },
      min_level};
}

}  // namespace

KILN_REGISTER_KERNEL(lt_entry(kLayerMatrixMultiply, "cublaslt", 100, 0));
KILN_REGISTER_KERNEL(lt_entry(kLayerMatrixMultiply, "cublaslt_h1", 90, 1));
KILN_REGISTER_KERNEL(lt_entry(kLayerMatrixMultiply, "cublaslt_h2", 80, 2));
KILN_REGISTER_KERNEL(lt_entry(kLayerGemm, "cublaslt", 100, 0));
KILN_REGISTER_KERNEL(lt_entry(kLayerGemm, "cublaslt_h1", 90, 1));
KILN_REGISTER_KERNEL(lt_entry(kLayerGemm, "cublaslt_h2", 80, 2));
// Builder optimization level 5 only.
KILN_REGISTER_KERNEL(lt_entry(kLayerMatrixMultiply, "cublaslt_h3", 79, 3, 5));
KILN_REGISTER_KERNEL(lt_entry(kLayerMatrixMultiply, "cublaslt_h4", 78, 4, 5));
KILN_REGISTER_KERNEL(lt_entry(kLayerMatrixMultiply, "cublaslt_h5", 77, 5, 5));
KILN_REGISTER_KERNEL(lt_entry(kLayerMatrixMultiply, "cublaslt_h6", 76, 6, 5));
KILN_REGISTER_KERNEL(lt_entry(kLayerMatrixMultiply, "cublaslt_h7", 75, 7, 5));
KILN_REGISTER_KERNEL(lt_entry(kLayerGemm, "cublaslt_h3", 79, 3, 5));
KILN_REGISTER_KERNEL(lt_entry(kLayerGemm, "cublaslt_h4", 78, 4, 5));
KILN_REGISTER_KERNEL(lt_entry(kLayerGemm, "cublaslt_h5", 77, 5, 5));
KILN_REGISTER_KERNEL(lt_entry(kLayerGemm, "cublaslt_h6", 76, 6, 5));
KILN_REGISTER_KERNEL(lt_entry(kLayerGemm, "cublaslt_h7", 75, 7, 5));

}  // namespace kiln::cuda
