// synth_internal.h: what a synthetic kind is (one file each, synth_<kind>.c, listed in
// synth_registry.c), and helpers the generators share.
#ifndef GALLEY_SYNTH_INTERNAL_H
#define GALLEY_SYNTH_INTERNAL_H

#include "galley/data.h"
#include "galley/synth.h"

// How `galley data synth` stores x (the reader's data.layout and data.transform follow it).
typedef enum {
    SYNTH_STORE_FLOAT,          // float32, channels first
    SYNTH_STORE_CHANNELS_LAST,  // float32 [.., S, S, C] (DeepCAM's layout; data.layout: channels_last)
    SYNTH_STORE_LOG_COUNTS,     // int16 counts round(expm1(v)) (CosmoFlow's; data.transform: log1p)
} synth_store;

typedef struct synth_kind {
    // d's shape, target, tshape and classes for the recipe (sizes and n are set by the caller).
    void (*describe)(const recipe_t *r, gl_dataset *d);
    // Fills d->x and d->labels or d->values: data_describe() has set d's shapes and n, and they
    // point at zeroed memory of those sizes. Each value must be a pure function of (seed, split,
    // sample, element): the same data for any thread count, and a sample does not depend on how
    // many samples were asked for.
    void (*generate)(const recipe_t *r, int split, gl_dataset *d);
    unsigned keys;          // SYNTH_KEY_* read from data.synthetic
    int64_t max_classes;    // 0: no limit of its own
    // `galley data synth`: dataset names, x's storage, the galley_description attribute (NULL:
    // "galley synthetic data set").
    const char *h5_x, *h5_y;
    synth_store h5_store;
    const char *h5_about;
} synth_kind;

// The kind with this id, NULL for none.
const synth_kind *synth_kind_at(int id);

// data.synthetic.channels, or the kind's own when 0.
int64_t synth_channels_or(const recipe_t *r, int64_t own);
// Approximately standard normal from one 64-bit draw (Irwin-Hall of four 16-bit uniforms).
float synth_gauss4(uint64_t u);
// f is (outer, len, inner): convolves every line along the middle axis, periodically, with
// h[0..2 rad] centred at h[rad].
void synth_blur_axis(float *f, int64_t outer, int64_t len, int64_t inner, const float *h, int rad);

#endif
