// The math functions generated kernels call: tinsmith::math::exp(x) and the others, each with
// a float and a double overload and, as <cmath> has them, one for any other arithmetic type
// (computed in double). Classification (isnan, isinf, signbit) gives bool. kInfinity and kNaN
// stand for <cmath>'s INFINITY and NAN.
//
// Why not <cmath>: in C++17 libstdc++'s also declares the special functions (std::riemann_zeta
// and the rest), some 13,000 lines that every compile of a model would read for nothing: 0.09 s
// of a host compile, 0.06 s of a Cortex-M one, most of the time a small model takes. GCC and
// Clang get the compiler's builtins, which are what libstdc++'s <cmath> calls (its
// std::exp(float) is __builtin_expf), so the same code is compiled, in single precision for
// float; the calls that are not inlined go to the C library's expf, fmaxf, ... as before.
// RISC-V and other compilers get <cmath>'s own functions: the RISC-V toolchains ship no C++
// library, so their <cmath> is Tinsmith's small one over picolibc (runtime_cpp/baremetal/
// riscv_cxx), and picolibc defines fmaxf, fminf and sqrtf inline in the F extension's
// instructions, where GCC 12's builtins call the library (10% more instructions on kws_dscnn).
//
// Firmware includes this header: it declares functions only, no state.
#pragma once

#if defined(__GNUC__) && !defined(__riscv)
#define TINSMITH_MATH_BUILTINS 1
#else
#include <cmath>
#endif

namespace tinsmith {
namespace math {

#if defined(TINSMITH_MATH_BUILTINS)  // GCC and Clang

constexpr float kInfinity = __builtin_inff();
constexpr float kNaN = __builtin_nanf("");

#define TINSMITH_MATH_UNARY(name)                                                               \
  inline float name(float x) noexcept { return __builtin_##name##f(x); }                        \
  inline double name(double x) noexcept { return __builtin_##name(x); }                        \
  template <typename T>                                                                         \
  inline double name(T x) noexcept {                                                            \
    return __builtin_##name(static_cast<double>(x));                                            \
  }
#define TINSMITH_MATH_BINARY(name)                                                              \
  inline float name(float x, float y) noexcept { return __builtin_##name##f(x, y); }            \
  inline double name(double x, double y) noexcept { return __builtin_##name(x, y); }            \
  template <typename T, typename U>                                                             \
  inline double name(T x, U y) noexcept {                                                       \
    return __builtin_##name(static_cast<double>(x), static_cast<double>(y));                    \
  }
// type-generic builtins: one spelling for every floating type
#define TINSMITH_MATH_CLASSIFY(name)                                                            \
  inline bool name(float x) noexcept { return __builtin_##name(x); }                            \
  inline bool name(double x) noexcept { return __builtin_##name(x); }                           \
  template <typename T>                                                                         \
  inline bool name(T x) noexcept {                                                              \
    return __builtin_##name(static_cast<double>(x));                                            \
  }

TINSMITH_MATH_UNARY(exp)
TINSMITH_MATH_UNARY(log)
TINSMITH_MATH_UNARY(log1p)
TINSMITH_MATH_UNARY(sqrt)
TINSMITH_MATH_UNARY(fabs)
TINSMITH_MATH_UNARY(floor)
TINSMITH_MATH_UNARY(ceil)
TINSMITH_MATH_UNARY(nearbyint)  // ties to even in the default rounding mode, never inexact
TINSMITH_MATH_UNARY(sin)
TINSMITH_MATH_UNARY(cos)
TINSMITH_MATH_UNARY(tan)
TINSMITH_MATH_UNARY(asin)
TINSMITH_MATH_UNARY(acos)
TINSMITH_MATH_UNARY(atan)
TINSMITH_MATH_UNARY(sinh)
TINSMITH_MATH_UNARY(cosh)
TINSMITH_MATH_UNARY(tanh)
TINSMITH_MATH_UNARY(asinh)
TINSMITH_MATH_UNARY(acosh)
TINSMITH_MATH_UNARY(atanh)
TINSMITH_MATH_UNARY(erf)
TINSMITH_MATH_BINARY(fmax)
TINSMITH_MATH_BINARY(fmin)
TINSMITH_MATH_BINARY(pow)
TINSMITH_MATH_BINARY(fmod)
TINSMITH_MATH_CLASSIFY(isnan)
TINSMITH_MATH_CLASSIFY(isinf)
TINSMITH_MATH_CLASSIFY(signbit)

#undef TINSMITH_MATH_UNARY
#undef TINSMITH_MATH_BINARY
#undef TINSMITH_MATH_CLASSIFY

#else  // RISC-V and any other compiler: <cmath>'s overloads

constexpr float kInfinity = INFINITY;
constexpr float kNaN = NAN;

using std::acos;
using std::acosh;
using std::asin;
using std::asinh;
using std::atan;
using std::atanh;
using std::ceil;
using std::cos;
using std::cosh;
using std::erf;
using std::exp;
using std::fabs;
using std::floor;
using std::fmax;
using std::fmin;
using std::fmod;
using std::isinf;
using std::isnan;
using std::log;
using std::log1p;
using std::nearbyint;
using std::pow;
using std::signbit;
using std::sin;
using std::sinh;
using std::sqrt;
using std::tan;
using std::tanh;

#endif
#undef TINSMITH_MATH_BUILTINS

}  // namespace math
}  // namespace tinsmith
