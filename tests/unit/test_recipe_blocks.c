// test_recipe_blocks.c: repeated blocks in recipes (model.blocks, items {block, repeat, name}):
// expansion and names, input resolution inside copies, the expanded model equal to the same
// layers written out, emit round trips, overrides, and errors at the block's recipe lines.
#include "testlib.h"

// ---- helpers ----------------------------------------------------------------------------------

static void assert_has(const char *text, const char *want)
{
    if (!strstr(text, want)) fail_msg("'%s' not found in:\n%s", want, text);
}

static int count_of(const char *text, const char *want)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, want)); p += strlen(want)) n++;
    return n;
}

// Loads text that must fail; returns its errors (caller frees); path gets the file's name.
static char *load_bad(const char *yaml, int nov, char *const *ov, char *path)
{
    recipe_t r;
    char *errors = NULL;
    int rc = tl_recipe_try(&r, yaml, nov, ov, &errors, path);
    recipe_free(&r);
    if (rc != -1) {
        free(errors);
        fail_msg("recipe_load returned %d for a bad recipe:\n%s", rc, yaml);
    }
    return errors;
}

// "PATH:LINE:COL: error: KEYPATH" must begin some line of errors, and that line must hold msg.
static void assert_error(const char *errors, const char *path, int line, int col, const char *keypath,
                         const char *msg)
{
    char want[512];
    snprintf(want, sizeof want, "%s:%d:%d: error: %s:", path, line, col, keypath);
    for (const char *p = errors; p && *p;) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        if (!strncmp(p, want, strlen(want))) {
            char copy[1024];
            snprintf(copy, sizeof copy, "%.*s", (int)(len < 1000 ? len : 1000), p);
            if (!strstr(copy, msg)) fail_msg("error line '%s' lacks '%s'", copy, msg);
            return;
        }
        p = nl ? nl + 1 : NULL;
    }
    fail_msg("no error line starting with '%s' in:\n%s", want, errors);
}

static const gl_value *value_of(const layer_cfg *c, const char *key)
{
    for (int j = 0; c->kind->keys && c->kind->keys[j].name; j++)
        if (!strcmp(c->kind->keys[j].name, key)) return &c->v[j];
    fail_msg("layer kind %s has no key %s", c->kind->name, key);
    return NULL;
}

static char *emit_text(const recipe_t *r)
{
    tl_stream s;
    recipe_emit(r, tl_stream_open(&s));
    return tl_stream_close(&s);
}

// The design's example: 12 copies of a three-layer block between two layers.
static const char vit_like[] =
    "data: {synthetic: {kind: blobs, classes: 4, features: 8, train_size: 16, val_size: 8}}\n"  // 1
    "model:\n"                                                                                    // 2
    "  blocks:\n"                                                                                 // 3
    "    encoder:\n"                                                                              // 4
    "      - {type: layer_norm, name: n1}\n"                                                      // 5
    "      - {type: dense, name: fc, units: 8}\n"                                                 // 6
    "      - {type: add, name: out, inputs: [fc, in]}\n"                                          // 7
    "  layers:\n"                                                                                 // 8
    "    - {type: dense, units: 8}\n"                                                             // 9
    "    - {block: encoder, repeat: 12, name: enc}\n"                                             // 10
    "    - {type: layer_norm, inputs: enc}\n"                                                     // 11
    "    - {type: dense, units: 4}\n"                                                             // 12
    "optimizer: {lr: 0.1}\n";                                                                     // 13

// ---- expansion --------------------------------------------------------------------------------

static void test_expansion_names_indices_and_marks(void **state)
{
    (void)state;
    recipe_t r;
    tl_recipe(&r, vit_like, 0, NULL);
    assert_int_equal(r.model.nlayers, 1 + 12 * 3 + 2);
    const layer_cfg *l = r.model.layers;
    assert_string_equal(l[0].name, "dense_0");
    for (int k = 0; k < 12; k++) {
        const layer_cfg *c = &l[1 + 3 * k];
        char want[64];
        snprintf(want, sizeof want, "enc.%d.n1", k);
        assert_string_equal(c[0].name, want);
        snprintf(want, sizeof want, "enc.%d.fc", k);
        assert_string_equal(c[1].name, want);
        snprintf(want, sizeof want, "enc.%d.out", k);
        assert_string_equal(c[2].name, want);
        assert_ptr_equal(c[0].kind, layer_kind_find("layer_norm"));
        assert_ptr_equal(c[1].kind, layer_kind_find("dense"));
        assert_int_equal(value_of(&c[1], "units")->i, 8);
        for (int j = 0; j < 3; j++) {
            assert_int_equal(c[j].index, 1);  // the item in model.layers
            assert_int_equal(c[j].mark.line, 5 + j);  // the layer's line in the block
            assert_int_equal(c[j].mark.col, 9);
        }
    }
    // After the item, default names count items as written (the item is one).
    assert_string_equal(l[37].name, "layer_norm_2");
    assert_int_equal(l[37].index, 2);
    assert_int_equal(l[37].mark.line, 11);
    assert_string_equal(l[38].name, "dense_3");
    recipe_free(&r);
}

