// The fused activations of kiln's vectorized float32 CPU kernels, written once for both register
// widths. Not a standalone header: activation_avx2.h includes it inside namespace
// kiln::cpu::avx2 (8 lanes, under KILN_ISA_AVX2_BEGIN) and activation_avx512.h
// inside kiln::cpu::avx512 (16 lanes, AVX-512F), each after defining, as always-inline functions
// in that namespace, the register type `V` and these operations on it:
//   set1(f); add, sub, mul, div, min, max (a, b: NaN in either gives b, as the x86 instructions);
//   fmadd(a, b, c) = a b + c, fnmadd(a, b, c) = c - a b, fmsub(a, b, c) = a b - c (one rounding);
//   abs(a); with_exponent_added(e, t): e times 2^n where the low bits of t hold n (t = 1.5 x 2^23
//   + n, the rounding's magic number plus n); where_negative(v, a): a where v < 0, else v;
//   kLanes; load(p), store(p, v); load_first(p, n), store_first(p, n, v) for the first n < kLanes.
// So the two widths compute the same bits per lane (tests/activation_avx2_test.cpp checks both
// against double precision); on AMD's Zen 4 the 16-lane form runs SiLU at 0.20 ns per element
// against 0.27 for 8 lanes (both at the same FMA rate: fewer instructions), on Intel's AVX-512
// cores with two 512-bit units up to twice as fast. No include guard: it is included once per width.

// 1 + exp(-x) for x clamped to [-87, 87] (sigmoid(x) is 1 / that: above 87 it rounds to 1, below
// -87 it stays at sigmoid(-87) = 1.6e-38 where the exact value is smaller still). exp(-x) = 2^n
// exp(-g) with n = round(-x log2 e) and g = x + n ln 2 (ln 2 in two parts), |g| <= ln 2 / 2, where
// a degree-5 polynomial fitted for kiln (least squares weighted towards the largest relative error)
// is within 7.6e-8 of exp(-g), 2.2e-7 in float32 arithmetic. 2^n is added to the polynomial's
// exponent bits (n >= -126 keeps the result a float32, at worst a subnormal). 18 operations,
// against 26 for exp from exp(-|x|) with a select: 2.9 ns per 8 SiLUs against 4.9 on an AVX2
// machine (session 21, docs/status.md).
[[gnu::always_inline]] inline V one_plus_exp_neg(V x) {
  // x second: max and min return their second operand where one is NaN, so NaN stays NaN.
  const V c = min(set1(87.0f), max(set1(-87.0f), x));
  const V magic = set1(12582912.0f);
  const V t = fnmadd(c, set1(1.4426950408889634f), magic);  // magic + n
  const V n = sub(t, magic);
  V g = fmadd(n, set1(0.693145751953125f), c);
  g = fmadd(n, set1(1.428606765330187e-06f), g);
  V e = set1(-0.008297719061374664f);
  e = fmadd(e, g, set1(0.04191556200385094f));
  e = fmadd(e, g, set1(-0.16667574644088745f));
  e = fmadd(e, g, set1(0.49998894333839417f));
  e = fmadd(e, g, set1(-0.9999997019767761f));
  e = fmadd(e, g, set1(1.0000001192092896f));
  return add(set1(1.0f), with_exponent_added(e, t));
}

