// cpu_loss.c: losses on the model output.
#include <math.h>
#include <stdlib.h>

#include "backend/cpu/cpu_kernels.h"
#include "galley/backend_types.h"  // LOSS_MSE, GL_L2_RELATIVE_EPS
#include "galley/check.h"          // gl_xmalloc

// logits is (N,C,S), labels is (N,S) in [0,C), weights is (C) or NULL, dlogits is (N,C,S) or NULL.
// Each (sample, position) pair is independent, so the loop parallelises; the sums are reduced
// per sample first and then in sample order, so the result does not depend on the thread count.
double cpu_softmax_xent(int64_t n, int64_t c, int64_t s, const float *logits, const int32_t *labels,
                        const float *weights, float *dlogits) {
    double total = 0.0, wsum = 0.0;
    for (int64_t i = 0; i < n; i++) {
        for (int64_t p = 0; p < s; p++) {
            const float *z = logits + i * c * s + p;  // stride s between channels
            int32_t y = labels[i * s + p];
            double w = weights ? weights[y] : 1.0;
            float mx = z[0];
            for (int64_t j = 1; j < c; j++) mx = z[j * s] > mx ? z[j * s] : mx;
            double sum = 0.0;
            for (int64_t j = 0; j < c; j++) sum += exp((double)z[j * s] - mx);  // shifted: no overflow
            double logsum = log(sum) + mx;
            total += w * (logsum - z[y * s]);
            wsum += w;
        }
    }
    if (dlogits) {
        // d/dz of sum w*nll / sum w: w[y] * (softmax - onehot) / sum w.
        double inv = wsum > 0 ? 1.0 / wsum : 0.0;
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < n; i++) {
            for (int64_t p = 0; p < s; p++) {
                const float *z = logits + i * c * s + p;
                float *d = dlogits + i * c * s + p;
                int32_t y = labels[i * s + p];
                double w = weights ? weights[y] : 1.0;
                float mx = z[0];
                for (int64_t j = 1; j < c; j++) mx = z[j * s] > mx ? z[j * s] : mx;
                double sum = 0.0;
                for (int64_t j = 0; j < c; j++) sum += exp((double)z[j * s] - mx);
                for (int64_t j = 0; j < c; j++) d[j * s] = (float)(w * inv * exp((double)z[j * s] - mx) / sum);
                d[y * s] -= (float)(w * inv);
            }
        }
    }
    return wsum > 0 ? total / wsum : 0.0;
}

// pred, target and dpred are (count); returns the mean error.
double cpu_regression_loss(int kind, int64_t count, const float *pred, const float *target, float *dpred) {
    double total = 0.0;
    const double inv = count ? 1.0 / (double)count : 0.0;
    for (int64_t i = 0; i < count; i++) {
        double e = (double)pred[i] - (double)target[i];
        total += kind == LOSS_MSE ? e * e : fabs(e);
    }
    if (dpred) {
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < count; i++) {
            double e = (double)pred[i] - (double)target[i];
            // L1's gradient at e == 0 is 0, as torch.sign gives.
            dpred[i] = (float)(kind == LOSS_MSE ? 2.0 * e * inv : (e > 0 ? inv : e < 0 ? -inv : 0.0));
        }
    }
    return total * inv;
}

// pred, target and dpred are [units, len]; returns the mean over units of ||pred_u - target_u|| /
// max(||target_u||, GL_L2_RELATIVE_EPS). Units run in parallel, each unit's sums serially in
// double; the ratios are added in unit order, so the result does not depend on the thread count.
double cpu_l2_relative_loss(int64_t units, int64_t len, const float *pred, const float *target, float *dpred) {
    if (units <= 0) return 0.0;
    double *ratio = gl_xmalloc(sizeof(double) * (size_t)units);
    const double inv = 1.0 / (double)units;
#pragma omp parallel for schedule(static)
    for (int64_t u = 0; u < units; u++) {
        const float *p = pred + u * len, *t = target + u * len;
        double ee = 0.0, tt = 0.0;
        for (int64_t j = 0; j < len; j++) {
            double e = (double)p[j] - (double)t[j];
            ee += e * e;
            tt += (double)t[j] * (double)t[j];
        }
        const double en = sqrt(ee), tn = fmax(sqrt(tt), GL_L2_RELATIVE_EPS);
        ratio[u] = en / tn;
        if (!dpred) continue;
        // d/dp ||e|| / tn = e / (||e|| tn); 0 at e == 0, as torch.linalg.vector_norm's backward gives.
        const double g = en > 0 ? inv / (en * tn) : 0.0;
        for (int64_t j = 0; j < len; j++) dpred[u * len + j] = (float)(g * ((double)p[j] - (double)t[j]));
    }
    double total = 0.0;
    for (int64_t u = 0; u < units; u++) total += ratio[u];
    free(ratio);
    return total * inv;
}
