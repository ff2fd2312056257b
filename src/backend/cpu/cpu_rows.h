// cpu_rows.h: copying and clearing short rows (a few dozen floats: a padded map's rows) without
// a call per row. At -O2 GCC turns a loop over floats into a call to memcpy or memset, and so is
// a copy of variable size: per row of 16-34 floats the call costs about as much as the copy (the
// padded inputs of the small CNN's convolutions, ~80,000 rows a step). Here whole 8-float copies,
// then one fixed-size copy of the rest. Measured on a 2-core Xeon (perf, 2 threads): the small
// CNN's padding with its memcpy and memset calls 6.6% of its samples, 6.2% this way (the rest is
// the memory traffic itself).
#ifndef GALLEY_CPU_ROWS_H
#define GALLEY_CPU_ROWS_H

#include <stdint.h>
#include <string.h>

// d[0, n) = s[0, n) for n < 8, as one fixed-size copy.
static inline void cpu_rows_tail(float *d, const float *s, int64_t n) {
    switch (n) {
    case 0: break;
    case 1: memcpy(d, s, 4); break;
    case 2: memcpy(d, s, 8); break;
    case 3: memcpy(d, s, 12); break;
    case 4: memcpy(d, s, 16); break;
    case 5: memcpy(d, s, 20); break;
    case 6: memcpy(d, s, 24); break;
    default: memcpy(d, s, 28); break;
    }
}

// d[0, n) = s[0, n) (the two do not overlap).
static inline void cpu_row_copy(float *d, const float *s, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) memcpy(d + i, s + i, 32);
    cpu_rows_tail(d + i, s + i, n - i);
}

// d[0, n) = 0.
static inline void cpu_row_zero(float *d, int64_t n) {
    static const float zeros[8];
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) memcpy(d + i, zeros, 32);
    cpu_rows_tail(d + i, zeros, n - i);
}

// d = [left zeros, s[0, n), right zeros]: a padded map's row.
static inline void cpu_row_pad(float *d, int64_t left, const float *s, int64_t n, int64_t right) {
    cpu_row_zero(d, left);
    cpu_row_copy(d + left, s, n);
    cpu_row_zero(d + left + n, right);
}

#endif
