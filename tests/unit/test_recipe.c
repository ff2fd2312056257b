// test_recipe.c: loading recipes: values and schema defaults, typed overrides, errors as
// FILE:LINE:COL with the key path, emit round trips, and the generated reference.
#include "testlib.h"

#include <signal.h>
#include <sys/wait.h>

// ---- helpers ----------------------------------------------------------------------------------

// Value slot of a layer's key by name (fails if the kind has no such key).
static const gl_value *layer_value(const layer_cfg *c, const char *key)
{
    for (int j = 0; c->kind->keys && c->kind->keys[j].name; j++)
        if (!strcmp(c->kind->keys[j].name, key)) return &c->v[j];
    fail_msg("layer kind %s has no key %s", c->kind->name, key);
    return NULL;
}

static int choice_index(const char *const *choices, const char *name)
{
    for (int i = 0; choices[i]; i++)
        if (!strcmp(choices[i], name)) return i;
    fail_msg("no choice %s", name);
    return -1;
}

// "PATH:LINE:COL: error: KEYPATH:" must begin some line of errors.
static void assert_error_at(const char *errors, const char *path, int line, int col, const char *keypath)
{
    char want[512];
    snprintf(want, sizeof want, "%s:%d:%d: error: %s:", path, line, col, keypath);
    for (const char *p = errors; p && *p;) {
        if (!strncmp(p, want, strlen(want))) return;
        const char *nl = strchr(p, '\n');
        p = nl ? nl + 1 : NULL;
    }
    fail_msg("no error line starting with '%s' in:\n%s", want, errors);
}

static void assert_contains(const char *text, const char *want)
{
    if (!strstr(text, want)) fail_msg("'%s' not found in:\n%s", want, text);
}

static int count_lines(const char *s)
{
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

// Loads text that must fail; returns the errors (caller frees) and the file's name in path.
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
    assert_true(errors && *errors);
    return errors;
}

static char *emit_text(const recipe_t *r)
{
    tl_stream s;
    recipe_emit(r, tl_stream_open(&s));
    return tl_stream_close(&s);
}

static const char full_recipe[] = "name: demo\n"                                             // 1
                                  "seed: 7\n"                                                // 2
                                  "data:\n"                                                  // 3
                                  "  synthetic:\n"                                           // 4
                                  "    kind: blobs\n"                                        // 5
                                  "    classes: 4\n"                                         // 6
                                  "    noise: 0.25\n"                                        // 7
                                  "model:\n"                                                 // 8
                                  "  layers:\n"                                              // 9
                                  "    - {type: dense, units: 16, name: hidden}\n"           // 10
                                  "    - {type: leaky_relu, slope: 0.2}\n"                   // 11
                                  "    - type: dense\n"                                      // 12
                                  "      units: 4\n"                                         // 13
                                  "      bias: false\n"                                      // 14
                                  "      init: xavier_uniform\n"                             // 15
                                  "      inputs: hidden\n"                                   // 16
                                  "train:\n"                                                 // 17
                                  "  epochs: 3\n"                                            // 18
                                  "  target: {metric: loss, below: 0.5}\n"                   // 19
                                  "optimizer:\n"                                             // 20
                                  "  lr: 0.05\n"                                             // 21
                                  "  nesterov: true\n";                                      // 22

// ---- good recipes -------------------------------------------------------------------------------

