// Index machinery shared by the CUDA data-movement kernels (shuffle, concat/split, slice/gather,
// pad/expand/tile, resize, reformat); included by .cu files only. Moving data never looks at
// values, so every kernel here is instantiated per element *width* (1, 2, 4, 8 bytes, and 16 when
// a contiguous run is wide enough and aligned: "widening" turns e.g. four float32 into one uint4).
//
// The workhorse is the strided copy: out[i] = in[base + sum_k coord_k(i) * stride_k], with the
// coordinates of i taken row-major over the output extents. Slice (stride * step, negative too),
// Expand (stride 0), Tile (each axis split into [repeat, extent] with strides [0, stride]),
// transposes that keep the innermost axis, and nearest-neighbour copies all reduce to it. Before
// launching, extent-1 axes are dropped and axes that stay contiguous in the source are merged, so
// a Slice of whole rows is a handful of axes and a plain copy becomes cudaMemcpyAsync.
// Transposes that move the innermost axis use a 32x32 shared-memory tile kernel instead.
//
// Index division: kernels decompose a flat index with IndexDiv, which divides by an invariant
// divisor with a multiply-high and a shift (Granlund-Montgomery) when the whole iteration space
// is below 2^31 (the template flag k32), else with a 64-bit division.
//
// Kernels are written as "bodies": small structs whose __host__ __device__ operator() does the
// work of one index, launched by launch_for_each (a grid-stride loop). Compiled with
// KILN_CUDA_HOST_EMULATION defined, every launch and device copy here runs on the host instead,
// over host pointers, so that the same kernel code can be checked against the CPU reference on
// a machine without a GPU (the library never defines it).
#pragma once

#include <cuda_runtime_api.h>
#include <vector_types.h>

#include <algorithm>
#include <cstring>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kiln/error.h"
#include "kiln/types.h"
#include "src/core/int_math.h"  // row_major_strides, int_pow (shared with the CPU backend)
#include "src/backends/cuda/cuda_common.h"

// `#pragma unroll` for __host__ __device__ code (the host compiler does not know it).
#ifdef __CUDA_ARCH__
#define KILN_UNROLL _Pragma("unroll")
#else
#define KILN_UNROLL
#endif

namespace kiln::cuda {

// Iteration spaces below this use 32-bit fast division.
constexpr int64_t kFast32Limit = int64_t{1} << 31;
// Axes of a strided map: Tile doubles a rank-8 tensor's axes.
constexpr int kMaxMapRank = 2 * kMaxDims;

// Division by an invariant divisor d >= 1. The 32-bit form is exact for dividends below 2^31
// and divisors up to 2^31 (t + n below cannot overflow).
struct IndexDiv {
  int64_t d = 1;
  uint32_t mul = 1;
  uint32_t shift = 0;

  IndexDiv() = default;
  explicit IndexDiv(int64_t divisor) : d(divisor < 1 ? 1 : divisor) {
    if (d > kFast32Limit) return;  // only the 64-bit path is valid (never used with k32)
    uint32_t s = 0;
    while (s < 32 && (uint64_t{1} << s) < static_cast<uint64_t>(d)) ++s;
    shift = s;
    const uint64_t one = 1;
    mul = static_cast<uint32_t>(((one << 32) * ((one << s) - static_cast<uint64_t>(d))) / static_cast<uint64_t>(d) + 1);
  }

