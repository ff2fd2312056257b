// ckpt_read.c: reads a checkpoint back into a model built from the recipe, checking that it is a
// complete galley checkpoint (format, version, every checksum) and that it fits the model (every
// parameter present with the same shape, nothing left over, the same optimizer).
#include <hdf5.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ckpt/ckpt_h5.h"
#include "galley/ckpt.h"
#include "data/h5_internal.h"
#include "galley/h5data.h"


// Opens path and checks the format attributes. The file id, or -1 with the reason in err.
hid_t ck_open(const char *path, char *err, size_t errlen) {
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        snprintf(err, errlen, "%s is a directory, not a checkpoint file (checkpoint.dir holds them; --resume auto "
                              "picks one)", path);
        return -1;
    }
    FILE *probe = fopen(path, "rb");
    if (!probe) {
        snprintf(err, errlen, "cannot open %s: no such file or not readable", path);
        return -1;
    }
    fclose(probe);
    if (ck_check_seal(path, err, errlen) != 0) return -1;
    hid_t f = h5_open_read(path);
    if (f < 0) {
        snprintf(err, errlen, "%s is not a readable HDF5 file (truncated or corrupt)", path);
        return -1;
    }
    char fmt[64] = "";
    int64_t ver = 0;
    if (ck_get_str(f, "format", fmt, sizeof fmt) || strcmp(fmt, GL_CKPT_FORMAT) != 0) {
        snprintf(err, errlen, "%s is an HDF5 file but not a galley checkpoint (no format=\"%s\" attribute)", path,
                 GL_CKPT_FORMAT);
        H5Fclose(f);
        return -1;
    }
    if (ck_get_i64(f, "format_version", &ver) || ver < 1 || ver > GL_CKPT_VERSION) {
        snprintf(err, errlen, "%s has checkpoint format version %lld; this galley reads versions 1 to %d", path,
                 (long long)ver, GL_CKPT_VERSION);
        H5Fclose(f);
        return -1;
    }
    return f;
}

// Counts the datasets under group `grp` (recursively), to find tensors the model does not have.
static herr_t count_cb(hid_t obj, const char *name, const H5O_info_t *info, void *op) {
    (void)obj, (void)name;
    if (info->type == H5O_TYPE_DATASET) ++*(int64_t *)op;
    return 0;
}

static int64_t datasets_under(hid_t f, const char *grp) {
    int64_t n = 0;
    if (H5Lexists(f, grp, H5P_DEFAULT) <= 0) return 0;
    hid_t g = H5Gopen2(f, grp, H5P_DEFAULT);
    if (g < 0) return 0;
    H5Ovisit2(g, H5_INDEX_NAME, H5_ITER_NATIVE, count_cb, &n, H5O_INFO_BASIC);
    H5Gclose(g);
    return n;
}

// One tensor: -1 with err set on failure (rc: -1 damaged, -2 does not fit).
static int read_one(hid_t f, const char *path, const char *file, const gl_shape *shape, float *dst, char *err,
                    size_t errlen) {
    char found[96], want[96];
    int rc = ck_read_floats(f, path, shape, dst, found, sizeof found);
    if (rc == 0) return 0;
    shape_format(shape, want, sizeof want);
    if (rc == -1) snprintf(err, errlen, "%s has no readable /%s: the model's %s tensor is missing", file, path, want);
    if (rc == -2) snprintf(err, errlen, "%s: /%s fails its checksum: the file is corrupt", file, path);
    if (rc == -3) snprintf(err, errlen, "%s: /%s has shape %s, but this recipe's model has %s", file, path, found, want);
    return rc == -2 ? -1 : -2;
}