static void test_inputs_resolve_within_the_copy(void **state)
{
    (void)state;
    recipe_t r;
    tl_recipe(&r, vit_like, 0, NULL);
    const layer_cfg *l = r.model.layers;
    // n1 and fc have no inputs: each takes the previous layer, as everywhere.
    assert_int_equal(l[1].inputs.n, 0);
    assert_int_equal(l[2].inputs.n, 0);
    // out: [fc, in]; copy 0's 'in' is the layer before the item, copy k's the last of copy k-1.
    assert_int_equal(l[3].inputs.n, 2);
    assert_string_equal(l[3].inputs.name[0], "enc.0.fc");
    assert_string_equal(l[3].inputs.name[1], "dense_0");
    for (int k = 1; k < 12; k++) {
        char fc[32], prev[32];
        snprintf(fc, sizeof fc, "enc.%d.fc", k);
        snprintf(prev, sizeof prev, "enc.%d.out", k - 1);
        assert_string_equal(l[3 + 3 * k].inputs.name[0], fc);
        assert_string_equal(l[3 + 3 * k].inputs.name[1], prev);
    }
    // The item's name stands for its last copy's last layer.
    assert_int_equal(l[37].inputs.n, 1);
    assert_string_equal(l[37].inputs.name[0], "enc.11.out");
    recipe_free(&r);
}

// A block item first in the model ('in' is the model input), a default item name (the block's),
// default layer names in a block, a name outside the block, and one block used twice.
static void test_defaults_first_item_and_outside_names(void **state)
{
    (void)state;
    recipe_t r;
    tl_recipe(&r,
              "model:\n"
              "  blocks:\n"
              "    res:\n"
              "      - {type: dense, units: 4}\n"
              "      - {type: relu}\n"
              "      - {type: add, inputs: [relu_1, in, input]}\n"
              "  layers:\n"
              "    - {block: res, repeat: 2}\n"
              "    - {type: dense, units: 4, name: mid, inputs: res}\n"
              "    - {block: res, name: again}\n"
              "    - {type: concat, inputs: [res.1.dense_0, again]}\n"
              "optimizer: {lr: 0.1}\n",
              0, NULL);
    const layer_cfg *l = r.model.layers;
    assert_int_equal(r.model.nlayers, 2 * 3 + 1 + 3 + 1);
    assert_string_equal(l[0].name, "res.0.dense_0");
    assert_string_equal(l[1].name, "res.0.relu_1");
    assert_string_equal(l[2].name, "res.0.add_2");
    assert_string_equal(l[2].inputs.name[0], "res.0.relu_1");
    assert_string_equal(l[2].inputs.name[1], "input");  // 'in' of copy 0 of the first item
    assert_string_equal(l[2].inputs.name[2], "input");
    assert_string_equal(l[5].inputs.name[1], "res.0.add_2");
    assert_string_equal(l[6].name, "mid");
    assert_string_equal(l[6].inputs.name[0], "res.1.add_2");
    assert_string_equal(l[7].name, "again.0.dense_0");  // repeat defaults to 1
    assert_string_equal(l[9].inputs.name[1], "mid");
    assert_string_equal(l[10].inputs.name[0], "res.1.dense_0");
    assert_string_equal(l[10].inputs.name[1], "again.0.add_2");
    recipe_free(&r);
}

