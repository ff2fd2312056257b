// tfevents.c: TensorBoard event files (see tfevents.h for the format). Scalars are collected
// into one Summary and written as one Event per logged step.
#include "galley/tfevents.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "galley/check.h"

#define TF_VALS_CAP (16 * 1024)   // encoded scalars of one event: ~30 bytes each
#define TF_REC_CAP (TF_VALS_CAP + 64)

size_t pb_varint(uint8_t *p, uint64_t v) {
    size_t n = 0;
    while (v >= 0x80) {
        p[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    p[n++] = (uint8_t)v;
    return n;
}

size_t pb_tag(uint8_t *p, int field, int wire) { return pb_varint(p, (uint64_t)field << 3 | (uint64_t)wire); }

static size_t put_le(uint8_t *p, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; i++) p[i] = (uint8_t)(v >> (8 * i));
    return (size_t)bytes;
}

// field = length-delimited bytes
static size_t pb_bytes(uint8_t *p, int field, const void *data, size_t n) {
    size_t k = pb_tag(p, field, 2);
    k += pb_varint(p + k, n);
    memcpy(p + k, data, n);
    return k + n;
}

static size_t pb_double(uint8_t *p, int field, double v) {
    uint64_t bits;
    memcpy(&bits, &v, 8);
    size_t k = pb_tag(p, field, 1);
    return k + put_le(p + k, bits, 8);
}

static size_t pb_float(uint8_t *p, int field, float v) {
    uint32_t bits;
    memcpy(&bits, &v, 4);
    size_t k = pb_tag(p, field, 5);
    return k + put_le(p + k, bits, 4);
}

size_t tfrecord_frame(uint8_t *out, const uint8_t *data, size_t n) {
    put_le(out, n, 8);
    put_le(out + 8, crc32c_masked(out, 8), 4);
    memmove(out + 12, data, n);
    put_le(out + 12 + n, crc32c_masked(out + 12, n), 4);
    return n + 16;
}

// Writes one record whose data is ev[0..n) (ev may be w->rec + 12: framed in place).
static void write_record(gl_tfevents *w, uint8_t *rec, const uint8_t *ev, size_t n) {
    size_t len = tfrecord_frame(rec, ev, n);
    if (!w->f || fwrite(rec, 1, len, w->f) != len) w->failed = true;
}

int tfevents_open(gl_tfevents *w, const char *dir, double wall_time, char *err, size_t errlen) {
    memset(w, 0, sizeof *w);
    char host[256] = "localhost";
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = 0;
    for (char *c = host; *c; c++)
        if (*c == '/' || *c == ' ') *c = '_';
    snprintf(w->path, sizeof w->path, "%s/events.out.tfevents.%lld.%s.%d", dir, (long long)wall_time, host,
             (int)getpid());
    w->f = fopen(w->path, "wb");
    if (!w->f) {
        snprintf(err, errlen, "cannot create %s: %s", w->path, strerror(errno));
        return -1;
    }
    w->vcap = TF_VALS_CAP;
    w->rcap = TF_REC_CAP;
    w->vals = gl_xmalloc(w->vcap);
    w->rec = gl_xmalloc(w->rcap);
    uint8_t *ev = w->rec + 12;
    size_t k = pb_double(ev, 1, wall_time);
    k += pb_bytes(ev + k, 3, "brain.Event:2", 13);
    write_record(w, w->rec, ev, k);
    fflush(w->f);
    return 0;
}

void tfevents_scalar(gl_tfevents *w, const char *tag, double v) {
    if (!w->vals) return;
    size_t tlen = strlen(tag);
    uint8_t value[320];
    if (tlen > 256) return;
    size_t k = pb_bytes(value, 1, tag, tlen);
    k += pb_float(value + k, 2, (float)v);
    if (w->vlen + k + 8 > w->vcap) return;
    w->vlen += pb_bytes(w->vals + w->vlen, 1, value, k);  // Summary.value
}

void tfevents_event(gl_tfevents *w, int64_t step, double wall_time) {
    if (!w->vals || w->vlen == 0) return;
    uint8_t *ev = w->rec + 12;
    size_t k = pb_double(ev, 1, wall_time);
    k += pb_tag(ev + k, 2, 0);
    k += pb_varint(ev + k, (uint64_t)step);
    k += pb_tag(ev + k, 5, 2);
    k += pb_varint(ev + k, w->vlen);
    memcpy(ev + k, w->vals, w->vlen);
    k += w->vlen;
    write_record(w, w->rec, ev, k);
    w->vlen = 0;
}

void tfevents_text(gl_tfevents *w, int64_t step, double wall_time, const char *tag, const char *text) {
    if (!w->f) return;
    size_t tlen = strlen(tag), xlen = strlen(text), cap = tlen + xlen + 128;
    uint8_t *a = gl_xmalloc(cap), *b = gl_xmalloc(cap), *rec = gl_xmalloc(cap + 16);
    // TensorProto { dtype = 1: DT_STRING (7); tensor_shape = 2: {} (a scalar); string_val = 8 }
    size_t k = pb_tag(a, 1, 0);
    k += pb_varint(a + k, 7);
    k += pb_bytes(a + k, 2, "", 0);
    k += pb_bytes(a + k, 8, text, xlen);
    // SummaryMetadata { plugin_data = 1: PluginData { plugin_name = 1: "text" } }
    uint8_t pd[16], md[24];
    size_t npd = pb_bytes(pd, 1, "text", 4);
    size_t nmd = pb_bytes(md, 1, pd, npd);
    // Value { tag = 1; tensor = 8; metadata = 9 }
    size_t v = pb_bytes(b, 1, tag, tlen);
    v += pb_bytes(b + v, 8, a, k);
    v += pb_bytes(b + v, 9, md, nmd);
    // Summary { value = 1 } into a, then Event into b
    k = pb_bytes(a, 1, b, v);
    v = pb_double(b, 1, wall_time);
    v += pb_tag(b + v, 2, 0);
    v += pb_varint(b + v, (uint64_t)step);
    v += pb_bytes(b + v, 5, a, k);
    write_record(w, rec, b, v);
    free(a);
    free(b);
    free(rec);
}

void tfevents_flush(gl_tfevents *w) {
    if (w->f && fflush(w->f) != 0) w->failed = true;
}

int tfevents_close(gl_tfevents *w) {
    if (w->f && fclose(w->f) != 0) w->failed = true;
    w->f = NULL;
    free(w->vals);
    free(w->rec);
    w->vals = w->rec = NULL;
    return w->failed ? -1 : 0;
}
