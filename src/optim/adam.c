// adam.c: the Adam family with decoupled weight decay. Both rules keep bias-corrected moments
// (t is the 1-based step):
//     m = b1 * m + (1 - b1) * g          m_hat = m / (1 - b1^t)
//     v = b2 * v + (1 - b2) * g^2        v_hat = v / (1 - b2^t)
// AdamW (torch.optim.AdamW, _single_tensor_adamw, amsgrad off):
//     w -= lr * wd * w;  w -= lr * m_hat / (sqrt(v_hat) + eps)
// LAMB (You et al. 2019, as NVIDIA apex FusedLAMB with adam_w_mode and the trust ratio on every
// tensor, as MLPerf DeepCAM uses it), per parameter tensor W:
//     u = m_hat / (sqrt(v_hat) + eps) + wd * w
//     ratio = ||W|| / ||U||  (1 when either norm is 0);  w -= lr * ratio * u
#include <math.h>
#include <omp.h>

#include "galley/backend.h"
#include "optim/optim_internal.h"
#include "optim/optim_simd.h"

// Bias corrections for step t, as PyTorch computes them (step_size = lr / bc1, sqrt(bc2)), and
// AdamW's decay factor: the one place these scalars are computed, for the CPU and a GPU alike.
void adam_args(const gl_optim *o, double lr, int64_t t, gl_optim_args *a) {
    double bc1 = 1.0 - pow(o->beta1, (double)t), bc2 = 1.0 - pow(o->beta2, (double)t);
    a->b1 = (float)o->beta1;
    a->b2 = (float)o->beta2;
    a->one_b1 = (float)(1.0 - o->beta1);
    a->one_b2 = (float)(1.0 - o->beta2);
    a->eps = (float)o->eps;
    a->inv_bc1 = (float)(1.0 / bc1);
    a->inv_sqrt_bc2 = (float)(1.0 / sqrt(bc2));
    a->decayed = (float)(1.0 - lr * o->weight_decay);
}

// m_hat / (sqrt(v_hat) + eps) from the updated moments.
static inline float adam_direction(const gl_optim_args *k, float m, float v) {
    return (m * k->inv_bc1) / (sqrtf(v) * k->inv_sqrt_bc2 + k->eps);
}

// Chunk ch of w, g, o->m and o->v (all (n)), by optim_simd's loop (adam_direction's arithmetic).
static void adamw_chunk(gl_optim *o, const gl_optim_args *a, const gl_optim_chunk *ch, float *w, float *g) {
    const int64_t lo = ch->offset;
    optim_simd_get()->adamw(a, ch->plain ? 1.0f : a->decayed, ch->len, w + lo, g + lo, o->m + lo, o->v + lo);
}

// Every chunk, each by its owner thread (a->lr: the learning rate as a float).
static void adamw_update(gl_optim *o, const gl_optim_args *a, double lr, float *w, float *g) {
    (void)lr;
    const gl_optim_chunk *ch = o->chunks;
#pragma omp parallel
    for (int c = 0, me = omp_get_thread_num(), nt = omp_get_num_threads(); c < o->nchunks; c++)
        if (optim_owner(&ch[c], nt) == me) adamw_chunk(o, a, &ch[c], w, g);
}

void lamb_ratios(gl_optim *o, const double *wsq, const double *usq) {
    const gl_optim_chunk *ch = o->chunks;
    // Chunks of a tensor are consecutive: sum them in order, then one ratio per tensor.
    for (int c = 0; c < o->nchunks;) {
        int tensor = ch[c].tensor;
        double sw = 0.0, su = 0.0;
        for (; c < o->nchunks && ch[c].tensor == tensor; c++) sw += wsq[c], su += usq[c];
        double wn = sqrt(sw), un = sqrt(su);
        o->ratio[tensor] = (wn > 0.0 && un > 0.0 && !ch[c - 1].plain) ? wn / un : 1.0;
    }
}

// w, g, o->m, o->v are (n). Three passes over the chunks: moments and the per-chunk sums of
// w^2 and u^2; the per-tensor ratios (serially, in chunk order); the update, recomputing u
// from the stored moments with the same arithmetic (nothing else to store).
static void lamb_update(gl_optim *o, const gl_optim_args *a, double lr, float *w, float *g) {
    const gl_optim_args k = *a;
    const float wd = k.weight_decay, coef = k.coef;
    const bool clip = k.clip;
    float *m = o->m, *v = o->v;
    double *wsq = o->partial + o->nchunks, *usq = o->partial + 2 * o->nchunks;
    const gl_optim_chunk *ch = o->chunks;
#pragma omp parallel
    for (int c = 0, me = omp_get_thread_num(), nt = omp_get_num_threads(); c < o->nchunks; c++) {
        if (optim_owner(&ch[c], nt) != me) continue;
        int64_t end = ch[c].offset + ch[c].len;
        const float wdc = ch[c].plain ? 0.0f : wd;
        double sw = 0.0, su = 0.0;
        for (int64_t i = ch[c].offset; i < end; i++) {
            float gi = g[i];
            if (clip) g[i] = gi = gi * coef;
            m[i] = k.b1 * m[i] + k.one_b1 * gi;
            v[i] = k.b2 * v[i] + k.one_b2 * gi * gi;
            float u = adam_direction(&k, m[i], v[i]) + wdc * w[i];
            sw += (double)w[i] * (double)w[i];
            su += (double)u * (double)u;
        }
        wsq[c] = sw;
        usq[c] = su;
    }
    lamb_ratios(o, wsq, usq);
    const double *ratio = o->ratio;
#pragma omp parallel
    for (int c = 0, me = omp_get_thread_num(), nt = omp_get_num_threads(); c < o->nchunks; c++) {
        if (optim_owner(&ch[c], nt) != me) continue;
        const float step = (float)(lr * ratio[ch[c].tensor]);
        const float wdc = ch[c].plain ? 0.0f : wd;
        int64_t end = ch[c].offset + ch[c].len;
        for (int64_t i = ch[c].offset; i < end; i++) {
            float u = adam_direction(&k, m[i], v[i]) + wdc * w[i];
            w[i] -= step * u;
        }
    }
}

// AdamW on the backend's device (s0 = m, s1 = v).
static void adamw_device(gl_optim *o, const gl_backend *be, const gl_optim_args *a, float *w, float *g) {
    be->optim_update(o->nchunks, o->chunks, a, w, g, o->m, o->v, NULL, NULL);
}

// LAMB on the device: phase 1 (moments, per-chunk sums of w^2 and u^2 into partial[nchunks,
// 3 nchunks), as the CPU lays them out), the ratios on the host exactly as the CPU computes them,
// phase 2.
static void lamb_device(gl_optim *o, const gl_backend *be, const gl_optim_args *a, float *w, float *g) {
    double *sums = o->partial + o->nchunks;
    be->optim_update(o->nchunks, o->chunks, a, w, g, o->m, o->v, sums, NULL);
    lamb_ratios(o, sums, sums + o->nchunks);
    be->optim_update(o->nchunks, o->chunks, a, w, g, o->m, o->v, NULL, o->ratio);
}

const gl_optim_rule optim_rule_adamw = {
    .state = {"m", "v"},
    .adam = true,
    .step = adamw_update,
    .chunk_step = adamw_chunk,
    .device_step = adamw_device,
};

const gl_optim_rule optim_rule_lamb = {
    .state = {"m", "v"},
    .adam = true,
    .step = lamb_update,
    .device_step = lamb_device,
};
