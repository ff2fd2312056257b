// tfevents.h: TensorBoard event files, written natively. A file is a sequence of TFRecords
//   uint64 length | uint32 masked CRC32C(length) | data | uint32 masked CRC32C(data)
// (little-endian; mask(c) = ((c >> 15) | (c << 17)) + 0xa282ead8), each holding one Event
// protobuf, encoded here by hand:
//   Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
//   Summary { repeated Value value = 1; }
//   Value   { string tag = 1; float simple_value = 2; TensorProto tensor = 8;
//             SummaryMetadata metadata = 9; }
// The first record says file_version "brain.Event:2". Scalars go in as simple_value; text (the
// resolved recipe) as a DT_STRING tensor with plugin_name "text", which TensorBoard's text
// plugin shows. The buffers are allocated by tfevents_open; adding scalars and writing events
// allocates nothing.
#ifndef GALLEY_TFEVENTS_H
#define GALLEY_TFEVENTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

// CRC-32C (Castagnoli), as TFRecord uses: crc32c(0, "123456789", 9) == 0xe3069283.
uint32_t crc32c(uint32_t crc, const void *data, size_t n);
uint32_t crc32c_masked(const void *data, size_t n);

// Protobuf wire format helpers (exposed for the unit tests). Each returns the bytes written.
size_t pb_varint(uint8_t *p, uint64_t v);
size_t pb_tag(uint8_t *p, int field, int wire);  // wire: 0 varint, 1 fixed64, 2 bytes, 5 fixed32
// Frames data as one TFRecord into out (which needs n + 16 bytes).
size_t tfrecord_frame(uint8_t *out, const uint8_t *data, size_t n);

typedef struct {
    FILE *f;
    char path[4096];
    uint8_t *vals;   // the pending Summary's encoded values
    size_t vlen, vcap;
    uint8_t *rec;    // one framed record
    size_t rcap;
    bool failed;     // a write failed (reported once by the caller)
} gl_tfevents;

// Creates DIR/events.out.tfevents.<unix time>.<host>.<pid> and writes the file_version record.
// Returns 0, or -1 with a message in err.
int tfevents_open(gl_tfevents *w, const char *dir, double wall_time, char *err, size_t errlen);
// Adds one scalar to the pending event (dropped silently if the buffer is full).
void tfevents_scalar(gl_tfevents *w, const char *tag, double v);
// Writes the pending scalars as one Event at this step (nothing if there are none).
void tfevents_event(gl_tfevents *w, int64_t step, double wall_time);
// Writes a text summary (Markdown, as TensorBoard's text plugin renders it) as its own Event.
void tfevents_text(gl_tfevents *w, int64_t step, double wall_time, const char *tag, const char *text);
void tfevents_flush(gl_tfevents *w);
// Closes the file; returns -1 if any write failed.
int tfevents_close(gl_tfevents *w);

#endif