// The expanded model is the model of the same layers written out: same parameters, same
// initial values (layer indices seed the init), same outputs.
static void test_expanded_model_equals_written_out_layers(void **state)
{
    (void)state;
    const char *blocks =
        "    - {type: dense, units: 6}\n"
        "    - {block: b, repeat: 3, name: x}\n"
        "    - {type: dense, units: 3, inputs: x}\n"
        "  blocks:\n"
        "    b:\n"
        "      - {type: layer_norm, name: n}\n"
        "      - {type: dense, units: 6, name: fc}\n"
        "      - {type: gelu}\n"
        "      - {type: add, name: o, inputs: [gelu_2, in]}\n";
    char flat[4096];
    size_t k = (size_t)snprintf(flat, sizeof flat, "    - {type: dense, units: 6, name: dense_0}\n");
    for (int c = 0; c < 3; c++)
        k += (size_t)snprintf(flat + k, sizeof flat - k,
                              "    - {type: layer_norm, name: x.%d.n}\n"
                              "    - {type: dense, units: 6, name: x.%d.fc}\n"
                              "    - {type: gelu, name: x.%d.gelu_2}\n"
                              "    - {type: add, name: x.%d.o, inputs: [x.%d.gelu_2, %s%s]}\n",
                              c, c, c, c, c, c ? "x." : "dense_0", c ? (c == 1 ? "0.o" : "1.o") : "");
    snprintf(flat + k, sizeof flat - k, "    - {type: dense, units: 3, inputs: x.2.o, name: dense_2}\n");
    tl_model a, b;
    tl_model_build(&a, blocks, shape_1d(5), 4);
    tl_model_build(&b, flat, shape_1d(5), 4);
    assert_int_equal(a.g.nlayers, b.g.nlayers);
    assert_int_equal(a.g.nparams, b.g.nparams);
    graph_init_params(&a.g, 7);
    graph_init_params(&b.g, 7);
    assert_memory_equal(a.g.params, b.g.params, (size_t)a.g.nparams * sizeof(float));
    tl_fill_uniform(a.g.input.data, 4 * 5, -1, 1, 3);
    memcpy(b.g.input.data, a.g.input.data, 4 * 5 * sizeof(float));
    graph_forward(&a.g, 4, false);
    graph_forward(&b.g, 4, false);
    assert_memory_equal(graph_output(&a.g)->data, graph_output(&b.g)->data, 4 * 3 * sizeof(float));
    tl_model_free(&a);
    tl_model_free(&b);
}

// `galley check` output (emit) writes the copies as layers; it loads back to the same layers and
// emits the same text, so the run directory's recipe.yaml trains the same model.
static void test_emit_writes_the_expansion_and_round_trips(void **state)
{
    (void)state;
    recipe_t a, b;
    tl_recipe(&a, vit_like, 0, NULL);
    char *text = emit_text(&a);
    assert_has(text, "      name: \"enc.11.out\"\n      inputs: [\"enc.11.fc\", \"enc.10.out\"]\n");
    assert_true(!strstr(text, "blocks"));
    assert_true(!strstr(text, "repeat"));
    tl_recipe(&b, text, 0, NULL);
    assert_int_equal(a.model.nlayers, b.model.nlayers);
    for (int i = 0; i < a.model.nlayers; i++) {
        assert_string_equal(a.model.layers[i].name, b.model.layers[i].name);
        assert_int_equal(a.model.layers[i].inputs.n, b.model.layers[i].inputs.n);
        for (int j = 0; j < a.model.layers[i].inputs.n; j++)
            assert_string_equal(a.model.layers[i].inputs.name[j], b.model.layers[i].inputs.name[j]);
    }
    char *again = emit_text(&b);
    assert_string_equal(text, again);
    assert_true(recipe_hash(&a) == recipe_hash(&b));
    free(text);
    free(again);
    recipe_free(&a);
    recipe_free(&b);
}

// Overrides address the recipe as written: a block's keys (all copies), an item's repeat.
static void test_overrides_address_blocks_and_items(void **state)
{
    (void)state;
    recipe_t r;
    char *ov[] = {"model.blocks.encoder[1].units=16", "model.layers[1].repeat=2", "model.layers[1].name=e",
                  "model.layers[2].inputs=e"};
    tl_recipe(&r, vit_like, 4, ov);
    assert_int_equal(r.model.nlayers, 1 + 2 * 3 + 2);
    assert_string_equal(r.model.layers[2].name, "e.0.fc");
    assert_int_equal(value_of(&r.model.layers[2], "units")->i, 16);
    assert_int_equal(value_of(&r.model.layers[5], "units")->i, 16);
    assert_string_equal(r.model.layers[7].inputs.name[0], "e.1.out");
    recipe_free(&r);
    // A layer key on the item is refused, saying where a block's layer keys go.
    char *bad[] = {"model.layers[1].units=16"};
    char *e = load_bad(vit_like, 1, bad, NULL);
    assert_error(e, "command line", 1, 1, "model.layers[1].units", "set in model.blocks.encoder");
    free(e);
}

// ---- errors -----------------------------------------------------------------------------------