static void test_full_recipe_values(void **state)
{
    (void)state;
    recipe_t r;
    tl_recipe(&r, full_recipe, 0, NULL);
    assert_string_equal(r.name, "demo");
    assert_int_equal(r.seed, 7);
    assert_int_equal(r.data.source, DATA_SOURCE_SYNTHETIC);
    assert_int_equal(r.data.synthetic.kind, SYNTH_BLOBS);
    assert_int_equal(r.data.synthetic.classes, 4);
    assert_int_equal(r.data.synthetic.features, 2);  // default
    assert_true(r.data.synthetic.noise == 0.25);
    assert_int_equal(r.model.nlayers, 3);
    const layer_cfg *l = r.model.layers;
    assert_ptr_equal(l[0].kind, layer_kind_find("dense"));
    assert_string_equal(l[0].name, "hidden");
    assert_int_equal(l[0].inputs.n, 0);
    assert_int_equal(layer_value(&l[0], "units")->i, 16);
    assert_true(layer_value(&l[0], "bias")->b);  // default
    assert_int_equal(layer_value(&l[0], "init")->e, choice_index(layer_init_choices, "he_normal"));
    assert_int_equal(l[0].mark.line, 10);
    assert_int_equal(l[0].mark.col, 7);
    assert_int_equal(l[0].index, 0);
    assert_ptr_equal(l[1].kind, layer_kind_find("leaky_relu"));
    assert_string_equal(l[1].name, "leaky_relu_1");  // <type>_<index>
    assert_true(layer_value(&l[1], "slope")->f == 0.2);
    assert_string_equal(l[2].name, "dense_2");
    assert_int_equal(layer_value(&l[2], "units")->i, 4);
    assert_false(layer_value(&l[2], "bias")->b);
    assert_int_equal(layer_value(&l[2], "init")->e, choice_index(layer_init_choices, "xavier_uniform"));
    assert_int_equal(l[2].inputs.n, 1);
    assert_string_equal(l[2].inputs.name[0], "hidden");
    assert_int_equal(l[2].mark.line, 12);
    assert_int_equal(l[2].mark.col, 7);
    assert_int_equal(r.train.epochs, 3);
    assert_int_equal(r.train.target.metric, METRIC_LOSS);
    assert_true(r.train.target.below == 0.5);
    assert_true(isnan(r.train.target.above));
    assert_true(r.optimizer.lr == 0.05);
    assert_true(r.optimizer.nesterov);
    recipe_free(&r);
}

static void test_minimal_recipe_gets_schema_defaults(void **state)
{
    (void)state;
    recipe_t r;
    char path[64];
    char *errors = NULL;
    assert_int_equal(tl_recipe_try(&r, "model:\n  layers:\n    - {type: relu}\noptimizer: {lr: 1}\n", 0, NULL,
                                   &errors, path),
                     0);
    assert_string_equal(errors, "");
    free(errors);
    assert_string_equal(r.file, path);
    // name: the file name without .yaml
    char want[64];
    const char *base = strrchr(path, '/') + 1;
    snprintf(want, sizeof want, "%.*s", (int)(strlen(base) - 5), base);
    assert_string_equal(r.name, want);
    assert_int_equal(r.seed, 42);
    assert_int_equal(r.data.source, DATA_SOURCE_SYNTHETIC);
    assert_int_equal(r.data.synthetic.kind, SYNTH_SPIRALS);
    assert_int_equal(r.data.synthetic.classes, 3);
    assert_int_equal(r.data.synthetic.features, 2);
    assert_int_equal(r.data.synthetic.train_size, 4096);
    assert_int_equal(r.data.synthetic.val_size, 1024);
    assert_true(r.data.synthetic.noise == 0.1);
    assert_int_equal(r.train.epochs, 10);
    assert_int_equal(r.train.batch_size, 64);
    assert_int_equal(r.train.threads, 0);
    assert_int_equal(r.train.loss, LOSS_SOFTMAX_XENT);
    assert_int_equal(r.train.target.metric, METRIC_NONE);
    assert_true(isnan(r.train.target.above) && isnan(r.train.target.below));
    assert_int_equal(r.optimizer.type, OPT_SGD);
    assert_true(r.optimizer.lr == 1.0);
    assert_true(r.optimizer.momentum == 0.9);
    assert_false(r.optimizer.nesterov);
    assert_true(r.optimizer.weight_decay == 0.0);
    assert_int_equal(r.model.nlayers, 1);
    assert_string_equal(r.model.layers[0].name, "relu_0");
    recipe_free(&r);
}

// Every schema default parses as its key (recipe_load would die on a bad one) and an empty
// section ("train:") means all defaults.
static void test_empty_section_is_all_defaults(void **state)
{
    (void)state;
    recipe_t r;
    tl_recipe(&r, "train:\ndata:\nmodel:\n  layers: [{type: tanh}]\noptimizer: {lr: 0.5}\n", 0, NULL);
    assert_int_equal(r.train.epochs, 10);
    assert_int_equal(r.data.synthetic.classes, 3);
    recipe_free(&r);
}

// ---- overrides ----------------------------------------------------------------------------------