  template <bool k32>
  __host__ __device__ __forceinline__ int64_t div(int64_t n) const {
    if constexpr (k32) {
      const uint32_t un = static_cast<uint32_t>(n);
#ifdef __CUDA_ARCH__
      const uint32_t t = __umulhi(un, mul);
#else
      const uint32_t t = static_cast<uint32_t>((static_cast<uint64_t>(un) * mul) >> 32);
#endif
      return static_cast<int64_t>((t + un) >> shift);
    } else {
      return n / d;
    }
  }
};

// ---- element widths --------------------------------------------------------------------------

// Calls fn(std::type_identity<W>{}) with W a trivially copyable type of `bytes` bytes.
template <typename Fn>
void dispatch_bytes(size_t bytes, const char* what, Fn&& fn) {
  switch (bytes) {
    case 1:
      fn(std::type_identity<uint8_t>{});
      break;
    case 2:
      fn(std::type_identity<uint16_t>{});
      break;
    case 4:
      fn(std::type_identity<uint32_t>{});
      break;
    case 8:
      fn(std::type_identity<unsigned long long>{});
      break;
    case 16:
      fn(std::type_identity<uint4>{});
      break;
    default:
      throw Error(std::string(what) + ": unsupported element width " + std::to_string(bytes) + " bytes");
  }
}

// The widest access (16, 8, 4, 2 or 1 bytes, never narrower than an element) such that every
// run length in `multiples` (in elements) and every pointer is a multiple of it.
inline size_t vector_bytes(size_t elem, const std::vector<int64_t>& multiples,
                           const std::vector<const void*>& pointers) {
  for (size_t w = 16; w > elem; w /= 2) {
    if (w % elem) continue;
    bool ok = true;
    for (int64_t m : multiples) ok = ok && (m * static_cast<int64_t>(elem)) % static_cast<int64_t>(w) == 0;
    for (const void* p : pointers) ok = ok && reinterpret_cast<uintptr_t>(p) % w == 0;
    if (ok) return w;
  }
  return elem;
}

// ---- launches and device copies (host loops under KILN_CUDA_HOST_EMULATION) -------------------

inline void copy_async(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  if (bytes == 0 || dst == src) return;
#ifdef KILN_CUDA_HOST_EMULATION
  (void)stream;
  std::memmove(dst, src, bytes);
#else
  KILN_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream));
#endif
}

inline void memset_async(void* dst, int value, size_t bytes, cudaStream_t stream) {
#ifdef KILN_CUDA_HOST_EMULATION
  (void)stream;
  std::memset(dst, value, bytes);
#else
  KILN_CUDA_CHECK(cudaMemsetAsync(dst, value, bytes, stream));
#endif
}

// `height` rows of `width` bytes from src (rows `src_pitch` apart) to dst (`dst_pitch` apart).
inline void copy_2d_async(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width, size_t height,
                          cudaStream_t stream) {
  if (width == 0 || height == 0) return;
#ifdef KILN_CUDA_HOST_EMULATION
  (void)stream;
  for (size_t r = 0; r < height; ++r) {
    std::memcpy(static_cast<char*>(dst) + r * dst_pitch, static_cast<const char*>(src) + r * src_pitch, width);
  }
#else
  KILN_CUDA_CHECK(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, height, cudaMemcpyDeviceToDevice, stream));
#endif
}

// Read-only load through the non-coherent cache where the type allows it.
template <typename T>
__host__ __device__ __forceinline__ T load_ro(const T* p) {
#ifdef __CUDA_ARCH__
  return __ldg(p);
#else
  return *p;
#endif
}

template <typename Body>
__global__ void for_each_kernel(Body body, int64_t n) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) body(i);
}

// body(i) for every i in [0, n), as a grid-stride loop on `stream`.
template <typename Body>
void launch_for_each(const Body& body, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
#ifdef KILN_CUDA_HOST_EMULATION
  (void)stream;
  for (int64_t i = 0; i < n; ++i) body(i);
#else
  for_each_kernel<Body><<<grid_for(n), kBlock, 0, stream>>>(body, n);
  KILN_CUDA_CHECK_LAUNCH();
#endif
}

// body(part, i) for every part in [0, parts) and i in [0, body.count(part)); blockIdx.y picks the
// part, so one launch serves parts of different sizes (max_count: the largest).
template <typename Body>
__global__ void for_each_part_kernel(Body body) {
  const int part = static_cast<int>(blockIdx.y);
  const int64_t n = body.count(part);
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) body(part, i);
}

template <typename Body>
void launch_for_each_part(const Body& body, int parts, int64_t max_count, cudaStream_t stream) {
  if (parts <= 0 || max_count <= 0) return;
#ifdef KILN_CUDA_HOST_EMULATION
  (void)stream;
  for (int p = 0; p < parts; ++p) {
    for (int64_t i = 0; i < body.count(p); ++i) body(p, i);
  }
#else
  for_each_part_kernel<Body><<<dim3(grid_for(max_count), static_cast<unsigned>(parts)), kBlock, 0, stream>>>(body);
  KILN_CUDA_CHECK_LAUNCH();
#endif
}

