// rng.c: counter-based random numbers from a keyed 64-bit mixer (SplitMix64 finaliser chain).
#include "galley/rng.h"

#include <math.h>

static uint64_t mix64(uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

uint64_t rng_u64(uint64_t seed, uint32_t purpose, uint64_t step, uint64_t index) {
    // Each field passes through the full mixer so nearby keys give unrelated outputs.
    uint64_t h = mix64(seed);
    h = mix64(h ^ (0xA0761D6478BD642Full * (uint64_t)purpose));
    h = mix64(h ^ step);
    return mix64(h ^ (index * 0xE7037ED1A0B428DBull));
}

float rng_uniform(uint64_t seed, uint32_t purpose, uint64_t step, uint64_t index) {
    return (float)(rng_u64(seed, purpose, step, index) >> 40) * (1.0f / 16777216.0f);
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
