// ckpt_write.c: writes a checkpoint atomically (see ckpt.h): everything goes to a temporary file
// beside the target, which is flushed to disk and then renamed over it, so a crash, a full disk
// or a kill at any moment leaves either the old set of files or the old set plus a complete new one.
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "ckpt/ckpt_h5.h"
#include "galley/check.h"
#include "galley/ckpt.h"
#include "data/h5_internal.h"
#include "galley/h5data.h"

#ifndef GALLEY_VERSION
#define GALLEY_VERSION "0.1.0-dev"
#endif


// The root's attributes: what the file is, the run's position and records (ckpt.h's layout).
static int write_attrs(hid_t f, const recipe_t *r, const gl_graph *g, const gl_optim *o, const gl_ckpt_state *st) {
    hid_t root = H5Gopen2(f, "/", H5P_DEFAULT);
    char hash[32], when[64];
    snprintf(hash, sizeof hash, "%016llx", (unsigned long long)recipe_hash(r));
    time_t now = time(NULL);
    struct tm tmv;
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&now, &tmv));
    int rc = 0;
    rc |= ck_attr_str(root, "format", GL_CKPT_FORMAT);
    rc |= ck_attr_i64(root, "format_version", GL_CKPT_VERSION);
    rc |= ck_attr_str(root, "galley_version", GALLEY_VERSION);
    rc |= ck_attr_str(root, "created", when);
    rc |= ck_attr_str(root, "recipe_hash", hash);
    rc |= ck_attr_str(root, "name", r->name);
    rc |= ck_attr_i64(root, "seed", r->seed);
    rc |= ck_attr_i64(root, "step", st->step);
    rc |= ck_attr_i64(root, "epoch", st->epoch);
    rc |= ck_attr_i64(root, "next_batch", st->step);  // one training batch per step
    rc |= ck_attr_i64(root, "samples", st->samples);
    rc |= ck_attr_i64(root, "skipped", st->skipped);
    rc |= ck_attr_i64(root, "world_size", st->world);
    rc |= ck_attr_i64(root, "parts", st->parts);
    rc |= ck_attr_i64(root, "threads", st->threads);
    rc |= ck_attr_f64(root, "train_seconds", st->train_seconds);
    rc |= ck_attr_f64(root, "best", st->best);
    rc |= ck_attr_i64(root, "best_step", st->best_step);
    rc |= ck_attr_f64(root, "best_loss", st->best_loss);
    rc |= ck_attr_i64(root, "best_loss_step", st->best_loss_step);
    rc |= ck_attr_i64(root, "epochs_run", st->epochs_run);
    rc |= ck_attr_i64(root, "evaluated", st->evaluated);
    rc |= ck_attr_str(root, "optimizer", ck_optim_name(o->type));
    rc |= ck_attr_i64(root, "optimizer_steps", o->steps);
    rc |= ck_attr_i64(root, "parameters", g->nparams);
    if (st->scaler.on) {  // fp16 only: a run in another precision starts its own scale
        rc |= ck_attr_f64(root, "loss_scale", st->scaler.scale);
        rc |= ck_attr_i64(root, "loss_scale_good", st->scaler.good);
        rc |= ck_attr_i64(root, "loss_scale_skipped", st->scaler.skipped);
    }
    H5Gclose(root);
    return rc ? -1 : 0;
}

// /recipe: the resolved recipe, as text.
static int write_recipe(hid_t f, const recipe_t *r) {
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    GL_CHECK(m, "open_memstream failed");
    recipe_emit(r, m);
    fclose(m);
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, len + 1);
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t ds = H5Dcreate2(f, "recipe", t, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    int rc = ds >= 0 && H5Dwrite(ds, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, text) >= 0 ? 0 : -1;
    if (ds >= 0) H5Dclose(ds);
    H5Sclose(sp);
    H5Tclose(t);
    free(text);
    return rc;
}

// Every parameter, its optimizer buffers and the layers' state.
static int write_tensors(hid_t f, const gl_graph *g, const gl_optim *o) {
    char path[512];
    const char *bn[3];
    float *bb[3];
    int nb = ck_optim_buffers(o, bn, bb);
    for (int i = 0; i < g->nlayers; i++) {
        const layer_t *l = &g->layers[i];
        for (int p = 0; p < l->nparams; p++) {
            const gl_param *pa = &l->params[p];
            snprintf(path, sizeof path, "params/%s/%s", l->cfg->name, pa->name);
            if (ck_write_floats(f, path, &pa->shape, g->params + pa->offset)) return -1;
            for (int b = 0; b < nb; b++) {
                snprintf(path, sizeof path, "optim/%s/%s/%s", bn[b], l->cfg->name, pa->name);
                if (ck_write_floats(f, path, &pa->shape, bb[b] + pa->offset)) return -1;
            }
        }
        if (l->state_floats > 0) {
            snprintf(path, sizeof path, "state/%s/running", l->cfg->name);
            gl_shape s = shape_1d(l->state_floats);
            if (ck_write_floats(f, path, &s, l->state)) return -1;
        }
    }
    return 0;
}

