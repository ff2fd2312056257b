// synth.h: the synthetic kinds' names (data.synthetic.kind, `galley data synth KIND`), from one
// table, src/data/synth_registry.c. A kind's id is its index there and in recipe.h's SYNTH_*.
#ifndef GALLEY_SYNTH_H
#define GALLEY_SYNTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

// data.synthetic.kind's choices: the names in id order, NULL-terminated.
extern const char *const synth_kind_choices[];

int synth_kind_count(void);
// The id of a kind's name, or -1.
int synth_kind_find(const char *name);
// The name of id ("spirals"), "?" for none (the run banner's "synthetic spirals, ...").
const char *synth_kind_name(int id);
// The names joined by sep into buf[len] ("spirals, blobs, ..." for help and error texts).
void synth_kind_list(char *buf, size_t len, const char *sep);

// The data.synthetic keys a kind reads (the schema applies the others only to the kinds that do);
// STEPS: steps and lead (time series).
enum { SYNTH_KEY_CLASSES = 1, SYNTH_KEY_FEATURES = 2, SYNTH_KEY_SIZE = 4, SYNTH_KEY_CHANNELS = 8, SYNTH_KEY_STEPS = 16 };
bool synth_kind_reads(int id, unsigned keys);
// The most classes the kind can make (0: the schema's limit).
int64_t synth_kind_max_classes(int id);

#endif