static void test_overrides_are_typed(void **state)
{
    (void)state;
    char *ov[] = {
        "train.epochs=3",
        "optimizer.lr=0.5",
        "optimizer.nesterov=true",
        "data.synthetic.kind=spirals",
        "data.synthetic.noise=1e-3",
        "model.layers[0].units=11",
        "model.layers.1.slope=0.5",
        "model.layers[2].inputs=[hidden]",
        "train.target={metric: accuracy, above: 0.9}",
        "name=123",  // a string key keeps the text
        "train.threads=2",
    };
    int n = (int)(sizeof ov / sizeof ov[0]);
    recipe_t r;
    tl_recipe(&r, full_recipe, n, ov);
    assert_int_equal(r.train.epochs, 3);
    assert_true(r.optimizer.lr == 0.5);
    assert_true(r.optimizer.nesterov);
    assert_int_equal(r.data.synthetic.kind, SYNTH_SPIRALS);
    assert_true(r.data.synthetic.noise == 1e-3);
    assert_int_equal(r.data.synthetic.classes, 4);  // untouched
    assert_int_equal(layer_value(&r.model.layers[0], "units")->i, 11);
    assert_true(layer_value(&r.model.layers[1], "slope")->f == 0.5);
    assert_int_equal(r.model.layers[2].inputs.n, 1);
    assert_string_equal(r.model.layers[2].inputs.name[0], "hidden");
    assert_int_equal(r.train.target.metric, METRIC_ACCURACY);
    assert_true(r.train.target.above == 0.9);
    assert_true(isnan(r.train.target.below));
    assert_string_equal(r.name, "123");
    assert_int_equal(r.train.threads, 2);
    recipe_free(&r);

    // A later override of the same key wins; a missing section is created.
    char *ov2[] = {"train.epochs=3", "train.epochs=5", "data.synthetic.noise=0.5"};
    tl_recipe(&r, "model:\n  layers: [{type: relu}]\noptimizer: {lr: 1}\n", 3, ov2);
    assert_int_equal(r.train.epochs, 5);
    assert_true(r.data.synthetic.noise == 0.5);
    recipe_free(&r);
}

static void test_override_errors_point_at_the_command_line(void **state)
{
    (void)state;
    char path[64];
    // Type errors are found at resolution and point at the value: "train.epochs=" is 13 chars.
    char *ov1[] = {"optimizer.nesterov=true", "train.epochs=abc", "optimizer.lr=\"1\""};
    char *e = load_bad(full_recipe, 3, ov1, path);
    assert_error_at(e, "command line", 2, 14, "train.epochs");
    assert_contains(e, "expected an integer");
    assert_error_at(e, "command line", 3, 14, "optimizer.lr");
    assert_contains(e, "quoted string");
    assert_int_equal(count_lines(e), 2);
    free(e);
    // Path errors are found while applying the override.
    char *ov2[] = {"train.epochs"};
    e = load_bad(full_recipe, 1, ov2, path);
    assert_error_at(e, "command line", 1, 1, "train.epochs");
    free(e);
    char *ov3[] = {"model.layers[9].units=3"};
    e = load_bad(full_recipe, 1, ov3, path);
    assert_error_at(e, "command line", 1, 1, "model.layers[9].units");
    assert_contains(e, "out of range");
    free(e);
    char *ov4[] = {"seed.x=1"};
    e = load_bad(full_recipe, 1, ov4, path);
    assert_error_at(e, "command line", 1, 1, "seed.x");
    free(e);
    // An unknown key from the command line is reported like one in the file.
    char *ov5[] = {"train.epoch=3"};
    e = load_bad(full_recipe, 1, ov5, path);
    assert_error_at(e, "command line", 1, 1, "train.epoch");
    assert_contains(e, "did you mean 'epochs'?");
    free(e);
}

// ---- errors in the file -----------------------------------------------------------------------

static void test_errors_name_file_line_column_and_key_path(void **state)
{
    (void)state;
    static const char bad[] = "model:\n"                              // 1
                              "  layers:\n"                           // 2
                              "    - {type: dense, units: 0}\n"       // 3
                              "    - {type: relu, inputs: later}\n"   // 4
                              "    - {type: dence}\n"                 // 5
                              "optimiser:\n"                          // 6
                              "  lr: 0.1\n"                           // 7
                              "train:\n"                              // 8
                              "  epochs: \"10\"\n"                    // 9
                              "  batch_size: 1.5\n"                   // 10
                              "  bogus: 1\n";                         // 11
    char path[64];
    char *e = load_bad(bad, 0, NULL, path);
    assert_error_at(e, path, 3, 28, "model.layers[0].units");
    assert_contains(e, "0 is out of range");
    assert_error_at(e, path, 4, 28, "model.layers[1].inputs");
    assert_contains(e, "no earlier layer is named 'later'");
    assert_error_at(e, path, 5, 14, "model.layers[2].type");
    assert_contains(e, "did you mean 'dense'?");
    assert_error_at(e, path, 6, 1, "optimiser");
    assert_contains(e, "did you mean 'optimizer'?");
    assert_error_at(e, path, 1, 1, "optimizer");  // missing: reported where its parent starts
    assert_contains(e, "missing required key 'optimizer'");
    assert_error_at(e, path, 9, 11, "train.epochs");
    assert_error_at(e, path, 10, 15, "train.batch_size");
    assert_error_at(e, path, 11, 3, "train.bogus");
    assert_int_equal(count_lines(e), 8);  // all of them in one pass, nothing else
    free(e);
}