// An error in a block's layer is reported once, at its line in the block, whatever the repeat.
static void test_block_layer_errors_reported_once(void **state)
{
    (void)state;
    char path[64];
    char *e = load_bad("model:\n"
                       "  blocks:\n"
                       "    encoder:\n"
                       "      - {type: dense, unitz: 8}\n"
                       "      - {type: dense, units: 0}\n"
                       "      - {type: dens}\n"
                       "      - {type: relu, name: a.b}\n"
                       "      - {type: relu, name: in}\n"
                       "  layers:\n"
                       "    - {block: encoder, repeat: 12, name: enc}\n"
                       "optimizer: {lr: 0.1}\n",
                       0, NULL, path);
    assert_error(e, path, 4, 23, "model.blocks.encoder[0].unitz", "did you mean 'units'?");
    assert_error(e, path, 4, 9, "model.blocks.encoder[0].units", "missing required key 'units'");
    assert_error(e, path, 5, 30, "model.blocks.encoder[1].units", "0 is out of range");
    assert_error(e, path, 6, 16, "model.blocks.encoder[2].type", "unknown layer type 'dens'");
    assert_error(e, path, 7, 28, "model.blocks.encoder[3].name", "no '.'");
    assert_error(e, path, 8, 28, "model.blocks.encoder[4].name", "'in' is reserved in a block");
    assert_int_equal(count_of(e, "error:"), 6);
    free(e);
}

static void test_item_errors(void **state)
{
    (void)state;
    char path[64];
    char *e = load_bad("model:\n"
                       "  blocks:\n"
                       "    encoder:\n"
                       "      - {type: dense, units: 8}\n"
                       "  layers:\n"
                       "    - {block: encodr, repeat: 2}\n"
                       "    - {block: encoder, repeat: 0}\n"
                       "    - {block: encoder, repeat: 2.5, name: e2}\n"
                       "    - {block: encoder, repeats: 2, type: dense, name: e3}\n"
                       "    - {block: encoder, name: e.4}\n"
                       "    - {block: [encoder], name: e5}\n"
                       "optimizer: {lr: 0.1}\n",
                       0, NULL, path);
    assert_error(e, path, 6, 15, "model.layers[0].block", "unknown block 'encodr' (did you mean 'encoder'?)");
    assert_error(e, path, 7, 32, "model.layers[1].repeat", "0 is out of range: expected an integer in [1, 1000]");
    assert_error(e, path, 8, 32, "model.layers[2].repeat", "expected an integer in [1, 1000], found '2.5'");
    assert_error(e, path, 9, 24, "model.layers[3].repeats", "a block item (did you mean 'repeat'?)");
    assert_error(e, path, 9, 36, "model.layers[3].type", "it has block, repeat and name");
    assert_error(e, path, 10, 30, "model.layers[4].name", "found 'e.4'");
    assert_error(e, path, 11, 15, "model.layers[5].block", "expected a string, found a list");
    free(e);
    e = load_bad("model:\n  layers:\n    - {block: b}\noptimizer: {lr: 0.1}\n", 0, NULL, path);
    assert_error(e, path, 3, 15, "model.layers[0].block", "the recipe has no model.blocks");
    free(e);
}

static void test_block_shape_errors(void **state)
{
    (void)state;
    char path[64];
    char *e = load_bad("model:\n"
                       "  blocks:\n"
                       "    a: {type: dense, units: 8}\n"
                       "    b: []\n"
                       "    c:\n"
                       "      - {block: a}\n"
                       "    d:\n"
                       "      - relu\n"
                       "    unused:\n"
                       "      - {type: relu}\n"
                       "  layers:\n"
                       "    - {block: a}\n"
                       "    - {block: b}\n"
                       "    - {block: c}\n"
                       "    - {block: d}\n"
                       "optimizer: {lr: 0.1}\n",
                       0, NULL, path);
    assert_error(e, path, 3, 8, "model.blocks.a", "a block is a non-empty list of layers, found a mapping");
    assert_error(e, path, 4, 8, "model.blocks.b", "found an empty list");
    assert_error(e, path, 6, 9, "model.blocks.c[0]", "blocks do not nest");
    assert_error(e, path, 8, 9, "model.blocks.d[0]", "expected a layer mapping");
    assert_error(e, path, 9, 5, "model.blocks.unused", "is not used by any item of model.layers");
    free(e);
    e = load_bad("model:\n  blocks: [a]\n  layers:\n    - {type: relu}\noptimizer: {lr: 0.1}\n", 0, NULL, path);
    assert_error(e, path, 2, 11, "model.blocks", "expected a mapping of block names to lists of layers");
    free(e);
}

