// rng.h: one counter-based generator. A number is a pure function of
// (seed, purpose, step, index), so results never depend on thread count or call order.
#ifndef GALLEY_RNG_H
#define GALLEY_RNG_H

#include <stdint.h>

#ifdef __cplusplus  // the CUDA backend's files are C++
extern "C" {
#endif

// What a random number is for; part of its key so streams never overlap.
typedef enum {
    RNG_INIT = 1,      // parameter init: step = layer index, index = element
    RNG_SHUFFLE = 2,   // data order: step = epoch
    RNG_DATA = 3,      // synthetic data generation: step = split
    RNG_DROPOUT = 4,
    RNG_AUGMENT = 5,
    RNG_TEST = 99,     // tests
} rng_purpose;

uint64_t rng_u64(uint64_t seed, uint32_t purpose, uint64_t step, uint64_t index);
// Uniform in [0, 1) with 24 random bits (exactly representable in float).
float rng_uniform(uint64_t seed, uint32_t purpose, uint64_t step, uint64_t index);
// Standard normal (Box-Muller on indices 2*index and 2*index+1).
float rng_normal(uint64_t seed, uint32_t purpose, uint64_t step, uint64_t index);
// Uniform integer in [0, n), n > 0, without modulo bias worth measuring (64-bit multiply).
uint64_t rng_below(uint64_t seed, uint32_t purpose, uint64_t step, uint64_t index, uint64_t n);

#ifdef __cplusplus
}
#endif

#endif
