// Micro-benchmarks of the kernels every byte goes through: CRC-32, XXH3,
// the GPU load test's checksum, and each dtype conversion, in GB/s of input.
//
//   build/bench/ckptfix_micro_bench [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <cstring>
#include <random>
#include <vector>
#include <xxhash.h>

#include "bytes/load_test.h"
#include "bytes/xxh3.h"
#include "dtype_kernels/convert.h"
#include "zip/crc32.h"

namespace {

constexpr size_t kBytes = size_t{8} << 20;  // 8 MiB: larger than L2, like the copier's chunks

std::vector<std::byte> random_bytes(size_t n) {
  std::vector<std::byte> v(n);
  std::mt19937_64 rng(42);
  for (size_t i = 0; i + 8 <= n; i += 8) {
    const uint64_t r = rng();
    std::memcpy(v.data() + i, &r, 8);
  }
  return v;
}

// Floats that look like weights (normal values), so branches behave as in real files.
std::vector<std::byte> weight_bytes(size_t n, ckptfix::DType dtype) {
  std::vector<std::byte> v(n);
  std::mt19937 rng(7);
  std::normal_distribution<double> dist(0.0, 0.05);
  const size_t es = ckptfix::element_size(dtype);
  for (size_t i = 0; i + es <= n; i += es) {
    const double d = dist(rng);
    if (dtype == ckptfix::DType::kFloat64) {
      std::memcpy(v.data() + i, &d, 8);
    } else if (dtype == ckptfix::DType::kFloat32) {
      const float f = static_cast<float>(d);
      std::memcpy(v.data() + i, &f, 4);
    } else if (es == 1) {
      const uint8_t b = dtype == ckptfix::DType::kFloat8E4M3Fn ? ckptfix::float_to_float8_e4m3fn_bits(static_cast<float>(d))
                                                               : ckptfix::float_to_float8_e5m2_bits(static_cast<float>(d));
      std::memcpy(v.data() + i, &b, 1);
    } else {
      const uint16_t h = dtype == ckptfix::DType::kFloat16 ? ckptfix::float_to_half_bits(static_cast<float>(d))
                                                           : ckptfix::float_to_bfloat16_bits_scalar(static_cast<float>(d));
      std::memcpy(v.data() + i, &h, 2);
    }
  }
  return v;
}

void BM_Crc32(benchmark::State& state) {
  const auto data = random_bytes(kBytes);
  for (auto _ : state) benchmark::DoNotOptimize(ckptfix::crc32_update(0, data));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kBytes));
}
BENCHMARK(BM_Crc32);

// ckptfix's XXH3 (AVX2 where the CPU has it) and the library's entry point
// (Debian builds it for SSE2).
void BM_Xxh3(benchmark::State& state) {
  const auto data = random_bytes(kBytes);
  for (auto _ : state) benchmark::DoNotOptimize(ckptfix::xxh3_64(data));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kBytes));
}
BENCHMARK(BM_Xxh3);

void BM_Xxh3Library(benchmark::State& state) {
  const auto data = random_bytes(kBytes);
  for (auto _ : state) benchmark::DoNotOptimize(XXH3_64bits(data.data(), data.size()));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kBytes));
}
BENCHMARK(BM_Xxh3Library);

// The GPU load test's CPU checksum (the reference the device must equal),
// and the portable loop it replaces where the CPU has no AVX2.
void BM_LoadTestChecksum(benchmark::State& state) {
  const auto data = random_bytes(kBytes);
  for (auto _ : state) {
    ckptfix::WordChecksum c;
    c.update(data);
    benchmark::DoNotOptimize(c.finish());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kBytes));
}
BENCHMARK(BM_LoadTestChecksum);

void BM_LoadTestChecksumPortable(benchmark::State& state) {
  const auto data = random_bytes(kBytes);
  for (auto _ : state) benchmark::DoNotOptimize(ckptfix::word_checksum_reference(data));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kBytes));
}
BENCHMARK(BM_LoadTestChecksumPortable);

void BM_Convert(benchmark::State& state, ckptfix::DType from, ckptfix::DType to) {
  const auto src = weight_bytes(kBytes, from);
  const size_t count = kBytes / ckptfix::element_size(from);
  std::vector<std::byte> dst(count * ckptfix::element_size(to));
  for (auto _ : state) {
    benchmark::DoNotOptimize(ckptfix::convert_elements(from, to, src.data(), dst.data(), count, {0, count}));
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kBytes));
}

using ckptfix::DType;
BENCHMARK_CAPTURE(BM_Convert, f32_to_bf16, DType::kFloat32, DType::kBFloat16);
BENCHMARK_CAPTURE(BM_Convert, f32_to_f16, DType::kFloat32, DType::kFloat16);
BENCHMARK_CAPTURE(BM_Convert, f64_to_f32, DType::kFloat64, DType::kFloat32);
BENCHMARK_CAPTURE(BM_Convert, f64_to_bf16, DType::kFloat64, DType::kBFloat16);
BENCHMARK_CAPTURE(BM_Convert, f64_to_f16, DType::kFloat64, DType::kFloat16);
BENCHMARK_CAPTURE(BM_Convert, f16_to_f32, DType::kFloat16, DType::kFloat32);
BENCHMARK_CAPTURE(BM_Convert, bf16_to_f32, DType::kBFloat16, DType::kFloat32);
BENCHMARK_CAPTURE(BM_Convert, f16_to_bf16, DType::kFloat16, DType::kBFloat16);
BENCHMARK_CAPTURE(BM_Convert, bf16_to_f16, DType::kBFloat16, DType::kFloat16);
BENCHMARK_CAPTURE(BM_Convert, f32_to_f64, DType::kFloat32, DType::kFloat64);
BENCHMARK_CAPTURE(BM_Convert, f32_to_e4m3fn, DType::kFloat32, DType::kFloat8E4M3Fn);
BENCHMARK_CAPTURE(BM_Convert, f32_to_e5m2, DType::kFloat32, DType::kFloat8E5M2);
BENCHMARK_CAPTURE(BM_Convert, bf16_to_e4m3fn, DType::kBFloat16, DType::kFloat8E4M3Fn);
BENCHMARK_CAPTURE(BM_Convert, e4m3fn_to_bf16, DType::kFloat8E4M3Fn, DType::kBFloat16);
BENCHMARK_CAPTURE(BM_Convert, e5m2_to_f32, DType::kFloat8E5M2, DType::kFloat32);

}  // namespace

BENCHMARK_MAIN();