// Memory order of a tensor's logical axes: identity for kLinear; N, spatial..., C for
// kChannelsLast (rank >= 3). memory axis m holds logical axis order[m].
inline std::vector<int> memory_order(int rank, TensorFormat format) {
  std::vector<int> order;
  if (format == TensorFormat::kChannelsLast && rank >= 3) {
    order.push_back(0);
    for (int i = 2; i < rank; ++i) order.push_back(i);
    order.push_back(1);
  } else {
    for (int i = 0; i < rank; ++i) order.push_back(i);
  }
  return order;
}

// Dims in memory order (see memory_order).
inline std::vector<int64_t> memory_dims(const Dims& dims, TensorFormat format) {
  std::vector<int64_t> out;
  for (int a : memory_order(dims.rank(), format)) out.push_back(dims[a]);
  return out;
}

// ---- strided copy ----------------------------------------------------------------------------

// out[i] = src[base + sum_k coord_k(i) * stride[k]], coordinates row-major over extent.
struct StridedMap {
  int rank = 0;
  int64_t extent[kMaxMapRank] = {};
  int64_t stride[kMaxMapRank] = {};  // source strides in elements; 0 broadcasts, negative reverses
  int64_t base = 0;

  void push(int64_t e, int64_t s) {
    if (rank >= kMaxMapRank) throw Error("strided copy: more than " + std::to_string(kMaxMapRank) + " axes");
    extent[rank] = e;
    stride[rank] = s;
    ++rank;
  }
  int64_t count() const {
    int64_t n = 1;
    for (int k = 0; k < rank; ++k) n *= extent[k];
    return n;
  }
};

// Drops extent-1 axes and merges neighbours that are contiguous in the source.
inline StridedMap simplify(const StridedMap& m) {
  StridedMap out;
  out.base = m.base;
  for (int k = 0; k < m.rank; ++k) {
    if (m.extent[k] == 1) continue;
    if (out.rank > 0 && out.stride[out.rank - 1] == m.stride[k] * m.extent[k]) {
      out.extent[out.rank - 1] *= m.extent[k];
      out.stride[out.rank - 1] = m.stride[k];
    } else {
      out.push(m.extent[k], m.stride[k]);
    }
  }
  return out;
}

// What the kernel receives: divisors for the coordinates and the source strides.
struct DeviceMap {
  int rank = 0;
  int64_t base = 0;
  IndexDiv div[kMaxMapRank];
  int64_t stride[kMaxMapRank] = {};
};

inline DeviceMap device_map(const StridedMap& m) {
  DeviceMap d;
  d.rank = m.rank;
  d.base = m.base;
  for (int k = 0; k < m.rank; ++k) {
    d.div[k] = IndexDiv(m.extent[k]);
    d.stride[k] = m.stride[k];
  }
  return d;
}

// Source offset of flat output index i. The loop is unrolled over a fixed bound kR >= m.rank so
// that every array index is a constant (the map stays in the parameter bank, no local memory).
template <bool k32, int kR = kMaxMapRank>
__host__ __device__ __forceinline__ int64_t map_offset(const DeviceMap& m, int64_t i) {
  int64_t off = m.base;
  KILN_UNROLL
  for (int k = kR - 1; k > 0; --k) {
    if (k < m.rank) {
      const int64_t q = m.div[k].template div<k32>(i);
      off += (i - q * m.div[k].d) * m.stride[k];
      i = q;
    }
  }
  if (m.rank > 0) off += i * m.stride[0];
  return off;
}

// kR: a bound on the map's rank (small maps skip the unused axes' predicates).
template <typename W, bool k32, int kR>
struct StridedCopyBody {
  const W* src;
  W* dst;
  DeviceMap m;
  __host__ __device__ __forceinline__ void operator()(int64_t i) const {
    dst[i] = load_ro(src + map_offset<k32, kR>(m, i));
  }
};

// Rank bound of the small-map instantiation.
constexpr int kSmallMapRank = 4;

// Rewrites a map over elements into one over vectors of `factor` elements (the innermost axis
// must be contiguous, its extent, the base and the other strides multiples of factor).
inline StridedMap widen(const StridedMap& m, int64_t factor) {
  StridedMap w = m;
  if (factor == 1) return w;
  w.base /= factor;
  for (int k = 0; k < w.rank - 1; ++k) w.stride[k] /= factor;
  w.extent[w.rank - 1] /= factor;
  return w;
}

