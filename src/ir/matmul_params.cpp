// MatMulParams / GemmParams::decode (matmul_params.h).
#include "src/ir/matmul_params.h"

#include "src/ir/op_params.h"

namespace kiln {

MatMulParams MatMulParams::decode(const Layer& layer) {
  const ParamReader r(layer);
  MatMulParams p;
  p.transpose_a = r.get_int("transpose_a") != 0;
  p.transpose_b = r.get_int("transpose_b") != 0;
  p.concurrent_streams = r.int_in("concurrent_streams", 1, kMaxTuneStreams);
  return p;
}

GemmParams GemmParams::decode(const Layer& layer) {
  const ParamReader r(layer);
  GemmParams p;
  p.alpha = r.get_float("alpha");
  p.beta = r.get_float("beta");
  p.trans_a = r.get_int("trans_a") != 0;
  p.trans_b = r.get_int("trans_b") != 0;
  p.concurrent_streams = r.int_in("concurrent_streams", 1, kMaxTuneStreams);
  return p;
}

}  // namespace kiln
