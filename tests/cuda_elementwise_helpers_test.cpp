// Tests of the host-side helpers of the CUDA element-wise kernels (src/backends/cuda/
// elementwise_cuda.cuh), which need no GPU: FastDivmod against plain division, the collapsed
// broadcast layouts and StridedIndex / for_each_strided against a direct numpy-style index
// computation, the channel-broadcast matcher on hand-worked shapes, and the FusedElementWise
// program compiler (dead code, constants as immediates, slot reuse) by running the compiled program
// on the host and comparing with a plain evaluation of the register program.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "src/backends/cuda/elementwise_cuda.cuh"
#include "src/ir/ops_fused.h"

namespace kiln::cuda {
namespace {

TEST(CudaElementwiseHelpers, FastDivmodMatchesDivision) {
  std::mt19937 rng(7);
  std::vector<uint32_t> divisors = {
      1, 2, 3, 5, 7, 10, 49, 64, 100, 255, 256, 1000, 4095, 65536, 65537, (1u << 30) + 1, (1u << 31) - 1};
  for (int i = 0; i < 200; ++i) divisors.push_back(1 + rng() % ((1u << 31) - 1));
  for (int i = 0; i < 200; ++i) divisors.push_back(1 + rng() % 4096);
  for (uint32_t d : divisors) {
    const FastDivmod fd(d);
    std::vector<uint32_t> numbers = {0, 1, d - 1, d, d + 1, 2 * d - 1, (1u << 31) - 1, (1u << 31) - 2};
    for (int i = 0; i < 300; ++i) numbers.push_back(rng() % (1u << 31));
    for (uint32_t n : numbers) {
      if (n >= (1u << 31)) continue;
      uint32_t q = 0, r = 0;
      fd.divmod(n, q, r);
      ASSERT_EQ(q, n / d) << n << " / " << d;
      ASSERT_EQ(r, n % d) << n << " % " << d;
    }
  }
  EXPECT_THROW(FastDivmod(0), Error);
  EXPECT_THROW(FastDivmod(1u << 31), Error);
}

// Offset of output element `flat` in an operand of dims `in` broadcast to `out`, computed from
// the multi-index directly (the definition of numpy broadcasting).
int64_t naive_offset(int64_t flat, const Dims& out, const Dims& in) {
  std::vector<int64_t> coord(static_cast<size_t>(out.rank()));
  for (int i = out.rank() - 1; i >= 0; --i) {
    coord[static_cast<size_t>(i)] = flat % out[i];
    flat /= out[i];
  }
  int64_t off = 0;
  const int shift = out.rank() - in.rank();
  for (int i = 0; i < in.rank(); ++i) {
    const int64_t c = in[i] == 1 ? 0 : coord[static_cast<size_t>(i + shift)];
    off = off * in[i] + c;
  }
  return off;
}

TEST(CudaElementwiseHelpers, BroadcastIndexMatchesNumpy) {
  std::mt19937 rng(11);
  for (int iter = 0; iter < 300; ++iter) {
    const int rank = 1 + static_cast<int>(rng() % 6);
    Dims out;
    for (int i = 0; i < rank; ++i) out.push_back(1 + static_cast<int64_t>(rng() % 5));
    std::vector<Dims> ops;
    for (int k = 0; k < 3; ++k) {
      const int r = static_cast<int>(rng() % (rank + 1));
      Dims d;
      for (int i = rank - r; i < rank; ++i) d.push_back(rng() % 3 == 0 ? 1 : out[i]);
      ops.push_back(d);
    }
    const StridedLayout layout = broadcast_layout(out, ops);
    ASSERT_GE(layout.extents.size(), 1u);
    ASSERT_EQ(layout_volume(layout), out.volume());
    const StridedIndex<3> ix = make_strided_index<3>(layout);
    const int64_t n = out.volume();
    for (int64_t i = 0; i < n; ++i) {
      int64_t off32[3], off64[3];
      ix.offsets(static_cast<uint32_t>(i), off32);
      ix.offsets(static_cast<int64_t>(i), off64);
      for (int k = 0; k < 3; ++k) {
        const int64_t want = naive_offset(i, out, ops[static_cast<size_t>(k)]);
        ASSERT_EQ(off32[k], want) << "output " << out.to_string() << " operand "
                                  << ops[static_cast<size_t>(k)].to_string();
        ASSERT_EQ(off64[k], want);
      }
    }
    // Walking runs: every element visited once, in order, with the same offsets.
    for (int64_t first = 0; first < n; first += 5) {
      const int64_t count = std::min<int64_t>(7, n - first);
      int64_t expected = first;
      for_each_strided<3, uint32_t>(ix, first, count, [&](int64_t i, const int64_t(&off)[3]) {
        ASSERT_EQ(i, expected++);
        for (int k = 0; k < 3; ++k) ASSERT_EQ(off[k], naive_offset(i, out, ops[static_cast<size_t>(k)]));
      });
      ASSERT_EQ(expected, first + count);
    }
  }
}

TEST(CudaElementwiseHelpers, IndexPiecesCoverTheLayoutOnce) {
  std::mt19937 rng(13);
  for (int iter = 0; iter < 200; ++iter) {
    const int rank = 1 + static_cast<int>(rng() % 5);
    Dims out;
    for (int i = 0; i < rank; ++i) out.push_back(1 + static_cast<int64_t>(rng() % 6));
    const Dims a = out;
    Dims b;
    for (int i = 0; i < rank; ++i) b.push_back(rng() % 2 ? 1 : out[i]);
    const StridedLayout layout = broadcast_layout(out, {a, b});
    const int64_t n = out.volume();
    const int64_t limit = 2 + static_cast<int64_t>(rng() % 40);
    const auto pieces = make_index_pieces<2>(layout, limit);
    std::vector<int> seen(static_cast<size_t>(n), 0);
    for (const auto& p : pieces) {
      ASSERT_LT(p.n, std::max<int64_t>(limit, 2));
      for (int64_t j = 0; j < p.n; ++j) {
        int64_t off[2];
        p.index.offsets(static_cast<uint32_t>(j), off);
        const int64_t i = p.out_offset + j;
        ASSERT_LT(i, n);
        ++seen[static_cast<size_t>(i)];
        ASSERT_EQ(p.offsets[0] + off[0], naive_offset(i, out, a));
        ASSERT_EQ(p.offsets[1] + off[1], naive_offset(i, out, b))
            << out.to_string() << " vs " << b.to_string() << " limit " << limit;
      }
    }
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(seen[static_cast<size_t>(i)], 1) << "element " << i;
  }
}

TEST(CudaElementwiseHelpers, CollapseAndChannelMatch) {
  // [2,3,4] against [3,1]: nothing merges; the second operand is per channel with inner 4.
  StridedLayout l = broadcast_layout(Dims{2, 3, 4}, {Dims{2, 3, 4}, Dims{3, 1}});
  EXPECT_EQ(l.extents, (std::vector<int64_t>{2, 3, 4}));
  ChannelBroadcast m;
  ASSERT_TRUE(match_channel_broadcast(l, &m));
  EXPECT_EQ(m.dense, 0);
  EXPECT_EQ(m.outer, 2);
  EXPECT_EQ(m.channels, 3);
  EXPECT_EQ(m.inner, 4);

  // NCHW bias [C,1,1] on the left: spatial axes merge.
  l = broadcast_layout(Dims{2, 8, 5, 7}, {Dims{8, 1, 1}, Dims{2, 8, 5, 7}});
  EXPECT_EQ(l.extents, (std::vector<int64_t>{2, 8, 35}));
  ASSERT_TRUE(match_channel_broadcast(l, &m));
  EXPECT_EQ(m.dense, 1);
  EXPECT_EQ(m.outer, 2);
  EXPECT_EQ(m.channels, 8);
  EXPECT_EQ(m.inner, 35);

  // Bias along the last axis of [B,S,H]: batch and sequence merge; inner 1.
  l = broadcast_layout(Dims{4, 9, 16}, {Dims{4, 9, 16}, Dims{16}});
  EXPECT_EQ(l.extents, (std::vector<int64_t>{36, 16}));
  ASSERT_TRUE(match_channel_broadcast(l, &m));
  EXPECT_EQ(m.outer, 36);
  EXPECT_EQ(m.channels, 16);
  EXPECT_EQ(m.inner, 1);

  // Same shapes collapse to one axis; an outer product is no channel pattern.
  l = broadcast_layout(Dims{2, 3, 4}, {Dims{2, 3, 4}, Dims{2, 3, 4}});
  EXPECT_EQ(l.extents, (std::vector<int64_t>{24}));
  l = broadcast_layout(Dims{5, 6}, {Dims{5, 1}, Dims{1, 6}});
  EXPECT_FALSE(match_channel_broadcast(l, &m));
  // Size-1 axes vanish; a scalar output keeps rank 1.
  l = broadcast_layout(Dims{1, 1}, {Dims{1}, Dims{1, 1}});
  EXPECT_EQ(l.extents, (std::vector<int64_t>{1}));
  EXPECT_THROW(broadcast_strides_to(Dims{3}, Dims{2, 4}), Error);
}

// Memory offset of logical coordinate `coord` in a tensor of dims d stored in format f.
int64_t memory_offset(const std::vector<int64_t>& coord, const Dims& d, TensorFormat f) {
  std::vector<int> order;
  for (int i = 0; i < d.rank(); ++i) order.push_back(i);
  if (f == TensorFormat::kChannelsLast && d.rank() >= 3) {
    order.erase(order.begin() + 1);
    order.push_back(1);
  }
  int64_t off = 0;
  for (int axis : order) off = off * d[axis] + coord[static_cast<size_t>(axis)];
  return off;
}

TEST(CudaElementwiseHelpers, MemoryOrderBroadcastMatchesFormats) {
  std::mt19937 rng(5);
  for (int iter = 0; iter < 200; ++iter) {
    const int rank = 3 + static_cast<int>(rng() % 3);
    Dims out;
    for (int i = 0; i < rank; ++i) out.push_back(2 + static_cast<int64_t>(rng() % 3));
    std::vector<FormattedDims> ops;
    for (int k = 0; k < 2; ++k) {
      FormattedDims op;
      const int kind = static_cast<int>(rng() % 4);
      if (kind == 0) {  // channels-last of the output's rank, some axes broadcast
        for (int i = 0; i < rank; ++i) op.dims.push_back(rng() % 3 == 0 ? 1 : out[i]);
        op.format = TensorFormat::kChannelsLast;
      } else if (kind == 1) {  // per channel [C,1,...]
        op.dims.push_back(out[1]);
        for (int i = 2; i < rank; ++i) op.dims.push_back(1);
      } else if (kind == 2) {  // linear trailing dims (never reaching the channel axis)
        for (int i = 2 + static_cast<int>(rng() % (rank - 2)); i < rank; ++i) op.dims.push_back(out[i]);
      } else {  // scalar
        op.dims = Dims{1};
      }
      ops.push_back(op);
    }
    Dims out_mem;
    std::vector<Dims> ops_mem;
    ASSERT_TRUE(memory_order_broadcast({out, TensorFormat::kChannelsLast}, ops, &out_mem, &ops_mem));
    const StridedIndex<2> ix = make_strided_index<2>(broadcast_layout(out_mem, ops_mem));
    const int64_t n = out.volume();
    // Output memory index i -> logical coordinate (channels-last order), then each operand's offset.
    for (int64_t i = 0; i < n; ++i) {
      std::vector<int64_t> coord(static_cast<size_t>(rank));
      int64_t rest = i;
      coord[1] = rest % out[1];
      rest /= out[1];
      for (int a = rank - 1; a >= 2; --a) {
        coord[static_cast<size_t>(a)] = rest % out[a];
        rest /= out[a];
      }
      coord[0] = rest;
      int64_t off[2];
      ix.offsets(static_cast<uint32_t>(i), off);
      for (int k = 0; k < 2; ++k) {
        const Dims& d = ops[static_cast<size_t>(k)].dims;
        std::vector<int64_t> c;
        for (int a = 0; a < d.rank(); ++a) c.push_back(d[a] == 1 ? 0 : coord[static_cast<size_t>(a + rank - d.rank())]);
        ASSERT_EQ(off[k], memory_offset(c, d, ops[static_cast<size_t>(k)].format))
            << "out " << out.to_string() << " operand " << d.to_string();
      }
    }
  }
  // A linear operand with channels cannot be read in channels-last order.
  Dims out_mem;
  std::vector<Dims> ops_mem;
  EXPECT_FALSE(memory_order_broadcast({Dims{2, 3, 4, 5}, TensorFormat::kChannelsLast},
                                      {{Dims{2, 3, 4, 5}, TensorFormat::kLinear}}, &out_mem, &ops_mem));
  EXPECT_FALSE(memory_order_broadcast({Dims{2, 3, 4, 5}, TensorFormat::kLinear},
                                      {{Dims{2, 3, 4, 5}, TensorFormat::kChannelsLast}}, &out_mem, &ops_mem));
  EXPECT_TRUE(memory_order_broadcast({Dims{2, 1, 4, 5}, TensorFormat::kChannelsLast},
                                     {{Dims{2, 1, 4, 5}, TensorFormat::kLinear}}, &out_mem, &ops_mem));
  Dims b;
  ASSERT_TRUE(numpy_broadcast({Dims{2, 1, 4}, Dims{3, 1}, Dims{}}, &b));
  EXPECT_EQ(b, (Dims{2, 3, 4}));
  EXPECT_FALSE(numpy_broadcast({Dims{2, 3}, Dims{4}}, &b));
}

TEST(CudaElementwiseHelpers, FormatIrrelevant) {
  EXPECT_TRUE(format_irrelevant(Dims{5, 7}));
  EXPECT_TRUE(format_irrelevant(Dims{1, 8, 1, 1}));
  EXPECT_TRUE(format_irrelevant(Dims{1, 1, 1, 9}));
  EXPECT_FALSE(format_irrelevant(Dims{1, 8, 2, 1}));
}

// ---- FusedElementWise compiler -------------------------------------------------------------------

// Scalar semantics of the few ops the random programs use (enough to tell registers apart).
float apply(FusedOpCode code, int32_t op, float a, float b, double p0, double p1, double p2) {
  switch (code) {
    case FusedOpCode::kConst:
      return static_cast<float>(p0);
    case FusedOpCode::kActivation:
      return a > 0.0f ? a : static_cast<float>(p0) * a;  // leaky relu
    case FusedOpCode::kUnary:
      return static_cast<UnaryOp>(op) == UnaryOp::kNeg ? -a : std::fabs(a);
    case FusedOpCode::kScale:
      return a * static_cast<float>(p0) + static_cast<float>(p1);
    case FusedOpCode::kBinary:
      switch (static_cast<ElementWiseOp>(op)) {
        case ElementWiseOp::kSum:
          return a + b;
        case ElementWiseOp::kSub:
          return a - b;
        case ElementWiseOp::kProd:
          return a * b;
        default:
          return std::max(a, b);
      }
  }
  return 0.0f;
}

FusedProgram random_program(std::mt19937& rng, int num_inputs, int num_instrs) {
  FusedProgram p;
  p.num_inputs = num_inputs;
  const ElementWiseOp binops[] = {ElementWiseOp::kSum, ElementWiseOp::kSub, ElementWiseOp::kProd, ElementWiseOp::kMax};
  for (int k = 0; k < num_instrs; ++k) {
    const int defined = num_inputs + k;
    FusedInstr ins;
    const int kind = static_cast<int>(rng() % 10);
    ins.a = static_cast<int32_t>(rng() % defined);
    if (kind == 0) {
      ins.code = FusedOpCode::kConst;
      ins.a = -1;
      ins.p0 = static_cast<double>(rng() % 7) - 3.0;
    } else if (kind == 1) {
      ins.code = FusedOpCode::kActivation;
      ins.op = static_cast<int32_t>(ActivationType::kLeakyRelu);
      ins.p0 = 0.25;
    } else if (kind == 2) {
      ins.code = FusedOpCode::kUnary;
      ins.op = static_cast<int32_t>(rng() % 2 ? UnaryOp::kNeg : UnaryOp::kAbs);
    } else if (kind == 3) {
      ins.code = FusedOpCode::kScale;
      ins.p0 = 0.5;
      ins.p1 = 1.5;
      ins.p2 = 1.0;
    } else {
      ins.code = FusedOpCode::kBinary;
      ins.op = static_cast<int32_t>(binops[rng() % 4]);
      ins.b = static_cast<int32_t>(rng() % defined);
    }
    p.instrs.push_back(ins);
  }
  return p;
}

// Runs a compiled program over `n` elements on the host the way the kernel does: pinned inputs
// loaded once, the others per element, values in slots.
std::vector<float> run_compiled(const FusedKernelProgram& c, const std::vector<std::vector<float>>& inputs, int64_t n) {
  std::vector<float> slots(kFusedMaxSlots, std::nanf(""));
  for (int i = 0; i < c.num_inputs; ++i) {
    if (c.input_pinned[i] && c.input_slot[i] != kFusedNoSlot)
      slots[c.input_slot[i]] = inputs[static_cast<size_t>(i)][0];
  }
  std::vector<float> out(static_cast<size_t>(n));
  for (int64_t e = 0; e < n; ++e) {
    for (int i = 0; i < c.num_inputs; ++i) {
      if (!c.input_pinned[i] && c.input_slot[i] != kFusedNoSlot) {
        slots[c.input_slot[i]] = inputs[static_cast<size_t>(i)][static_cast<size_t>(e)];
      }
    }
    float r = 0.0f;
    for (int k = 0; k < c.num_instrs; ++k) {
      const FusedKernelInstr& ins = c.instrs[k];
      const float a = ins.a == kFusedImmediate ? ins.ia : slots[ins.a];
      const float b = ins.b == kFusedImmediate ? ins.ib : slots[ins.b];
      r = apply(static_cast<FusedOpCode>(ins.code), ins.op, a, b, ins.p0, ins.p1, ins.p2);
      if (k + 1 < c.num_instrs) slots[ins.dst] = r;
    }
    out[static_cast<size_t>(e)] = r;
  }
  return out;
}

std::vector<float> run_direct(const FusedProgram& p, const std::vector<std::vector<float>>& inputs, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  for (int64_t e = 0; e < n; ++e) {
    std::vector<float> reg;
    for (const auto& in : inputs) reg.push_back(in.size() == 1 ? in[0] : in[static_cast<size_t>(e)]);
    for (const FusedInstr& ins : p.instrs) {
      const float a = ins.a >= 0 ? reg[static_cast<size_t>(ins.a)] : 0.0f;
      const float b = ins.b >= 0 ? reg[static_cast<size_t>(ins.b)] : 0.0f;
      reg.push_back(apply(ins.code, ins.op, a, b, ins.p0, ins.p1, ins.p2));
    }
    out[static_cast<size_t>(e)] = reg.back();
  }
  return out;
}

TEST(CudaElementwiseHelpers, FusedProgramCompilesToEquivalentSlots) {
  std::mt19937 rng(3);
  int compiled_count = 0;
  for (int iter = 0; iter < 400; ++iter) {
    const int num_inputs = 1 + static_cast<int>(rng() % 5);
    const FusedProgram p = random_program(rng, num_inputs, 1 + static_cast<int>(rng() % 24));
    std::vector<bool> broadcast(static_cast<size_t>(num_inputs));
    std::vector<std::vector<float>> inputs;
    const int64_t n = 6;
    for (int i = 0; i < num_inputs; ++i) {
      broadcast[static_cast<size_t>(i)] = rng() % 3 == 0;
      std::vector<float> v(broadcast[static_cast<size_t>(i)] ? 1 : static_cast<size_t>(n));
      for (float& x : v) x = static_cast<float>(static_cast<int>(rng() % 9) - 4) * 0.5f;
      inputs.push_back(v);
    }
    FusedKernelProgram c;
    std::string why;
    if (!compile_fused_program(p, broadcast, &c, &why)) continue;  // too many live values
    ++compiled_count;
    ASSERT_LE(c.num_instrs, static_cast<int>(p.instrs.size()));
    ASSERT_LE(c.num_slots, kFusedMaxSlots);
    const auto want = run_direct(p, inputs, n);
    const auto got = run_compiled(c, inputs, n);
    for (int64_t e = 0; e < n; ++e) {
      ASSERT_EQ(got[static_cast<size_t>(e)], want[static_cast<size_t>(e)]) << "iteration " << iter << " element " << e;
    }
  }
  EXPECT_GT(compiled_count, 300);
}

TEST(CudaElementwiseHelpers, FusedProgramFoldsConstantsAndDropsDeadCode) {
  // SiLU-like: r1 = const 2 (immediate), r2 = dead abs, r3 = r0 * r1, r4 = act(r3).
  const FusedProgram p =
      parse_fused_program({"const 2", "unary abs r0", "binary prod r0 r1", "act relu r3 0 0"}, 1, "t");
  FusedKernelProgram c;
  ASSERT_TRUE(compile_fused_program(p, {false}, &c, nullptr));
  ASSERT_EQ(c.num_instrs, 2);
  EXPECT_EQ(c.instrs[0].b, kFusedImmediate);
  EXPECT_EQ(c.instrs[0].ib, 2.0f);
  EXPECT_EQ(c.num_slots, 1);  // r0 dies at r3, whose slot then holds r3
}

TEST(CudaElementwiseHelpers, FusedProgramLimits) {
  FusedKernelProgram c;
  std::string why;
  // 17 inputs.
  FusedProgram many_inputs;
  many_inputs.num_inputs = 17;
  many_inputs.instrs.push_back(FusedInstr{FusedOpCode::kBinary, static_cast<int32_t>(ElementWiseOp::kSum), 0, 1});
  EXPECT_FALSE(compile_fused_program(many_inputs, std::vector<bool>(17, false), &c, &why));
  // 33 live instructions in a chain.
  FusedProgram chain;
  chain.num_inputs = 1;
  for (int k = 0; k < 33; ++k) {
    chain.instrs.push_back(FusedInstr{FusedOpCode::kUnary, static_cast<int32_t>(UnaryOp::kNeg), k, -1});
  }
  EXPECT_FALSE(compile_fused_program(chain, {false}, &c, &why));
  chain.instrs.pop_back();
  EXPECT_TRUE(compile_fused_program(chain, {false}, &c, &why)) << why;
  EXPECT_EQ(c.num_slots, 1);
  // 17 values live at once: r0 negated 17 times, then summed.
  FusedProgram wide;
  wide.num_inputs = 1;
  for (int k = 0; k < 17; ++k)
    wide.instrs.push_back(FusedInstr{FusedOpCode::kUnary, static_cast<int32_t>(UnaryOp::kNeg), 0, -1});
  int acc = 1;
  for (int k = 2; k <= 17; ++k) {
    wide.instrs.push_back(FusedInstr{FusedOpCode::kBinary, static_cast<int32_t>(ElementWiseOp::kSum), acc, k});
    acc = static_cast<int>(wide.instrs.size());
  }
  EXPECT_FALSE(compile_fused_program(wide, {false}, &c, &why));
}

}  // namespace
}  // namespace kiln::cuda