static void test_more_errors(void **state)
{
    (void)state;
    static const struct {
        const char *yaml;
        int line, col;
        const char *keypath, *text;
    } cases[] = {
        {"model:\n  layers:\n    - {type: dense}\noptimizer: {lr: 1}\n", 3, 7, "model.layers[0].units",
         "missing required key 'units'"},
        {"model:\n  layers:\n    - {type: relu, name: a}\n    - {type: relu, name: a}\noptimizer: {lr: 1}\n", 4, 26,
         "model.layers[1].name", "already used"},
        {"model:\n  layers:\n    - {type: relu, name: input}\noptimizer: {lr: 1}\n", 3, 26, "model.layers[0].name",
         "reserved"},
        {"model:\n  layers: []\noptimizer: {lr: 1}\n", 2, 11, "model.layers", "empty list"},
        {"model:\n  layers: [{type: relu}]\n", 1, 1, "optimizer", "missing required key"},
        {"model:\n  layers: [{type: relu}]\noptimizer: {lr: -1}\n", 3, 17, "optimizer.lr", "out of range"},
        {"model:\n  layers: [{type: relu}]\noptimizer: {lr: 1, nesterov: yes}\n", 3, 30, "optimizer.nesterov",
         "true or false"},
        {"model:\n  layers: [{type: relu}]\noptimizer: {lr: 1, type: sgdd}\n", 3, 26, "optimizer.type",
         "did you mean 'sgd'?"},
        {"model:\n  layers: [{type: relu}]\noptimizer: {lr: 1}\ntrain:\n  target: {metric: accuracy, below: 0.3}\n",
         5, 11, "train.target.below", "use 'above'"},
        {"model:\n  layers: [{type: relu}]\noptimizer: {lr: 1}\ntrain:\n  target: {above: 0.3}\n", 5, 19,
         "train.target.above", "applies only when train.target.metric"},
        {"model:\n  layers: [{type: relu, units: 3}]\noptimizer: {lr: 1}\n", 2, 25, "model.layers[0].units",
         "unknown key"},
        {"model:\n  layers: [{type: relu}]\noptimizer: {lr: 1}\ndata: [1]\n", 4, 7, "data", "expected a mapping"},
        {"- a\n- b\n", 1, 1, "(recipe)", "a recipe is a mapping"},
        {"model:\n  layers: [\n", 3, 1, NULL, NULL},  // YAML syntax: "FILE:L:C: ..." from the parser
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char path[64];
        char *e = load_bad(cases[i].yaml, 0, NULL, path);
        if (cases[i].keypath) {
            assert_error_at(e, path, cases[i].line, cases[i].col, cases[i].keypath);
            assert_contains(e, cases[i].text);
        } else {
            char want[128];
            snprintf(want, sizeof want, "%s:%d:%d: ", path, cases[i].line, cases[i].col);
            if (strncmp(e, want, strlen(want))) fail_msg("case %zu: '%s' does not start with '%s'", i, e, want);
        }
        free(e);
    }
}

static void test_unreadable_file(void **state)
{
    (void)state;
    recipe_t r;
    tl_stream s;
    int rc = recipe_load(&r, "/nonexistent/dir/r.yaml", 0, NULL, tl_stream_open(&s));
    char *e = tl_stream_close(&s);
    recipe_free(&r);
    assert_int_equal(rc, -1);
    if (strncmp(e, "/nonexistent/dir/r.yaml: ", 25) != 0) fail_msg("the message does not start with the file: %s", e);
    assert_contains(e, "cannot read");
    free(e);
}

