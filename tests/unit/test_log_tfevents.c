// test_log_tfevents.c: TensorBoard event files: CRC-32C against published check values, the
// protobuf varint encoding, TFRecord framing, and a written file read back with a small decoder
// (TensorBoard's own loader reads them in tests/e2e/test_log_tensorboard.sh).
#include "testlib.h"

#include <stdint.h>

#include "galley/tfevents.h"

static void test_crc32c_check_values(void **state) {
    (void)state;
    assert_int_equal(crc32c(0, "123456789", 9), 0xe3069283u);  // the CRC catalogue's check value
    uint8_t zeros[32] = {0}, ones[32];
    memset(ones, 0xff, sizeof ones);
    assert_int_equal(crc32c(0, zeros, 32), 0x8a9136aau);  // RFC 3720 B.4
    assert_int_equal(crc32c(0, ones, 32), 0x62a8ab43u);
    assert_int_equal(crc32c(0, "", 0), 0);
    // Incremental use gives the same as one call.
    assert_int_equal(crc32c(crc32c(0, "1234", 4), "56789", 5), 0xe3069283u);
    // The mask TFRecord applies.
    uint32_t c = crc32c(0, "123456789", 9);
    assert_int_equal(crc32c_masked("123456789", 9), ((c >> 15) | (c << 17)) + 0xa282ead8u);
    // Every length and alignment (the SSE4.2 path runs bytes, then 8-byte words, then bytes)
    // against a bit-at-a-time reference, also continued from a previous value.
    static uint8_t buf[80];
    for (int i = 0; i < 80; i++) buf[i] = (uint8_t)(i * 37 + 11);
    for (int off = 0; off < 9; off++)
        for (int n = 0; off + n <= 80; n++) {
            uint32_t r = ~0x1234u;
            for (int i = 0; i < n; i++) {
                r ^= buf[off + i];
                for (int k = 0; k < 8; k++) r = r & 1 ? (r >> 1) ^ 0x82f63b78u : r >> 1;
            }
            r = ~r;
            if (crc32c(0x1234u, buf + off, (size_t)n) != r)
                fail_msg("crc32c at offset %d, %d bytes: %08x, want %08x", off, n, crc32c(0x1234u, buf + off, (size_t)n), r);
        }
}

static void test_varint(void **state) {
    (void)state;
    uint8_t b[16];
    assert_int_equal(pb_varint(b, 0), 1);
    assert_int_equal(b[0], 0);
    assert_int_equal(pb_varint(b, 127), 1);
    assert_int_equal(b[0], 127);
    assert_int_equal(pb_varint(b, 300), 2);  // the protobuf guide's example: ac 02
    assert_int_equal(b[0], 0xac);
    assert_int_equal(b[1], 0x02);
    assert_int_equal(pb_varint(b, UINT64_MAX), 10);
    assert_int_equal(b[9], 0x01);
    assert_int_equal(pb_tag(b, 1, 1), 1);  // wall_time: field 1, fixed64
    assert_int_equal(b[0], 0x09);
    assert_int_equal(pb_tag(b, 5, 2), 1);  // summary: field 5, bytes
    assert_int_equal(b[0], 0x2a);
}

static uint64_t le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static void test_frame(void **state) {
    (void)state;
    uint8_t out[64];
    size_t n = tfrecord_frame(out, (const uint8_t *)"hello", 5);
    assert_int_equal(n, 5 + 16);
    assert_int_equal(le(out, 8), 5);
    assert_int_equal(le(out + 8, 4), crc32c_masked(out, 8));
    assert_memory_equal(out + 12, "hello", 5);
    assert_int_equal(le(out + 17, 4), crc32c_masked("hello", 5));
}

// ---- a small decoder for what tfevents.c writes ----

static uint64_t get_varint(const uint8_t **p, const uint8_t *end) {
    uint64_t v = 0;
    for (int shift = 0; *p < end && shift < 64; shift += 7) {
        uint8_t b = *(*p)++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) break;
    }
    return v;
}

typedef struct {
    double wall_time;
    int64_t step;
    char file_version[32];
    int nvalues;
    char tag[8][64];
    float simple[8];
    char plugin[16];
    char text[256];
} event;

// Parses one field-delimited message region, calling back per field.
static void parse_value(const uint8_t *p, const uint8_t *end, event *e);

static void parse_summary(const uint8_t *p, const uint8_t *end, event *e) {
    while (p < end) {
        uint64_t key = get_varint(&p, end);
        assert_int_equal(key, (1 << 3) | 2);  // Summary.value
        uint64_t len = get_varint(&p, end);
        parse_value(p, p + len, e);
        p += len;
    }
}

// Reads the first string field (field 1) of a nested message (PluginData.plugin_name).
static void nested_string(const uint8_t *p, const uint8_t *end, int depth, char *out, size_t cap) {
    while (p < end) {
        uint64_t key = get_varint(&p, end);
        uint64_t len = get_varint(&p, end);
        if ((key >> 3) == 1 && depth > 0) {
            nested_string(p, p + len, depth - 1, out, cap);
        } else if ((key >> 3) == 1) {
            snprintf(out, cap, "%.*s", (int)len, (const char *)p);
        }
        p += len;
    }
}

