// rng.c: counter-based random numbers from a keyed 64-bit mixer (SplitMix64 finaliser chain).
#include "galley/rng.h"

#include <math.h>

#include "galley/rng_mix.h"  // the mixer itself, shared with the CUDA kernels

uint64_t rng_u64(uint64_t seed, uint32_t purpose, uint64_t step, uint64_t index) {
    return rng_mix_at(rng_mix_key(seed, purpose, step), index);
}

float rng_uniform(uint64_t seed, uint32_t purpose, uint64_t step, uint64_t index) {
    return rng_mix_uniform(rng_mix_key(seed, purpose, step), index);
}

float rng_normal(uint64_t seed, uint32_t purpose, uint64_t step, uint64_t index) {
    // 53-bit uniforms in (0, 1] for u1 so log() never sees 0.
    double u1 = ((rng_u64(seed, purpose, step, 2 * index) >> 11) + 1.0) * (1.0 / 9007199254740992.0);
    double u2 = (rng_u64(seed, purpose, step, 2 * index + 1) >> 11) * (1.0 / 9007199254740992.0);
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

uint64_t rng_below(uint64_t seed, uint32_t purpose, uint64_t step, uint64_t index, uint64_t n) {
    return (uint64_t)(((unsigned __int128)rng_u64(seed, purpose, step, index) * n) >> 64);
}