static void test_names_a_block_cannot_see(void **state)
{
    (void)state;
    char path[64];
    char *e = load_bad("model:\n"
                       "  blocks:\n"
                       "    b:\n"
                       "      - {type: dense, units: 8, name: fc, inputs: out}\n"
                       "      - {type: add, name: out, inputs: [fc, out]}\n"
                       "  layers:\n"
                       "    - {block: b}\n"
                       "optimizer: {lr: 0.1}\n",
                       0, NULL, path);
    assert_error(e, path, 4, 51, "model.blocks.b[0].inputs", "'out' is a later layer of the block");
    assert_error(e, path, 5, 45, "model.blocks.b[1].inputs", "'out' is this layer itself");
    free(e);
    // A name outside the block is looked up above the item, once for all copies; the later
    // item's copies and names are not visible.
    e = load_bad("model:\n"
                 "  blocks:\n"
                 "    b:\n"
                 "      - {type: dense, units: 8, name: fc}\n"
                 "      - {type: add, name: out, inputs: [fc, in, nrom]}\n"
                 "      - {type: add, name: o2, inputs: [fc, later]}\n"
                 "  layers:\n"
                 "    - {type: layer_norm, name: norm}\n"
                 "    - {block: b, repeat: 12, name: enc}\n"
                 "    - {type: relu, name: later}\n"
                 "optimizer: {lr: 0.1}\n",
                 0, NULL, path);
    assert_error(e, path, 5, 49, "model.layers[1] (enc.0.out).inputs", "no earlier layer is named 'nrom' (did you "
                 "mean 'norm'?)");
    assert_error(e, path, 6, 44, "model.layers[1] (enc.0.o2).inputs", "no earlier layer is named 'later'");
    assert_int_equal(count_of(e, "error:"), 2);
    free(e);
}

static void test_duplicate_names_after_expansion(void **state)
{
    (void)state;
    char path[64];
    char *e = load_bad("model:\n"
                       "  blocks:\n"
                       "    b:\n"
                       "      - {type: dense, units: 8, name: fc}\n"
                       "  layers:\n"
                       "    - {type: dense, units: 8, name: enc.1.fc}\n"
                       "    - {block: b, repeat: 3, name: enc}\n"
                       "    - {block: b, repeat: 2, name: enc}\n"
                       "    - {type: relu, name: b}\n"
                       "    - {block: b}\n"
                       "optimizer: {lr: 0.1}\n",
                       0, NULL, path);
    assert_error(e, path, 4, 9, "model.layers[1] (enc.1.fc)", "layer name 'enc.1.fc' is already used by model.layers[0]");
    assert_error(e, path, 8, 35, "model.layers[2].name", "name 'enc' is already used by model.layers[1] (a block item)");
    assert_error(e, path, 10, 7, "model.layers[4].name", "name 'b' is already used by model.layers[3]");
    assert_int_equal(count_of(e, "error:"), 3);
    free(e);
    e = load_bad("model:\n  blocks:\n    b:\n      - {type: relu, name: rrrrrrrrrrrrrrrrrrrrrrrrrrrrrrr}\n"
                 "  layers:\n    - {block: b, repeat: 100, name: iiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiii}\n"
                 "optimizer: {lr: 0.1}\n", 0, NULL, path);
    assert_error(e, path, 6, 37, "model.layers[0].name", "longer than 63 characters");
    free(e);
}

// The graph's errors for a layer in a copy print its line in the block and the copy's name.
static void test_graph_errors_point_into_the_block(void **state)
{
    (void)state;
    tl_model m;
    char *e = NULL;
    int rc = tl_model_try(&m,
                          "    - {type: dense, units: 8}\n"
                          "    - {block: b, repeat: 3, name: enc}\n"
                          "  blocks:\n"
                          "    b:\n"
                          "      - {type: dense, units: 4, name: fc}\n"
                          "      - {type: add, name: out, inputs: [fc, in]}\n",
                          shape_1d(5), 2, &e);
    assert_int_equal(rc, -1);
    assert_has(e, ":8:9: error: model.layers[");
    assert_has(e, "(enc.0.out): add needs inputs of one shape");
    free(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_expansion_names_indices_and_marks),
        cmocka_unit_test(test_inputs_resolve_within_the_copy),
        cmocka_unit_test(test_defaults_first_item_and_outside_names),
        cmocka_unit_test(test_expanded_model_equals_written_out_layers),
        cmocka_unit_test(test_emit_writes_the_expansion_and_round_trips),
        cmocka_unit_test(test_overrides_address_blocks_and_items),
        cmocka_unit_test(test_block_layer_errors_reported_once),
        cmocka_unit_test(test_item_errors),
        cmocka_unit_test(test_block_shape_errors),
        cmocka_unit_test(test_names_a_block_cannot_see),
        cmocka_unit_test(test_duplicate_names_after_expansion),
        cmocka_unit_test(test_graph_errors_point_into_the_block),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
