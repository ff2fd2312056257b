// cpu_loss.c: losses on the model output.
#include <math.h>

#include "backend/cpu/cpu_kernels.h"

// logits is (N,C), labels is (N) in [0,C), dlogits is (N,C) or NULL.
// Returns the mean over N of -log softmax(logits)[label]; counts argmax hits in *correct.
double cpu_softmax_xent(int64_t n, int64_t c, const float *logits, const int32_t *labels, float *dlogits,
                        int64_t *correct) {
    double total = 0.0;
    int64_t hits = 0;
    for (int64_t i = 0; i < n; i++) {
        const float *z = logits + i * c;
        int64_t arg = 0;
        float mx = z[0];
        for (int64_t j = 1; j < c; j++)
            if (z[j] > mx) mx = z[j], arg = j;
        double sum = 0.0;
        for (int64_t j = 0; j < c; j++) sum += exp((double)z[j] - mx);  // shifted: no overflow
        double logsum = log(sum) + mx;
        total += logsum - z[labels[i]];
        hits += arg == labels[i];
        if (dlogits) {
            float *d = dlogits + i * c;
            for (int64_t j = 0; j < c; j++) d[j] = (float)(exp((double)z[j] - logsum) / (double)n);
            d[labels[i]] -= 1.0f / (float)n;
        }
    }
    if (correct) *correct = hits;
    return n ? total / (double)n : 0.0;
}
