// cpu_transpose16.h: a 16 x 16 block of floats transposed in AVX-512 registers, for the CPU
// kernels that store or pack a block the other way round (cpu_gemm_fast.c's transposed forward
// stores, cpu_attention_body.h's K^T packs). Include it after immintrin.h, on x86 with GCC.
#ifndef GALLEY_CPU_TRANSPOSE16_H
#define GALLEY_CPU_TRANSPOSE16_H

// r[i] (row i of the block, 16 floats) becomes column i: pairs of rows interleaved, then groups of
// four per 128-bit lane, then the lanes gathered across groups of four and of eight.
__attribute__((target("avx512f"))) static inline void cpu_transpose16(__m512 r[16]) {
    __m512 t[16];
    for (int i = 0; i < 16; i += 2) {  // per 128-bit lane: a0 b0 a1 b1, a2 b2 a3 b3
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {  // rows i .. i+3, element e of each lane's 4
        r[i] = _mm512_shuffle_ps(t[i], t[i + 2], 0x44);
        r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], 0xee);
        r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0xee);
    }
    for (int h = 0; h < 16; h += 8)
        for (int e = 0; e < 4; e++) {
            t[h + e] = _mm512_shuffle_f32x4(r[h + e], r[h + 4 + e], 0x88);
            t[h + 4 + e] = _mm512_shuffle_f32x4(r[h + e], r[h + 4 + e], 0xdd);
        }
    for (int q = 0; q < 8; q++) {  // t[q] with t[q + 8]: elements q and q + 8 of every row
        r[q] = _mm512_shuffle_f32x4(t[q], t[q + 8], 0x88);
        r[q + 8] = _mm512_shuffle_f32x4(t[q], t[q + 8], 0xdd);
    }
}

#endif