// The widest vector a simplified map allows for these pointers.
inline size_t map_vector_bytes(const StridedMap& m, size_t elem, const void* src, const void* dst) {
  if (m.rank == 0 || m.stride[m.rank - 1] != 1) return elem;
  size_t w = vector_bytes(elem, {m.extent[m.rank - 1], m.base}, {src, dst});
  for (int k = 0; k < m.rank - 1 && w > elem; ++k) {
    while (w > elem && (m.stride[k] * static_cast<int64_t>(elem)) % static_cast<int64_t>(w) != 0) w /= 2;
  }
  return w;
}

// Enqueues dst[i] = src[map(i)] for `elem`-byte elements. A contiguous map is one memcpy.
inline void strided_copy(const StridedMap& map, size_t elem, const void* src, void* dst, cudaStream_t stream,
                         const char* what) {
  const StridedMap m = simplify(map);
  const int64_t n = m.count();
  if (n == 0) return;
  if (m.rank == 0 || (m.rank == 1 && m.stride[0] == 1)) {
    copy_async(dst, static_cast<const char*>(src) + m.base * static_cast<int64_t>(elem), static_cast<size_t>(n) * elem,
               stream);
    return;
  }
  const size_t w = map_vector_bytes(m, elem, src, dst);
  const StridedMap v = widen(m, static_cast<int64_t>(w / elem));
  const int64_t nv = v.count();
  const DeviceMap d = device_map(v);
  dispatch_bytes(w, what, [&](auto tag) {
    using W = typename decltype(tag)::type;
    const auto* s = static_cast<const W*>(src);
    auto* t = static_cast<W*>(dst);
    if (nv < kFast32Limit && d.rank <= kSmallMapRank) {
      launch_for_each(StridedCopyBody<W, true, kSmallMapRank>{s, t, d}, nv, stream);
    } else if (nv < kFast32Limit) {
      launch_for_each(StridedCopyBody<W, true, kMaxMapRank>{s, t, d}, nv, stream);
    } else {
      launch_for_each(StridedCopyBody<W, false, kMaxMapRank>{s, t, d}, nv, stream);
    }
  });
}

// ---- transposes ------------------------------------------------------------------------------

// A transpose reduced to its essentials (as the CPU "fast" Shuffle): extent-1 axes dropped and
// input axes that stay adjacent and in order in the output merged. Rank <= 1 afterwards means
// the data does not move.
struct TransposePlan {
  std::vector<int64_t> dims;  // input extents, input order
  std::vector<int> perm;      // output axis j reads input axis perm[j]
  bool moves_data() const { return dims.size() > 1; }
  int64_t count() const {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    return n;
  }
};

inline TransposePlan plan_transpose(const std::vector<int64_t>& in, const std::vector<int64_t>& perm) {
  const int rank = static_cast<int>(in.size());
  if (static_cast<int>(perm.size()) != rank) {
    throw Error("transpose: permutation of " + std::to_string(perm.size()) + " axes for a rank-" +
                std::to_string(rank) + " tensor");
  }
  std::vector<int> compact(static_cast<size_t>(rank), -1);
  std::vector<int64_t> ext;
  for (int a = 0; a < rank; ++a) {
    if (in[static_cast<size_t>(a)] != 1) {
      compact[static_cast<size_t>(a)] = static_cast<int>(ext.size());
      ext.push_back(in[static_cast<size_t>(a)]);
    }
  }
  std::vector<int> q;  // kept input axes in output order
  for (int64_t p : perm) {
    if (p < 0 || p >= rank) throw Error("transpose: axis " + std::to_string(p) + " out of range");
    if (in[static_cast<size_t>(p)] != 1) q.push_back(compact[static_cast<size_t>(p)]);
  }
  std::vector<std::pair<int, int64_t>> groups;  // (first input axis, extent) in output order
  for (size_t j = 0; j < q.size(); ++j) {
    if (j > 0 && q[j] == q[j - 1] + 1) {
      groups.back().second *= ext[static_cast<size_t>(q[j])];
    } else {
      groups.emplace_back(q[j], ext[static_cast<size_t>(q[j])]);
    }
  }
  std::vector<int> starts;
  for (const auto& g : groups) starts.push_back(g.first);
  std::sort(starts.begin(), starts.end());
  TransposePlan plan;
  plan.dims.resize(groups.size());
  for (const auto& g : groups) {
    const auto pos = static_cast<int>(std::lower_bound(starts.begin(), starts.end(), g.first) - starts.begin());
    plan.dims[static_cast<size_t>(pos)] = g.second;
    plan.perm.push_back(pos);
  }
  return plan;
}

