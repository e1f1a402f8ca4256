// What the CPU offers the hand-vectorized kernels (conversions, statistics,
// the GPU load test's checksum), asked once per process.
//
// The hand-vectorized kernels are x86-64's (AVX2, F16C, VPCLMULQDQ) and are compiled
// only there (CKPTFIX_AVX2_KERNELS); elsewhere (the aarch64 release build)
// the portable loops run, which the compiler vectorizes for that target.
#pragma once

#if defined(__x86_64__)
#define CKPTFIX_AVX2_KERNELS 1
#include <cpuid.h>
#else
#define CKPTFIX_AVX2_KERNELS 0
#endif

namespace ckptfix {

#if CKPTFIX_AVX2_KERNELS

/// AVX2 usable: by the CPU and by the operating system (which must save the
/// YMM registers; __builtin_cpu_supports checks both).
inline bool cpu_has_avx2() {
  static const bool yes = __builtin_cpu_supports("avx2");
  return yes;
}

/// AVX2 and F16C. F16C comes from CPUID leaf 1 (ECX bit 29): clang 14's
/// __builtin_cpu_supports does not know "f16c". AVX2 being usable implies
/// the OS saves YMM state.
inline bool cpu_has_avx2_f16c() {
  static const bool yes = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return cpu_has_avx2() && __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
  }();
  return yes;
}

/// AVX2 and VPCLMULQDQ (carry-less multiplication on 256-bit vectors, for
/// CRC-32): CPUID leaf 7 ECX bit 10, and PCLMULQDQ, leaf 1 ECX bit 1.
inline bool cpu_has_avx2_vpclmulqdq() {
  static const bool yes = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!cpu_has_avx2() || __get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0 || (ecx & bit_PCLMUL) == 0) return false;
    return __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_VPCLMULQDQ) != 0;
  }();
  return yes;
}
/// VPCLMULQDQ on 512-bit vectors too: AVX-512F usable (by the CPU and the
/// OS, which must save the ZMM registers; __builtin_cpu_supports checks both).
/// Every CPU with both (Intel Ice Lake and later, AMD Zen 4 and later) runs
/// 512-bit carry-less multiplications without the clock penalty of the first
/// AVX-512 CPUs, which have no VPCLMULQDQ.
inline bool cpu_has_avx512_vpclmulqdq() {
  static const bool yes = cpu_has_avx2_vpclmulqdq() && __builtin_cpu_supports("avx512f");
  return yes;
}
#else
inline bool cpu_has_avx2() { return false; }
inline bool cpu_has_avx2_f16c() { return false; }
inline bool cpu_has_avx2_vpclmulqdq() { return false; }
inline bool cpu_has_avx512_vpclmulqdq() { return false; }
#endif

}  // namespace ckptfix