// GELU (erf form), x Phi(x) with Phi the normal distribution function, in one range (vector_erf.h's
// erf evaluates both of erf's ranges for every element): with v = min(|x|, 12.73),
//   q = Phi(-v) = erfc(v / sqrt 2) / 2 = exp(-v^2 / 2) R(t) / 2, t = 1 / (1 + 0.415 v / sqrt 2),
// R of degree 8 fitting erfc(a) exp(a^2) on a in [0, 9] (relative 3.3e-8; fitted for kiln), and
//   gelu(x) = (x + |x|) / 2 - v q   (x - x q for x >= 0, x q below).
// -v^2 / 2 is kept as hi + lo (a rounded v^2 would put 6e-8 v^2 of error into the exponent, 3e-7
// of q at x = -3); exp as in one_plus_exp_neg, with a degree-6 polynomial. Against the definition
// in double precision on [-20, 20] (tests/activation_avx2_test.cpp): within 3e-8 absolute + 3e-7
// relative. Below x = -12.73 the result is -1e-36 or so where the exact value is smaller still;
// NaN stays NaN, gelu(inf) = inf, gelu(-inf) = NaN (the definition's -inf * 0), gelu(-0) = +0.
// 0.62 ns per element on 8 lanes against 0.95 for 0.5 x (1 + erf(x / sqrt 2)) with vector_erf.h's
// erf (session 22, docs/status.md).
[[gnu::always_inline]] inline V gelu_erf(V x) {
  const V ax = abs(x);
  const V v = min(ax, set1(12.727922061357855f));  // NaN: 12.73 (x carries it)
  const V t = div(set1(1.0f), fmadd(v, set1(0.415f * 0.70710678118654752f), set1(1.0f)));
  // R / 2.
  V r = set1(0.039677159496665595f);
  r = fmadd(r, t, set1(-0.18771389431066899f));
  r = fmadd(r, t, set1(0.2846406450837533f));
  r = fmadd(r, t, set1(-0.1308054357347043f));
  r = fmadd(r, t, set1(0.17465666397546825f));
  r = fmadd(r, t, set1(0.08117160581802763f));
  r = fmadd(r, t, set1(0.12176374933772942f));
  r = fmadd(r, t, set1(0.11658828642374369f));
  r = fmadd(r, t, set1(2.1209004816761135e-05f));
  // exp(hi + lo), hi + lo = -v^2 / 2 in [-81, 0]: 2^n exp(f), n = round(hi / ln 2).
  const V p = mul(set1(-0.5f), v);
  const V hi = mul(p, v);
  const V lo = fmsub(p, v, hi);
  const V magic = set1(12582912.0f);
  const V m = fmadd(hi, set1(1.4426950408889634f), magic);  // magic + n
  const V n = sub(m, magic);
  V f = add(fnmadd(n, set1(0.693145751953125f), hi), lo);
  f = fnmadd(n, set1(1.428606765330187e-06f), f);
  V e = set1(0.0013949027423451985f);
  e = fmadd(e, f, set1(0.008374978300279546f));
  e = fmadd(e, f, set1(0.04166621655013112f));
  e = fmadd(e, f, set1(0.16666421065214246f));
  e = fmadd(e, f, set1(0.5000000106139884f));
  e = fmadd(e, f, set1(1.0000000353934702f));
  e = fmadd(e, f, set1(0.9999999999617671f));
  // q = e r 2^n (n in [-117, 0] keeps it a float32).
  const V q = with_exponent_added(mul(e, r), m);
  const V half = set1(0.5f);
  return fnmadd(v, q, fmadd(half, x, mul(half, ax)));
}

// 1 / (1 + exp(-x)). A division, not the reciprocal estimate and a Newton step: the divider runs
// beside the other units, and measured in a loop of SiLUs it was 12% faster (AVX2 machine; on Zen
// 4 the division is 1.2x faster than rcp + a Newton step at 8 lanes, and than rcp14 + one at 8).
[[gnu::always_inline]] inline V sigmoid(V x) { return div(set1(1.0f), one_plus_exp_neg(x)); }

[[gnu::always_inline]] inline V activate(V v, const PostOp& post) {
  if (!post.enabled) return v;
  const V zero = set1(0.0f), one = set1(1.0f);
  switch (post.kind) {
    case ActivationType::kRelu:
      return max(v, zero);
    case ActivationType::kLeakyRelu:
      return where_negative(v, mul(v, set1(post.alpha)));
    case ActivationType::kClip:
      return min(max(v, set1(post.alpha)), set1(post.beta));
    case ActivationType::kSilu:
      return div(v, one_plus_exp_neg(v));
    case ActivationType::kSigmoid:
      return sigmoid(v);
    case ActivationType::kHardSigmoid:
      return max(zero, min(one, fmadd(set1(post.alpha), v, set1(post.beta))));
    case ActivationType::kHardSwish:
      return mul(v, max(zero, min(one, fmadd(v, set1(1.0f / 6.0f), set1(0.5f)))));
    case ActivationType::kGeluErf:
      return gelu_erf(v);
    default:
      return v;  // not reached: kernels decline what activation_vectorized() refuses
  }
}

// y = act(x) over [begin, end) (y may be x: each element is read before it is written), the kind
// a constant so that activate()'s switch folds away.
template <ActivationType K>
void activate_range(const float* x, float* y, int64_t begin, int64_t end, float alpha, float beta) {
  const PostOp post{true, K, alpha, beta};
  int64_t i = begin;
  for (; i + kLanes <= end; i += kLanes) store(y + i, activate(load(x + i), post));
  if (i < end) store_first(y + i, end - i, activate(load_first(x + i, end - i), post));
}
