// crc32c.c: CRC-32C (Castagnoli, reflected polynomial 0x82f63b78), the checksum of TFRecord
// framing. A 256-entry table built on first use; the event writer calls it a few times per
// logged step, so speed does not matter.
#include <stdint.h>

#include "galley/tfevents.h"

static uint32_t table[256];
static int table_ready;

static void table_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
        table[i] = c;
    }
    table_ready = 1;
}

uint32_t crc32c(uint32_t crc, const void *data, size_t n) {
    if (!table_ready) table_init();
    const uint8_t *p = data;
    crc = ~crc;
    for (size_t i = 0; i < n; i++) crc = table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
    return ~crc;
}

uint32_t crc32c_masked(const void *data, size_t n) {
    uint32_t c = crc32c(0, data, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}
