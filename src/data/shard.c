// shard.c: which samples a rank reads, in which order (see loader.h, "Order" and "Sharding").
#include "galley/loader.h"
#include "galley/rng.h"

void loader_epoch_order(int64_t *perm, int64_t n, uint64_t seed, int64_t epoch) {
    for (int64_t i = 0; i < n; i++) perm[i] = i;
    for (int64_t i = n - 1; i > 0; i--) {  // Fisher-Yates, keyed by (epoch, position)
        int64_t j = (int64_t)rng_below(seed, RNG_SHUFFLE, (uint64_t)epoch, (uint64_t)i, (uint64_t)i + 1);
        int64_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}

int64_t loader_batches(int64_t n, int64_t batch, bool drop_last) {
    int64_t b = drop_last ? n / batch : (n + batch - 1) / batch;
    return b > 0 ? b : 1;  // a split smaller than a batch still gives one (partial) batch
}

void loader_shard(int64_t len, int rank, int world, int64_t *lo, int64_t *count) {
    int64_t a = len * rank / world, b = len * (rank + 1) / world;
    *lo = a;
    *count = b - a;
}
