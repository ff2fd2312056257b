// rng_mix.h: the counter-based mixer behind rng.h, as inline code that both the C sources and
// the CUDA kernels compile, so a dropout mask drawn on the GPU is bitwise the CPU's.
#ifndef GALLEY_RNG_MIX_H
#define GALLEY_RNG_MIX_H

#include <stdint.h>

#if defined(__CUDACC__)
#define GL_HD __host__ __device__ __forceinline__
#else
#define GL_HD static inline
#endif

GL_HD uint64_t rng_mix64(uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// The key of (seed, purpose, step): hashed once per kernel, then rng_mix_at per element.
GL_HD uint64_t rng_mix_key(uint64_t seed, uint32_t purpose, uint64_t step) {
    // Each field passes through the full mixer so nearby keys give unrelated outputs.
    uint64_t h = rng_mix64(seed);
    h = rng_mix64(h ^ (0xA0761D6478BD642Full * (uint64_t)purpose));
    return rng_mix64(h ^ step);
}

GL_HD uint64_t rng_mix_at(uint64_t key, uint64_t index) { return rng_mix64(key ^ (index * 0xE7037ED1A0B428DBull)); }

// Uniform in [0, 1) with 24 random bits (exactly representable in float).
GL_HD float rng_mix_uniform(uint64_t key, uint64_t index) {
    return (float)(rng_mix_at(key, index) >> 40) * (1.0f / 16777216.0f);
}

#endif