// A layer that fails to resolve (no usable type) followed by more layers: later layers compare
// their names with it. Run in a child so a crash fails this test instead of the whole file.
static void test_rejected_layer_followed_by_more_layers(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "model:\n  layers:\n    - {type: conv9d}\n    - {type: relu}\noptimizer: {lr: 1}\n",
        "model:\n  layers:\n    - {units: 3}\n    - {type: relu, inputs: input}\noptimizer: {lr: 1}\n",
        "model:\n  layers:\n    - 7\n    - {type: relu}\noptimizer: {lr: 1}\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        fflush(NULL);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            // cmocka catches these signals and goes on with the next test; here they must kill.
            signal(SIGSEGV, SIG_DFL);
            signal(SIGBUS, SIG_DFL);
            signal(SIGILL, SIG_DFL);
            signal(SIGFPE, SIG_DFL);
            signal(SIGABRT, SIG_DFL);
            recipe_t r;
            char *errors = NULL;
            char path[64];
            int rc = tl_recipe_try(&r, bad[i], 0, NULL, &errors, path);
            char want[96];
            snprintf(want, sizeof want, "%s:3:", path);
            int ok = rc == -1 && strstr(errors, want) && strstr(errors, "model.layers[0]") &&
                     count_lines(errors) == 1;
            _exit(ok ? 0 : 3);
        }
        int status = 0;
        assert_int_equal(waitpid(pid, &status, 0), pid);
        if (WIFSIGNALED(status)) fail_msg("case %zu: recipe_load crashed with signal %d", i, WTERMSIG(status));
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
            fail_msg("case %zu: %s (exit status %d)", i,
                     WEXITSTATUS(status) == 3 ? "recipe_load did not report exactly one error, at model.layers[0]"
                                              : "recipe_load failed (a sanitizer report above?)",
                     WEXITSTATUS(status));
    }
}

// ---- emit -------------------------------------------------------------------------------------

// emit -> load -> emit gives the same text, and the reloaded recipe has the same values.
static void round_trip(const char *yaml, int nov, char *const *ov)
{
    recipe_t a, b;
    tl_recipe(&a, yaml, nov, ov);
    char *t1 = emit_text(&a);
    tl_recipe(&b, t1, 0, NULL);
    char *t2 = emit_text(&b);
    if (strcmp(t1, t2)) fail_msg("emit is not a fixed point:\n--- first ---\n%s\n--- second ---\n%s", t1, t2);
    assert_true(recipe_hash(&a) == recipe_hash(&b));
    assert_string_equal(a.name, b.name);
    assert_true(a.seed == b.seed && a.optimizer.lr == b.optimizer.lr && a.optimizer.momentum == b.optimizer.momentum);
    assert_true(a.data.synthetic.noise == b.data.synthetic.noise);
    assert_int_equal(a.model.nlayers, b.model.nlayers);
    for (int i = 0; i < a.model.nlayers; i++) {
        const layer_cfg *x = &a.model.layers[i], *y = &b.model.layers[i];
        assert_ptr_equal(x->kind, y->kind);
        assert_string_equal(x->name, y->name);
        assert_int_equal(x->inputs.n, y->inputs.n);
        for (int j = 0; x->kind->keys[j].name; j++) assert_memory_equal(&x->v[j], &y->v[j], sizeof(gl_value));
    }
    free(t2);
    free(t1);
    recipe_free(&b);
    recipe_free(&a);
}

static void test_emit_round_trips(void **state)
{
    (void)state;
    round_trip(full_recipe, 0, NULL);
    // Awkward values: a name that YAML would read as a bool or number, quotes and backslashes,
    // floats that need 17 digits, every layer kind.
    char *ov[] = {"name='yes \"quoted\" \\ back'", "optimizer.lr=0.30000000000000004", "data.synthetic.noise=1e-7",
                  "optimizer.weight_decay=0.1", "train.target={metric: accuracy, above: 0.95}"};
    round_trip("model:\n  layers:\n    - {type: dense, units: 5}\n    - {type: relu}\n    - {type: leaky_relu, slope: "
               "0.3333333333333333}\n    - {type: tanh}\n    - {type: sigmoid}\n    - {type: gelu, inputs: [dense_0]}\n"
               "optimizer: {lr: 1}\n",
               (int)(sizeof ov / sizeof ov[0]), ov);
    char *ov2[] = {"name=1e3"};
    round_trip(full_recipe, 1, ov2);
    char *ov3[] = {"name=\"tab\\there\\nnewline \\u00e9\""};  // control characters and UTF-8
    round_trip(full_recipe, 1, ov3);
    recipe_t r;
    tl_recipe(&r, full_recipe, 1, ov3);
    assert_string_equal(r.name, "tab\there\nnewline \xc3\xa9");
    recipe_free(&r);
    const char *src = getenv("GALLEY_SRC");
    if (src) {  // the shipped recipes, read as files
        char path[1024];
        snprintf(path, sizeof path, "%s/recipes/quickstart.yaml", src);
        FILE *f = fopen(path, "r");
        if (f) {
            char text[8192];
            size_t n = fread(text, 1, sizeof text - 1, f);
            fclose(f);
            text[n] = 0;
            round_trip(text, 0, NULL);
        }
    }
}