// The transpose as a strided gather over the output.
inline StridedMap transpose_map(const TransposePlan& p) {
  const auto in_strides = row_major_strides(p.dims);
  StridedMap m;
  for (int a : p.perm) m.push(p.dims[static_cast<size_t>(a)], in_strides[static_cast<size_t>(a)]);
  return m;
}

constexpr int kTile = 32;
constexpr int kTileRows = 8;  // threads per tile column: each thread moves kTile / kTileRows elements

// A transpose whose innermost axis changes, as 32x32 tiles: tile axis i runs along the input's
// innermost axis (output axis b), tile axis j along the output's innermost axis (input axis a);
// the remaining axes are a batch.
struct TileParams {
  int64_t ni = 0, nj = 0;    // extents of the two tile axes
  int64_t in_stride_j = 0;   // input stride of tile axis j (input stride of i is 1)
  int64_t out_stride_i = 0;  // output stride of tile axis i (output stride of j is 1)
  int64_t tiles_i = 0, tiles_j = 0, num_tiles = 0;
  int batch_rank = 0;  // the other output axes, outermost first
  int64_t batch_extent[kMaxDims] = {};
  int64_t batch_in_stride[kMaxDims] = {};
  int64_t batch_out_stride[kMaxDims] = {};
};

inline TileParams tile_params(const TransposePlan& p) {
  const int r = static_cast<int>(p.dims.size());
  const auto is = row_major_strides(p.dims);
  std::vector<int64_t> od(static_cast<size_t>(r));
  for (int j = 0; j < r; ++j) od[static_cast<size_t>(j)] = p.dims[static_cast<size_t>(p.perm[static_cast<size_t>(j)])];
  const auto os = row_major_strides(od);
  const int b = static_cast<int>(std::find(p.perm.begin(), p.perm.end(), r - 1) - p.perm.begin());
  const int a = p.perm[static_cast<size_t>(r - 1)];
  TileParams t;
  t.ni = od[static_cast<size_t>(b)];
  t.nj = od[static_cast<size_t>(r - 1)];
  t.in_stride_j = is[static_cast<size_t>(a)];
  t.out_stride_i = os[static_cast<size_t>(b)];
  t.tiles_i = (t.ni + kTile - 1) / kTile;
  t.tiles_j = (t.nj + kTile - 1) / kTile;
  int64_t batch = 1;
  for (int j = 0; j < r - 1; ++j) {
    if (j == b) continue;
    t.batch_extent[t.batch_rank] = od[static_cast<size_t>(j)];
    t.batch_in_stride[t.batch_rank] = is[static_cast<size_t>(p.perm[static_cast<size_t>(j)])];
    t.batch_out_stride[t.batch_rank] = os[static_cast<size_t>(j)];
    batch *= od[static_cast<size_t>(j)];
    ++t.batch_rank;
  }
  t.num_tiles = batch * t.tiles_i * t.tiles_j;
  return t;
}

// Where tile t starts: input and output offsets of its batch, and its first i and j.
struct TileOrigin {
  int64_t in_base, out_base, i0, j0;
};

__host__ __device__ __forceinline__ TileOrigin tile_origin(const TileParams& p, int64_t t) {
  TileOrigin o{0, 0, 0, 0};
  o.j0 = (t % p.tiles_j) * kTile;
  t /= p.tiles_j;
  o.i0 = (t % p.tiles_i) * kTile;
  t /= p.tiles_i;
  KILN_UNROLL
  for (int k = kMaxDims - 1; k >= 0; --k) {
    if (k < p.batch_rank) {
      const int64_t c = t % p.batch_extent[k];
      t /= p.batch_extent[k];
      o.in_base += c * p.batch_in_stride[k];
      o.out_base += c * p.batch_out_stride[k];
    }
  }
  return o;
}