int ckpt_read(const char *path, const recipe_t *r, gl_graph *g, gl_optim *o, gl_ckpt_state *st, char *err,
              size_t errlen) {
    h5_setup(r->data.file_locking);
    hid_t f = ck_open(path, err, errlen);
    if (f < 0) return -1;
    memset(st, 0, sizeof *st);
    int64_t v[12];
    double best = NAN, best_loss = NAN, secs = 0;
    char opt[16] = "";
    if (ck_get_i64(f, "step", &v[0]) || ck_get_i64(f, "epoch", &v[1]) || ck_get_i64(f, "samples", &v[2]) ||
        ck_get_i64(f, "skipped", &v[3]) || ck_get_i64(f, "world_size", &v[4]) || ck_get_i64(f, "parts", &v[5]) ||
        ck_get_i64(f, "threads", &v[6]) || ck_get_i64(f, "best_step", &v[7]) ||
        ck_get_i64(f, "best_loss_step", &v[8]) || ck_get_i64(f, "epochs_run", &v[9]) ||
        ck_get_i64(f, "optimizer_steps", &v[10]) || ck_get_i64(f, "parameters", &v[11]) ||
        ck_get_f64(f, "best", &best) || ck_get_f64(f, "best_loss", &best_loss) ||
        ck_get_f64(f, "train_seconds", &secs) || ck_get_str(f, "optimizer", opt, sizeof opt)) {
        snprintf(err, errlen, "%s lacks some of the checkpoint's attributes (step, epoch, optimizer, ...): corrupt",
                 path);
        H5Fclose(f);
        return -1;
    }
    int rc = 0;
    if (strcmp(opt, ck_optim_name(o->type)) != 0) {
        snprintf(err, errlen, "%s holds %s optimizer state, but the recipe's optimizer.type is %s; resume with "
                              "the optimizer it was written with, or start a new run", path, opt, ck_optim_name(o->type));
        rc = -2;
    }
    const char *bn[3];
    float *bb[3];
    int nb = ck_optim_buffers(o, bn, bb);
    char p[512];
    int64_t tensors = 0;
    for (int i = 0; rc == 0 && i < g->nlayers; i++) {
        layer_t *l = &g->layers[i];
        for (int q = 0; rc == 0 && q < l->nparams; q++) {
            const gl_param *pa = &l->params[q];
            snprintf(p, sizeof p, "params/%s/%s", l->cfg->name, pa->name);
            rc = read_one(f, p, path, &pa->shape, g->params + pa->offset, err, errlen);
            tensors++;
            for (int b = 0; rc == 0 && b < nb; b++) {
                snprintf(p, sizeof p, "optim/%s/%s/%s", bn[b], l->cfg->name, pa->name);
                rc = read_one(f, p, path, &pa->shape, bb[b] + pa->offset, err, errlen);
            }
        }
        if (rc == 0 && l->state_floats > 0) {
            snprintf(p, sizeof p, "state/%s/running", l->cfg->name);
            gl_shape s = shape_1d(l->state_floats);
            rc = read_one(f, p, path, &s, l->state, err, errlen);
        }
    }
    if (rc == 0 && (datasets_under(f, "params") != tensors || v[11] != g->nparams)) {
        snprintf(err, errlen, "%s holds %lld parameter tensors (%lld parameters) but this recipe's model has %lld "
                              "(%lld parameters): it was written for another model",
                 path, (long long)datasets_under(f, "params"), (long long)v[11], (long long)tensors,
                 (long long)g->nparams);
        rc = -2;
    }
    // Optional (fp16 runs only; older checkpoints have none): the caller starts a fresh scale.
    double scale = 0;
    int64_t good = 0, skipped = 0;
    bool scaler = rc == 0 && H5Aexists(f, "loss_scale") > 0 && ck_get_f64(f, "loss_scale", &scale) == 0 &&
                  ck_get_i64(f, "loss_scale_good", &good) == 0 && ck_get_i64(f, "loss_scale_skipped", &skipped) == 0;
    // Optional (older checkpoints have none): those runs were never evaluated again on resume.
    int64_t evaluated = 1;
    if (rc == 0 && H5Aexists(f, "evaluated") > 0 && ck_get_i64(f, "evaluated", &evaluated)) {
        snprintf(err, errlen, "%s: the attribute 'evaluated' is unreadable: corrupt", path);
        rc = -1;
    }
    H5Fclose(f);
    if (rc) return rc;
    st->evaluated = evaluated != 0;
    st->scaler_saved = scaler;
    st->scaler.on = scaler, st->scaler.scale = scaler ? scale : 1.0, st->scaler.good = good;
    st->scaler.skipped = skipped;
    st->step = v[0], st->epoch = v[1], st->samples = v[2], st->skipped = v[3];
    st->world = (int)v[4], st->parts = (int)v[5], st->threads = (int)v[6];
    st->best_step = v[7], st->best_loss_step = v[8], st->epochs_run = (int)v[9];
    st->best = best, st->best_loss = best_loss, st->train_seconds = secs;
    o->steps = v[10];
    return 0;
}
