// Shared plumbing of the oneDNN CPU tactics (conv_onednn.cpp, pooling_onednn.cpp,
// matmul_onednn.cpp): the process-wide engine, dims/memory-descriptor conversion, the mapping of
// kiln's fused activations onto oneDNN eltwise post-ops, the OpenMP thread-count guard and the
// carving of a kernel's workspace into scratch buffers.
//
// oneDNN here is Debian's 2.6 built on OpenMP: a primitive takes its thread count from
// omp_get_max_threads() of the calling thread, both when its descriptor is created and when it
// runs, so every kernel sets it (ScopedOmpThreads) around prepare() and execute().
// Only compiled when oneDNN is found (KILN_HAVE_ONEDNN); nothing outside the *_onednn.cpp files
// includes this header.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kiln/network.h"
#include "kiln/types.h"
#include "src/backends/kernel.h"
#include "src/core/activation_math.h"

namespace kiln::onednn {

// Priority of the oneDNN tactics (the reference is 0).
inline constexpr int kPriority = 100;
inline constexpr const char* kTactic = "onednn";

// The one CPU engine of the process (created on first use; thread-safe).
dnnl::engine& engine();

// kiln dims -> oneDNN dims (same order).
dnnl::memory::dims to_dnnl(const Dims& dims);
dnnl::memory::dims to_dnnl(const std::vector<int64_t>& values);

// Row-major strides of dims.
dnnl::memory::dims plain_strides(const dnnl::memory::dims& dims);

// A float32 descriptor of an activation tensor [N, C, spatial...] stored in `format`
// (kLinear: NC + spatial row-major; kChannelsLast: N + spatial + C).
dnnl::memory::desc activation_desc(const dnnl::memory::dims& dims, TensorFormat format);

// A float32 row-major descriptor.
dnnl::memory::desc plain_desc(const dnnl::memory::dims& dims);

// A reorder primitive between two descriptors (throws dnnl::error when unsupported).
dnnl::reorder make_reorder(const dnnl::memory::desc& from, const dnnl::memory::desc& to);

// True when every tensor is float32 (absent optional inputs are skipped).
bool all_float32(const std::vector<TensorDesc>& tensors);

// One oneDNN eltwise operation: y = scale * alg(x; alpha, beta).
struct EltwiseStep {
  dnnl::algorithm alg;
  float alpha;
  float beta;
  float scale = 1.f;  // oneDNN's post-op scale
};
// The eltwise chain computing the activation `post.kind` with post.alpha/beta (whether or not
// post.enabled); nullopt when oneDNN 2.6 cannot express it. Used by the Activation tactic.
std::optional<std::vector<EltwiseStep>> eltwise_steps(const PostOp& post);

// Appends the eltwise post-ops computing `post` (nothing when disabled). Returns false, leaving
// `ops` unchanged, when oneDNN 2.6 cannot express the activation kind with these parameters.
bool append_activation(dnnl::post_ops& ops, const PostOp& post);
// Whether append_activation would succeed.
bool activation_supported(const PostOp& post);
// Reads the fused post-op of a layer; false (and a disabled post) when the attributes name an
// unknown kind, so that supports() can decline instead of throwing.
bool read_post_op_safe(const Layer& layer, PostOp* post);

// Sets omp_set_num_threads(n) for the calling thread for the guard's lifetime (n <= 0 keeps it).
class ScopedOmpThreads {
 public:
  explicit ScopedOmpThreads(int num_threads);
  ~ScopedOmpThreads();
  ScopedOmpThreads(const ScopedOmpThreads&) = delete;
  ScopedOmpThreads& operator=(const ScopedOmpThreads&) = delete;

 private:
  int previous_ = 0;
  bool changed_ = false;
};

// Lays out scratch buffers in one workspace: add() returns each buffer's offset (64-byte
// aligned); total() is what workspace_size() reports.
class WorkspaceLayout {
 public:
  size_t add(size_t bytes);
  size_t total() const { return total_; }

 private:
  size_t total_ = 0;
};

// A pointer `offset` bytes into the context's workspace; throws when the runtime gave less than
// `needed` bytes (a wiring error, not a user error).
void* workspace_at(const KernelContext& ctx, size_t offset, size_t needed, const char* what);

// "layer 'name' (Type) onednn: " prefix for error messages.
std::string where(const Layer& layer);

// Text of a key identifying input shapes/formats (for per-shape plan caches).
std::string shape_key(const std::vector<TensorDesc>& inputs);

}  // namespace kiln::onednn