// The two phases of one tile for thread (tx, ty): load along the input's contiguous axis into
// the shared tile, then (after a barrier) store along the output's contiguous axis. The +1
// column keeps the transposed read free of shared-memory bank conflicts.
template <typename W>
__host__ __device__ __forceinline__ void tile_load(const W* src, const TileParams& p, const TileOrigin& o,
                                                   W (*tile)[kTile + 1], int tx, int ty) {
  const int64_t i = o.i0 + tx;
  KILN_UNROLL
  for (int r = 0; r < kTile / kTileRows; ++r) {
    const int jj = ty + r * kTileRows;
    const int64_t j = o.j0 + jj;
    if (i < p.ni && j < p.nj) tile[jj][tx] = load_ro(src + o.in_base + i + j * p.in_stride_j);
  }
}

template <typename W>
__host__ __device__ __forceinline__ void tile_store(W* dst, const TileParams& p, const TileOrigin& o,
                                                    W (*tile)[kTile + 1], int tx, int ty) {
  const int64_t j = o.j0 + tx;
  KILN_UNROLL
  for (int r = 0; r < kTile / kTileRows; ++r) {
    const int ii = ty + r * kTileRows;
    const int64_t i = o.i0 + ii;
    if (i < p.ni && j < p.nj) dst[o.out_base + i * p.out_stride_i + j] = tile[tx][ii];
  }
}

// Block of kTile x kTileRows threads, grid-stride over tiles.
template <typename W>
__global__ void __launch_bounds__(kTile* kTileRows)
    transpose_tiled_kernel(const W* __restrict__ src, W* __restrict__ dst, TileParams p) {
  __shared__ W tile[kTile][kTile + 1];
  const int tx = static_cast<int>(threadIdx.x), ty = static_cast<int>(threadIdx.y);
  for (int64_t t = blockIdx.x; t < p.num_tiles; t += gridDim.x) {
    const TileOrigin o = tile_origin(p, t);
    tile_load(src, p, o, tile, tx, ty);
    __syncthreads();
    tile_store(dst, p, o, tile, tx, ty);
    __syncthreads();
  }
}

inline void transpose_tiled(const TransposePlan& plan, size_t elem, const void* src, void* dst, cudaStream_t stream,
                            const char* what) {
  const TileParams p = tile_params(plan);
  if (p.num_tiles == 0) return;
  dispatch_bytes(elem, what, [&](auto tag) {
    using W = typename decltype(tag)::type;
    const auto* s = static_cast<const W*>(src);
    auto* d = static_cast<W*>(dst);
#ifdef KILN_CUDA_HOST_EMULATION
    (void)stream;
    std::vector<W> storage(kTile * (kTile + 1));
    auto* tile = reinterpret_cast<W(*)[kTile + 1]>(storage.data());
    for (int64_t t = 0; t < p.num_tiles; ++t) {
      const TileOrigin o = tile_origin(p, t);
      for (int ty = 0; ty < kTileRows; ++ty) {
        for (int tx = 0; tx < kTile; ++tx) tile_load(s, p, o, tile, tx, ty);
      }
      for (int ty = 0; ty < kTileRows; ++ty) {
        for (int tx = 0; tx < kTile; ++tx) tile_store(d, p, o, tile, tx, ty);
      }
    }
#else
    const int64_t blocks = std::min<int64_t>(p.num_tiles, int64_t{65535} * 8);
    transpose_tiled_kernel<W><<<static_cast<unsigned>(blocks), dim3(kTile, kTileRows), 0, stream>>>(s, d, p);
    KILN_CUDA_CHECK_LAUNCH();
#endif
  });
}

// How a transpose that moves the innermost axis is done.
enum class TransposeKind { kTiled, kStrided };

// Enqueues a planned transpose: a copy when nothing moves, a (widened) strided gather when the
// innermost axis stays innermost, else the tile kernel (or the gather when kind says so).
inline void transpose(const TransposePlan& plan, size_t elem, const void* src, void* dst, cudaStream_t stream,
                      TransposeKind kind, const char* what) {
  const int64_t n = plan.count();
  if (n == 0) return;
  if (!plan.moves_data()) {
    copy_async(dst, src, static_cast<size_t>(n) * elem, stream);
    return;
  }
  const int r = static_cast<int>(plan.dims.size());
  if (plan.perm.back() == r - 1 || kind == TransposeKind::kStrided) {
    strided_copy(transpose_map(plan), elem, src, dst, stream, what);
  } else {
    transpose_tiled(plan, elem, src, dst, stream, what);
  }
}

}  // namespace kiln::cuda
