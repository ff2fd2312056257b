// layer_registry.c: the list of layer kinds. Adding a layer is one file plus one line in
// LAYER_KINDS below.
#include <math.h>
#include <string.h>

#include "galley/check.h"
#include "galley/layer.h"
#include "galley/rng.h"

// The layer kinds, in the order `galley help` lists them: a new kind's file under
// src/model/layers/ defines `const layer_kind layer_<name>`, and its name goes on a line here.
#define LAYER_KINDS(X)                                                                 \
    X(dense) X(relu) X(leaky_relu) X(tanh) X(sigmoid) X(gelu)                          \
    X(max_pool) X(avg_pool) X(global_avg_pool) X(batch_norm) X(layer_norm)             \
    X(dropout) X(scale) X(flatten) X(add) X(concat) X(upsample)                        \
    X(conv) X(conv_transpose)                                                         \
    X(patch_embed) X(pos_embed) X(attention) X(drop_path) X(token_pool) X(unpatch)

#define LAYER_EXTERN_(name) extern const layer_kind layer_##name;
LAYER_KINDS(LAYER_EXTERN_)
#define LAYER_ENTRY_(name) &layer_##name,
static const layer_kind *const kinds[] = {LAYER_KINDS(LAYER_ENTRY_)};

int layer_kind_count(void) { return (int)(sizeof kinds / sizeof kinds[0]); }
const layer_kind *layer_kind_at(int i) { return kinds[i]; }

const layer_kind *layer_kind_find(const char *name) {
    for (int i = 0; i < layer_kind_count(); i++)
        if (!strcmp(kinds[i]->name, name)) return kinds[i];
    return NULL;
}

const gl_value *layer_key(const layer_t *l, const char *key) {
    for (int j = 0; l->kind->keys && l->kind->keys[j].name; j++)
        if (!strcmp(l->kind->keys[j].name, key)) return &l->cfg->v[j];
    GL_CHECK(0, "layer_key: no such key in this layer kind");
    return NULL;
}

enum { INIT_HE_NORMAL, INIT_HE_UNIFORM, INIT_XAVIER_NORMAL, INIT_XAVIER_UNIFORM, INIT_ZEROS, INIT_PYTORCH,
       INIT_TRUNC_NORMAL };
const char *const layer_init_choices[] = {"he_normal", "he_uniform", "xavier_normal", "xavier_uniform", "zeros",
                                          "pytorch", "trunc_normal", NULL};

// trunc_normal: timm's trunc_normal_(w, std=.02) as the tutorial ViT calls it (Linear weights,
// pos_embed): normal with std 0.02 truncated to timm's default bounds a = -2, b = 2, which are
// absolute, not in stds (100 stds: in practice a plain normal). A draw outside is drawn again
// under the next index block, so the result stays a pure function of the key.
#define TRUNC_NORMAL_STD 0.02
#define TRUNC_NORMAL_BOUND 2.0
static float trunc_normal_draw(uint64_t seed, uint64_t step, uint64_t i) {
    for (uint64_t attempt = 0;; attempt++) {
        double v = TRUNC_NORMAL_STD * rng_normal(seed, RNG_INIT, step, i + (attempt << 40));
        if (fabs(v) <= TRUNC_NORMAL_BOUND) return (float)v;
    }
}

// pytorch: what nn.Linear, nn.ConvNd and nn.ConvTransposeNd's reset_parameters do, computed as
// torch.nn.init.kaiming_uniform_(w, a=sqrt(5)) does: gain = sqrt(2 / (1 + a^2)), bound = gain *
// sqrt(3 / fan_in) (= 1/sqrt(fan_in)), fan_in from weight dim 1 times the kernel's taps (for a
// transposed conv that is filters/groups, as PyTorch has it); the bias in +-1/sqrt(fan_in) of the
// weight (layer_init_bias). Same distributions as PyTorch, not the same numbers: the draws are
// galley's counter-based ones.
static double pytorch_weight_bound(double fan_in) {
    double a = sqrt(5.0), gain = sqrt(2.0 / (1.0 + a * a));
    return gain * sqrt(3.0 / fan_in);
}

void layer_init_param(const gl_param *p, int init, float *dst, uint64_t seed, int layer_index, int param_index) {
    // Key: (seed, INIT, layer * 16 + param, element): independent of every other tensor.
    uint64_t step = (uint64_t)layer_index * 16u + (uint64_t)param_index;
    double fan_in = p->fan_in > 0 ? p->fan_in : 1, fan_avg = (p->fan_in + p->fan_out) / 2.0;
    if (fan_avg <= 0) fan_avg = 1;
    double pt = pytorch_weight_bound(fan_in);
    for (int64_t i = 0; i < p->size; i++) {
        switch (init) {
        case INIT_HE_NORMAL: dst[i] = (float)(sqrt(2.0 / fan_in) * rng_normal(seed, RNG_INIT, step, (uint64_t)i)); break;
        case INIT_HE_UNIFORM:
            dst[i] = (float)(sqrt(6.0 / fan_in) * (2.0 * rng_uniform(seed, RNG_INIT, step, (uint64_t)i) - 1.0));
            break;
        case INIT_XAVIER_NORMAL:
            dst[i] = (float)(sqrt(1.0 / fan_avg) * rng_normal(seed, RNG_INIT, step, (uint64_t)i));
            break;
        case INIT_XAVIER_UNIFORM:
            dst[i] = (float)(sqrt(3.0 / fan_avg) * (2.0 * rng_uniform(seed, RNG_INIT, step, (uint64_t)i) - 1.0));
            break;
        case INIT_PYTORCH:
            dst[i] = (float)(pt * (2.0 * rng_uniform(seed, RNG_INIT, step, (uint64_t)i) - 1.0));
            break;
        case INIT_TRUNC_NORMAL: dst[i] = trunc_normal_draw(seed, step, (uint64_t)i); break;
        default: dst[i] = 0.0f; break;
        }
    }
}

void layer_init_bias(const gl_param *p, int init, float *dst, uint64_t seed, int layer_index, int param_index) {
    if (init != INIT_PYTORCH) return;  // zeros: the arena is zeroed
    uint64_t step = (uint64_t)layer_index * 16u + (uint64_t)param_index;
    double bound = p->fan_in > 0 ? 1.0 / sqrt((double)p->fan_in) : 0.0;
    for (int64_t i = 0; i < p->size; i++)
        dst[i] = (float)(bound * (2.0 * rng_uniform(seed, RNG_INIT, step, (uint64_t)i) - 1.0));
}