static void parse_value(const uint8_t *p, const uint8_t *end, event *e) {
    int i = e->nvalues++;
    while (p < end) {
        uint64_t key = get_varint(&p, end);
        int field = (int)(key >> 3), wire = (int)(key & 7);
        if (wire == 5) {
            assert_int_equal(field, 2);  // simple_value
            uint32_t bits = (uint32_t)le(p, 4);
            memcpy(&e->simple[i], &bits, 4);
            p += 4;
            continue;
        }
        assert_int_equal(wire, 2);
        uint64_t len = get_varint(&p, end);
        if (field == 1) snprintf(e->tag[i], sizeof e->tag[i], "%.*s", (int)len, (const char *)p);
        if (field == 9) nested_string(p, p + len, 1, e->plugin, sizeof e->plugin);  // metadata.plugin_data.plugin_name
        if (field == 8) {  // TensorProto: dtype 7, string_val
            const uint8_t *q = p, *qe = p + len;
            while (q < qe) {
                uint64_t k = get_varint(&q, qe);
                if ((k & 7) == 0) {
                    uint64_t v = get_varint(&q, qe);
                    if ((k >> 3) == 1) assert_int_equal(v, 7);
                    continue;
                }
                uint64_t l = get_varint(&q, qe);
                if ((k >> 3) == 8) snprintf(e->text, sizeof e->text, "%.*s", (int)l, (const char *)q);
                q += l;
            }
        }
        p += len;
    }
}

static void parse_event(const uint8_t *p, const uint8_t *end, event *e) {
    memset(e, 0, sizeof *e);
    while (p < end) {
        uint64_t key = get_varint(&p, end);
        int field = (int)(key >> 3), wire = (int)(key & 7);
        if (field == 1 && wire == 1) {
            uint64_t bits = le(p, 8);
            memcpy(&e->wall_time, &bits, 8);
            p += 8;
        } else if (field == 2 && wire == 0) {
            e->step = (int64_t)get_varint(&p, end);
        } else if (wire == 2) {
            uint64_t len = get_varint(&p, end);
            if (field == 3) snprintf(e->file_version, sizeof e->file_version, "%.*s", (int)len, (const char *)p);
            if (field == 5) parse_summary(p, p + len, e);
            p += len;
        } else {
            fail_msg("unexpected field %d wire %d", field, wire);
        }
    }
}

static void test_file_round_trip(void **state) {
    (void)state;
    char dir[] = "/tmp/galley_tfevents_XXXXXX", err[256];
    assert_non_null(mkdtemp(dir));
    gl_tfevents w;
    assert_int_equal(tfevents_open(&w, dir, 1700000000.5, err, sizeof err), 0);
    assert_non_null(strstr(w.path, "/events.out.tfevents.1700000000."));
    tfevents_text(&w, 0, 1700000000.5, "recipe", "    name: \"x\"\n");
    tfevents_scalar(&w, "train/loss", 0.6931);
    tfevents_scalar(&w, "train/accuracy", 0.5);
    tfevents_event(&w, 50, 1700000001.25);
    tfevents_event(&w, 60, 1700000002.0);  // nothing pending: no record
    tfevents_scalar(&w, "val/loss", 1e-3);
    tfevents_event(&w, 300, 1700000003.0);
    char path[4096];
    snprintf(path, sizeof path, "%s", w.path);
    assert_int_equal(tfevents_close(&w), 0);

    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    static uint8_t buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    event ev[8];
    int k = 0;
    for (size_t off = 0; off < n; k++) {
        assert_true(k < 8);
        uint64_t len = le(buf + off, 8);
        assert_int_equal(le(buf + off + 8, 4), crc32c_masked(buf + off, 8));
        assert_int_equal(le(buf + off + 12 + len, 4), crc32c_masked(buf + off + 12, len));
        parse_event(buf + off + 12, buf + off + 12 + len, &ev[k]);
        off += len + 16;
    }
    assert_int_equal(k, 4);
    assert_string_equal(ev[0].file_version, "brain.Event:2");
    assert_true(ev[0].wall_time == 1700000000.5);
    assert_int_equal(ev[1].nvalues, 1);
    assert_string_equal(ev[1].tag[0], "recipe");
    assert_string_equal(ev[1].plugin, "text");
    assert_string_equal(ev[1].text, "    name: \"x\"\n");
    assert_int_equal(ev[2].step, 50);
    assert_true(ev[2].wall_time == 1700000001.25);
    assert_int_equal(ev[2].nvalues, 2);
    assert_string_equal(ev[2].tag[0], "train/loss");
    assert_true(ev[2].simple[0] == 0.6931f);
    assert_string_equal(ev[2].tag[1], "train/accuracy");
    assert_true(ev[2].simple[1] == 0.5f);
    assert_int_equal(ev[3].step, 300);
    assert_string_equal(ev[3].tag[0], "val/loss");
    assert_true(ev[3].simple[0] == 1e-3f);
    remove(path);
    rmdir(dir);
}

static void test_open_fails_cleanly(void **state) {
    (void)state;
    gl_tfevents w;
    char err[256];
    assert_int_equal(tfevents_open(&w, "/nonexistent-galley-dir", 1.0, err, sizeof err), -1);
    assert_non_null(strstr(err, "cannot create /nonexistent-galley-dir/events.out.tfevents."));
    tfevents_scalar(&w, "x", 1);  // harmless on a writer that did not open
    tfevents_event(&w, 1, 1);
    assert_int_equal(tfevents_close(&w), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crc32c_check_values), cmocka_unit_test(test_varint),
        cmocka_unit_test(test_frame),               cmocka_unit_test(test_file_round_trip),
        cmocka_unit_test(test_open_fails_cleanly),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
