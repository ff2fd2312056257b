// describe.c: words for what a key expects, and "did you mean" suggestions.
#include <stdio.h>
#include <string.h>

#include "galley/schema.h"

static int edit_distance(const char *a, const char *b) {
    // Three-row Damerau-Levenshtein (OSA); keys are short, so fixed rows are enough.
    int la = (int)strlen(a), lb = (int)strlen(b);
    if (la > 63 || lb > 63) return 99;
    int pprev[64], prev[64], cur[64];
    for (int j = 0; j <= lb; j++) pprev[j] = prev[j] = j;
    for (int i = 1; i <= la; i++) {
        cur[0] = i;
        for (int j = 1; j <= lb; j++) {
            int sub = prev[j - 1] + (a[i - 1] != b[j - 1]);
            int del = prev[j] + 1, ins = cur[j - 1] + 1;
            cur[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
            // A swap of two neighbours ("rleu" for "relu") is one edit (optimal string alignment).
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && pprev[j - 2] + 1 < cur[j])
                cur[j] = pprev[j - 2] + 1;
        }
        memcpy(pprev, prev, sizeof(int) * (size_t)(lb + 1));
        memcpy(prev, cur, sizeof(int) * (size_t)(lb + 1));
    }
    return prev[lb];
}

const char *schema_suggest(const char *word, const char *const *candidates, int n) {
    const char *best = NULL;
    int best_d = 99;
    int limit = (int)strlen(word) <= 4 ? 1 : (int)strlen(word) <= 8 ? 2 : 3;
    for (int i = 0; i < n; i++) {
        int d = edit_distance(word, candidates[i]);
        // A prefix match ("batch" for "batch_size") is a near miss too.
        if (d > limit && strncmp(candidates[i], word, strlen(word)) == 0 && strlen(word) >= 3) d = limit;
        if (d <= limit && d < best_d) best = candidates[i], best_d = d;
    }
    return best;
}

static void describe_range(const key_spec *k, const char *what, char *buf, size_t len) {
    int has_lo = k->min > -GL_INF, has_hi = k->max < GL_INF;
    if (has_lo && has_hi)
        snprintf(buf, len, "%s in [%.15g, %.15g]", what, k->min, k->max);
    else if (has_lo)
        snprintf(buf, len, "%s >= %.15g", what, k->min);
    else if (has_hi)
        snprintf(buf, len, "%s <= %.15g", what, k->max);
    else
        snprintf(buf, len, "%s", what);
}

void schema_describe(const key_spec *k, char *buf, size_t len) {
    switch (k->type) {
    case KT_INT: describe_range(k, "an integer", buf, len); break;
    case KT_FLOAT: describe_range(k, "a number", buf, len); break;
    case KT_BOOL: snprintf(buf, len, "true or false"); break;
    case KT_PAD: describe_range(k, "`same` or an integer", buf, len); break;
    case KT_FLOATS: {
        char each[128];
        describe_range(k, "each", each, sizeof each);
        snprintf(buf, len, "a list of up to %d numbers%s%s", GL_MAX_FLOATS, strcmp(each, "each") ? ", " : "",
                 strcmp(each, "each") ? each : "");
        break;
    }
    case KT_STRING: snprintf(buf, len, "a string"); break;
    case KT_SECTION: snprintf(buf, len, "a mapping"); break;
    case KT_LAYERS: snprintf(buf, len, "a list of layers"); break;
    case KT_NAMES: snprintf(buf, len, "a layer name or a list of up to %d names", GL_MAX_NAMES); break;
    case KT_ENUM: {
        size_t k2 = (size_t)snprintf(buf, len, "one of ");
        for (int i = 0; k->choices[i] && k2 < len; i++)
            k2 += (size_t)snprintf(buf + k2, len - k2, i ? ", %s" : "%s", k->choices[i]);
        break;
    }
    }
}
