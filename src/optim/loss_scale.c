// loss_scale.c: the dynamic loss scale of train.precision fp16 (optim.h), as PyTorch's
// GradScaler and apex's dynamic scaler do it: back off by 2 on a non-finite gradient, grow by 2
// after a run of finite steps. Host logic only; the training loop applies the scale.
#include <math.h>

#include "galley/optim.h"

void loss_scale_init(gl_loss_scale *s, bool on) {
    s->on = on;
    s->scale = on ? GL_LOSS_SCALE_INIT : 1.0;
    s->good = 0;
    s->skipped = 0;
}

int loss_scale_update(gl_loss_scale *s, bool finite) {
    if (!s->on) return LOSS_SCALE_KEPT;
    if (!finite) {
        s->scale = s->scale / 2 < GL_LOSS_SCALE_MIN ? GL_LOSS_SCALE_MIN : s->scale / 2;
        s->good = 0;
        s->skipped++;
        return LOSS_SCALE_BACKED_OFF;
    }
    if (++s->good < GL_LOSS_SCALE_GROWTH) return LOSS_SCALE_KEPT;
    s->good = 0;
    if (s->scale >= GL_LOSS_SCALE_MAX) return LOSS_SCALE_KEPT;  // at the cap: stays, the count restarts
    s->scale *= 2;
    return LOSS_SCALE_GREW;
}

// A scale update can reach: a power of two within [MIN, MAX].
static bool reachable(double scale) {
    if (!(scale >= GL_LOSS_SCALE_MIN && scale <= GL_LOSS_SCALE_MAX)) return false;
    int e;
    return frexp(scale, &e) == 0.5;
}

int loss_scale_restore(gl_loss_scale *s, double scale, int64_t good, int64_t skipped) {
    bool on = s->on;
    if (!on || !reachable(scale) || good < 0 || good >= GL_LOSS_SCALE_GROWTH || skipped < 0) {
        loss_scale_init(s, on);
        return on ? -1 : 0;  // off: nothing to restore, whatever was saved
    }
    s->scale = scale, s->good = good, s->skipped = skipped;
    return 0;
}