static void test_emit_shows_every_value(void **state)
{
    (void)state;
    recipe_t r;
    tl_recipe(&r, full_recipe, 0, NULL);
    char *t = emit_text(&r);
    // Defaults are written out, values are as given, and so is the layer wiring.
    assert_contains(t, "name: \"demo\"\n");
    assert_contains(t, "seed: 7\n");
    assert_contains(t, "  batch_size: 64\n");
    assert_contains(t, "  momentum: 0.9\n");
    assert_contains(t, "  nesterov: true\n");
    assert_contains(t, "    kind: blobs\n");
    assert_contains(t, "    below: 0.5\n");
    assert_contains(t, "    above: null\n");
    assert_contains(t, "      inputs: [\"hidden\"]\n");
    assert_contains(t, "      init: xavier_uniform\n");
    // Changing a value changes the hash.
    uint64_t h = recipe_hash(&r);
    recipe_free(&r);
    char *ov[] = {"seed=8"};
    tl_recipe(&r, full_recipe, 1, ov);
    assert_true(recipe_hash(&r) != h);
    recipe_free(&r);
    free(t);
}

// ---- reference --------------------------------------------------------------------------------

static void check_reference_section(const char *ref, const key_spec *keys, const char *parent)
{
    for (const key_spec *k = keys; k->name; k++) {
        char path[256], want[300];
        if (*parent) snprintf(path, sizeof path, "%s.%s", parent, k->name);
        else snprintf(path, sizeof path, "%s", k->name);
        snprintf(want, sizeof want, "| `%s` |", path);
        assert_contains(ref, want);
        if (k->doc) assert_contains(ref, k->doc);
        if (k->type == KT_SECTION) check_reference_section(ref, k->children, path);
    }
}

static void test_reference_mentions_every_key_and_layer_kind(void **state)
{
    (void)state;
    tl_stream s;
    recipe_emit_reference(tl_stream_open(&s));
    char *ref = tl_stream_close(&s);
    int top = 0;
    for (const key_spec *k = recipe_schema; k->name; k++, top++) {
        char want[128];
        snprintf(want, sizeof want, "| `%s` |", k->name);
        assert_contains(ref, want);
    }
    assert_true(top >= 6);
    check_reference_section(ref, recipe_schema, "");
    for (int i = 0; i < layer_kind_count(); i++) {
        const layer_kind *lk = layer_kind_at(i);
        char want[128];
        snprintf(want, sizeof want, "- `%s`: ", lk->name);
        assert_contains(ref, want);
        assert_contains(ref, lk->doc);
        for (int j = 0; lk->keys && lk->keys[j].name; j++) {
            snprintf(want, sizeof want, "  - `%s` (", lk->keys[j].name);
            assert_contains(ref, want);
        }
    }
    assert_contains(ref, "| `optimizer.lr` | a number in [0, 1000000] | **required** |");
    assert_contains(ref, "| `train.epochs` | an integer in [1, 1000000000] | `10` |");
    free(ref);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_full_recipe_values),
        cmocka_unit_test(test_minimal_recipe_gets_schema_defaults),
        cmocka_unit_test(test_empty_section_is_all_defaults),
        cmocka_unit_test(test_overrides_are_typed),
        cmocka_unit_test(test_override_errors_point_at_the_command_line),
        cmocka_unit_test(test_errors_name_file_line_column_and_key_path),
        cmocka_unit_test(test_more_errors),
        cmocka_unit_test(test_unreadable_file),
        cmocka_unit_test(test_rejected_layer_followed_by_more_layers),
        cmocka_unit_test(test_emit_round_trips),
        cmocka_unit_test(test_emit_shows_every_value),
        cmocka_unit_test(test_reference_mentions_every_key_and_layer_kind),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