static int write_all(hid_t f, const recipe_t *r, const gl_graph *g, const gl_optim *o, const gl_ckpt_state *st) {
    if (write_attrs(f, r, g, o, st) || write_recipe(f, r)) return -1;
    return write_tensors(f, g, o);
}

static int fsync_path(const char *path, int dir) {
    int fd = open(path, (dir ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    // Some file systems refuse fsync on directories (EINVAL): the rename is then as durable as they get.
    if (rc && dir && (errno == EINVAL || errno == EBADF)) rc = 0;
    close(fd);
    return rc;
}

// Why a write in dir failed, in words (HDF5 does not pass errno on).
static void why_failed(const char *dir, char *buf, size_t len) {
    struct statvfs sv;
    if (access(dir, W_OK) != 0) snprintf(buf, len, "the directory is not writable (%s)", strerror(errno));
    else if (statvfs(dir, &sv) == 0 && sv.f_flag & ST_RDONLY) snprintf(buf, len, "the file system is read-only");
    else if (statvfs(dir, &sv) == 0 && (double)sv.f_bavail * (double)sv.f_frsize < 64.0 * 1048576)
        snprintf(buf, len, "the disk is full (%.1f MiB free)", (double)sv.f_bavail * sv.f_frsize / 1048576.0);
    else snprintf(buf, len, "no space left (a quota, or the disk is full)");
}

// Writes all of buf to fd, or -1 with errno set.
static int write_full(int fd, const char *buf, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, buf, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            if (w == 0) errno = ENOSPC;
            return -1;
        }
        buf += w, n -= (size_t)w;
    }
    return 0;
}

int ckpt_write(const char *path, const recipe_t *r, const gl_graph *g, const gl_optim *o, const gl_ckpt_state *st,
               char *err, size_t errlen) {
    h5_setup(r->data.file_locking);
    char dcopy[4096], tmp[4200], why[160];
    snprintf(dcopy, sizeof dcopy, "%s", path);
    const char *dir = dirname(dcopy);
    ckpt_tmp_path(tmp, sizeof tmp, path, (long)getpid());

    // The file is built in memory (HDF5's core driver) and written with plain write(2) and
    // fsync(2): every I/O error (a full disk, a quota) then surfaces here with its errno, and
    // HDF5 never holds a half-flushed file it cannot close. It costs the file's size in memory
    // twice, briefly.
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    H5Pset_fapl_core(fapl, 1 << 20, 0);
    hid_t f = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    H5Pclose(fapl);
    if (f < 0) {
        snprintf(err, errlen, "cannot build the checkpoint in memory (HDF5)");
        return -1;
    }
    int rc = write_all(f, r, g, o, st);
    if (rc == 0 && H5Fflush(f, H5F_SCOPE_GLOBAL) < 0) rc = -1;
    // The image goes after the seal's bytes (ckpt_seal.c): HDF5 finds its superblock at byte 512
    // as at 0, and takes the bytes before it for a user block.
    ssize_t h5size = rc == 0 ? H5Fget_file_image(f, NULL, 0) : -1;
    ssize_t size = h5size > 0 ? h5size + CK_SEAL_BYTES : -1;
    char *image = size > 0 ? malloc((size_t)size) : NULL;
    if (!image || H5Fget_file_image(f, image + CK_SEAL_BYTES, (size_t)h5size) != h5size) rc = -1;
    H5Fclose(f);
    if (rc == 0) ck_seal(image, (size_t)size);
    if (rc != 0) {
        free(image);
        snprintf(err, errlen, "cannot build the checkpoint in memory (HDF5 failed; out of memory?)");
        return -1;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        int e = errno;  // the reason once: why_failed's words only where they say more than errno
        if (e == ENOSPC || e == EDQUOT) why_failed(dir, why, sizeof why);
        else snprintf(why, sizeof why, "%s", strerror(e));
        snprintf(err, errlen, "cannot create %s: %s", tmp, why);
        free(image);
        return -1;
    }
    int werr = write_full(fd, image, (size_t)size) != 0 || fsync(fd) != 0 ? errno : 0;
    if (close(fd) != 0 && !werr) werr = errno;
    free(image);
    if (werr) {
        unlink(tmp);
        if (werr == ENOSPC || werr == EDQUOT) why_failed(dir, why, sizeof why);
        else snprintf(why, sizeof why, "%s", strerror(werr));
        snprintf(err, errlen, "writing %s (%.1f MiB) failed: %s; the previous checkpoints are untouched", tmp,
                 (double)size / 1048576.0, why);
        return -1;
    }
    if (rename(tmp, path) != 0) {
        snprintf(err, errlen, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
        unlink(tmp);
        return -1;
    }
    if (fsync_path(dir, 1) != 0) {
        snprintf(err, errlen, "fsync of %s failed after writing %s: %s", dir, path, strerror(errno));
        return -1;
    }
    return 0;
}
