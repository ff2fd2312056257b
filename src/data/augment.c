// augment.c: the geometry of augmentation (signed axis permutations, shifts) and its seeded draws.
//
// Draws for (seed, epoch, sample) come from the key k = rng_u64(seed, RNG_AUGMENT, epoch, sample):
// rng_below(k, RNG_AUGMENT, 0, j, ...) with j = 0..2 crop offsets, 3 the symmetry, 4..6 flips,
// 7..9 shifts; noise is rng_normal(k, RNG_AUGMENT, 1, element).
#include "data/augment.h"

#include <string.h>

#include "galley/rng.h"

gl_axes augment_identity(int nd) {
    gl_axes t = {nd, {0, 1, 2}, {0, 0, 0}};
    return t;
}

bool augment_is_identity(const gl_axes *t) {
    for (int a = 0; a < t->nd; a++)
        if (t->perm[a] != a || t->flip[a]) return false;
    return true;
}

int augment_symmetries(int nd, gl_axes *out) {
    static const int perms3[6][3] = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};
    static const int parity3[6] = {1, -1, -1, 1, 1, -1};
    static const int perms2[2][3] = {{0, 1, 2}, {1, 0, 2}};
    int n = 0;
    if (nd == 2) {
        for (int p = 0; p < 2; p++)
            for (int f = 0; f < 4; f++) {
                gl_axes t = {2, {perms2[p][0], perms2[p][1], 2}, {f & 1, (f >> 1) & 1, 0}};
                out[n++] = t;
            }
    } else if (nd == 3) {
        for (int p = 0; p < 6; p++)
            for (int f = 0; f < 8; f++) {
                int det = parity3[p] * ((f & 1) ? -1 : 1) * ((f & 2) ? -1 : 1) * ((f & 4) ? -1 : 1);
                if (det != 1) continue;
                gl_axes t = {3, {perms3[p][0], perms3[p][1], perms3[p][2]}, {f & 1, (f >> 1) & 1, (f >> 2) & 1}};
                out[n++] = t;
            }
    } else {
        out[n++] = augment_identity(nd);
    }
    return n;
}

// Strides so that the output walk is a plain loop: in offset = base + sum o_a * step[a].
static void walk(const gl_axes *t, const int64_t *ext, int64_t *oext, int64_t *step, int64_t *base) {
    int64_t istride[3] = {1, 1, 1};
    for (int k = t->nd - 2; k >= 0; k--) istride[k] = istride[k + 1] * ext[k + 1];
    *base = 0;
    for (int a = 0; a < 3; a++) oext[a] = 1, step[a] = 0;
    for (int a = 0; a < t->nd; a++) {
        int k = t->perm[a];
        oext[a] = ext[k];
        step[a] = t->flip[a] ? -istride[k] : istride[k];
        if (t->flip[a]) *base += (ext[k] - 1) * istride[k];
    }
}

#define AXES_BODY                                                                          \
    int64_t oext[3], step[3], base, vol = 1;                                              \
    walk(t, ext, oext, step, &base);                                                      \
    for (int k = 0; k < t->nd; k++) vol *= ext[k];                                        \
    for (int64_t c = 0; c < ch; c++) {                                                    \
        const __typeof__(*in) *ic = in + c * vol + base;                                  \
        __typeof__(*out) *oc = out + c * vol;                                             \
        for (int64_t o0 = 0; o0 < oext[0]; o0++)                                          \
            for (int64_t o1 = 0; o1 < oext[1]; o1++) {                                    \
                const __typeof__(*in) *row = ic + o0 * step[0] + o1 * step[1];            \
                for (int64_t o2 = 0; o2 < oext[2]; o2++) *oc++ = row[o2 * step[2]];       \
            }                                                                             \
    }

void augment_axes_f32(const gl_axes *t, int64_t ch, const int64_t *ext, const float *in, float *out) { AXES_BODY }
void augment_axes_i32(const gl_axes *t, int64_t ch, const int64_t *ext, const int32_t *in, int32_t *out) { AXES_BODY }

#define SHIFT_BODY                                                                           \
    int64_t e[3] = {1, 1, 1}, s[3] = {0, 0, 0}, vol = 1;                                    \
    for (int k = 0; k < nd; k++) e[k] = ext[k], s[k] = shift[k], vol *= ext[k];             \
    for (int64_t c = 0; c < ch; c++) {                                                      \
        const __typeof__(*in) *ic = in + c * vol;                                           \
        __typeof__(*out) *oc = out + c * vol;                                               \
        for (int64_t o0 = 0; o0 < e[0]; o0++)                                               \
            for (int64_t o1 = 0; o1 < e[1]; o1++)                                           \
                for (int64_t o2 = 0; o2 < e[2]; o2++) {                                     \
                    int64_t i0 = o0 + s[0], i1 = o1 + s[1], i2 = o2 + s[2];                 \
                    int in_range = i0 >= 0 && i0 < e[0] && i1 >= 0 && i1 < e[1] && i2 >= 0 && i2 < e[2]; \
                    *oc++ = in_range ? ic[(i0 * e[1] + i1) * e[2] + i2] : 0;                \
                }                                                                           \
    }

void augment_shift_f32(int nd, int64_t ch, const int64_t *ext, const int64_t *shift, const float *in, float *out) {
    SHIFT_BODY
}
void augment_shift_i32(int nd, int64_t ch, const int64_t *ext, const int64_t *shift, const int32_t *in,
                       int32_t *out) {
    SHIFT_BODY
}

void augment_draw(const augment_params *p, uint64_t seed, int64_t epoch, int64_t sample, int nd, const int64_t *full,
                  bool train, augment_plan *plan) {
    memset(plan, 0, sizeof *plan);
    plan->axes = augment_identity(nd);
    uint64_t k = rng_u64(seed, RNG_AUGMENT, (uint64_t)(train ? epoch : 0), (uint64_t)sample);
    plan->key = k;
    if (p->crop > 0)
        for (int d = 0; d < nd; d++)
            plan->crop[d] = (int64_t)rng_below(k, RNG_AUGMENT, 0, (uint64_t)d, (uint64_t)(full[d] - p->crop + 1));
    if (!train) return;
    if (p->rotate && (nd == 2 || nd == 3)) {
        gl_axes all[24];
        int n = augment_symmetries(nd, all);
        plan->axes = all[rng_below(k, RNG_AUGMENT, 0, 3, (uint64_t)n)];
    }
    if (p->flip)
        for (int a = 0; a < nd; a++) plan->axes.flip[a] ^= (int)rng_below(k, RNG_AUGMENT, 0, 4 + (uint64_t)a, 2);
    if (p->pad > 0)
        for (int d = 0; d < nd; d++)
            plan->shift[d] = (int64_t)rng_below(k, RNG_AUGMENT, 0, 7 + (uint64_t)d, (uint64_t)(2 * p->pad + 1)) - p->pad;
}

void augment_noise(const augment_plan *plan, float std, float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] += std * rng_normal(plan->key, RNG_AUGMENT, 1, (uint64_t)i);
}
