// test_ytree.c: the YAML tree: marks, alias copies, merge keys, and every error a recipe can hit.
#include <setjmp.h>  // cmocka needs these three before its header
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "galley/ytree.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

// Loads text that must parse; the test fails with libyaml's message otherwise.
static yt_doc *load_ok(const char *text)
{
    yt_doc *doc = NULL;
    char err[512] = "";
    int rc = yt_load_string(text, "t.yaml", &doc, err, sizeof err);
    if (rc != 0) fail_msg("unexpected error: %s", err);
    assert_non_null(doc);
    return doc;
}

// Loads text that must fail and checks the whole error line.
static void expect_error(const char *text, const char *want)
{
    yt_doc *doc = (yt_doc *)1;
    char err[512] = "";
    assert_int_equal(yt_load_string(text, "t.yaml", &doc, err, sizeof err), -1);
    assert_null(doc);
    assert_string_equal(err, want);
}

// Same, for messages whose tail belongs to libyaml: checks the prefix only.
static void expect_error_prefix(const char *text, const char *want)
{
    yt_doc *doc = (yt_doc *)1;
    char err[512] = "";
    assert_int_equal(yt_load_string(text, "t.yaml", &doc, err, sizeof err), -1);
    assert_null(doc);
    if (strncmp(err, want, strlen(want)) != 0) fail_msg("error '%s' does not start with '%s'", err, want);
}

static void assert_mark(const yt_node *n, int line, int col)
{
    assert_non_null(n);
    assert_string_equal(n->mark.file, "t.yaml");
    assert_int_equal(n->mark.line, line);
    assert_int_equal(n->mark.col, col);
}

static void assert_scalar(const yt_node *n, const char *text, int plain)
{
    assert_non_null(n);
    assert_int_equal(n->kind, YT_SCALAR);
    assert_string_equal(n->text, text);
    assert_int_equal(n->plain, plain);
}

// A temp file holding text; the caller unlinks path.
static void write_temp(char *path, const char *text)
{
    strcpy(path, "/tmp/test_ytree_XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    size_t len = strlen(text);
    assert_int_equal(write(fd, text, len), (ssize_t)len);
    close(fd);
}

// ---- structure and marks --------------------------------------------------------------------

static void test_nested_maps_and_lists_keep_marks(void **state)
{
    (void)state;
    yt_doc *doc = load_ok("model:\n"
                          "  layers:\n"
                          "    - type: conv\n"
                          "      width: 3\n"
                          "    - [1, two]\n"
                          "name: x\n");
    yt_node *root = yt_root(doc);
    assert_int_equal(root->kind, YT_MAP);
    assert_int_equal(root->n, 2);
    assert_mark(root, 1, 1);
    assert_mark(root->keys[0], 1, 1);
    assert_scalar(root->keys[0], "model", 1);
    assert_scalar(root->keys[1], "name", 1);
    assert_mark(root->keys[1], 6, 1);
    assert_null(root->text);

    yt_node *model = yt_map_get(root, "model");
    assert_int_equal(model->kind, YT_MAP);
    assert_mark(model, 2, 3);
    yt_node *layers = yt_map_get(model, "layers");
    assert_int_equal(layers->kind, YT_SEQ);
    assert_null(layers->keys);
    assert_int_equal(layers->n, 2);
    assert_mark(layers, 3, 5);

    yt_node *conv = layers->items[0];
    assert_int_equal(conv->kind, YT_MAP);
    assert_mark(conv, 3, 7);
    assert_mark(conv->keys[0], 3, 7);
    assert_scalar(yt_map_get(conv, "type"), "conv", 1);
    assert_mark(yt_map_get(conv, "type"), 3, 13);
    assert_mark(conv->keys[1], 4, 7);
    assert_mark(yt_map_get(conv, "width"), 4, 14);
    assert_int_equal(yt_map_find(conv, "width"), 1);
    assert_int_equal(yt_map_find(conv, "depth"), -1);
    assert_null(yt_map_get(conv, "depth"));

    yt_node *flow = layers->items[1];
    assert_int_equal(flow->kind, YT_SEQ);
    assert_mark(flow, 5, 7);
    assert_scalar(flow->items[1], "two", 1);
    assert_mark(flow->items[1], 5, 11);

    assert_scalar(yt_map_get(root, "name"), "x", 1);
    assert_null(yt_map_get(layers, "type"));  // not a mapping
    assert_null(yt_map_get(NULL, "type"));
    yt_doc_free(doc);
}

static void test_quoted_and_plain_scalars(void **state)
{
    (void)state;
    yt_doc *doc = load_ok("a: 1\n"
                          "b: \"1\"\n"
                          "c: '1'\n"
                          "d:\n"
                          "e: |\n"
                          "  two\n"
                          "  lines\n"
                          "f: \"x\\ty\"\n"
                          "\"g\": true\n");
    yt_node *root = yt_root(doc);
    assert_scalar(yt_map_get(root, "a"), "1", 1);
    assert_scalar(yt_map_get(root, "b"), "1", 0);
    assert_scalar(yt_map_get(root, "c"), "1", 0);
    assert_scalar(yt_map_get(root, "d"), "", 1);
    assert_mark(yt_map_get(root, "d"), 4, 3);
    assert_scalar(yt_map_get(root, "e"), "two\nlines\n", 0);
    assert_scalar(yt_map_get(root, "f"), "x\ty", 0);
    assert_scalar(root->keys[6], "g", 0);  // a quoted key is still a key
    assert_scalar(yt_map_get(root, "g"), "true", 1);
    yt_doc_free(doc);
}

static void test_empty_document_is_empty_map(void **state)
{
    (void)state;
    const char *empties[] = {"", "# only a comment\n", "---\n", "\n\n"};
    for (size_t i = 0; i < sizeof empties / sizeof *empties; i++) {
        yt_doc *doc = load_ok(empties[i]);
        yt_node *root = yt_root(doc);
        assert_int_equal(root->kind, YT_MAP);
        assert_int_equal(root->n, 0);
        assert_string_equal(root->mark.file, "t.yaml");
        yt_doc_free(doc);
    }
}

static void test_non_map_root_is_kept(void **state)
{
    (void)state;
    yt_doc *doc = load_ok("- 1\n- 2\n");
    assert_int_equal(yt_root(doc)->kind, YT_SEQ);
    yt_doc_free(doc);
    doc = load_ok("\"\"\n");  // a quoted empty string is a value, not an empty document
    assert_scalar(yt_root(doc), "", 0);
    yt_doc_free(doc);
}

// ---- anchors and aliases ----------------------------------------------------------------------

static void test_alias_uses_are_independent_copies(void **state)
{
    (void)state;
    yt_doc *doc = load_ok("base: &b {lr: 0.1, layers: [1, 2]}\n"
                          "x: *b\n"
                          "y: *b\n"
                          "s: &s hello\n"
                          "t: *s\n");
    yt_node *root = yt_root(doc);
    yt_node *base = yt_map_get(root, "base"), *x = yt_map_get(root, "x"), *y = yt_map_get(root, "y");
    assert_true(base != x && x != y && base != y);
    assert_true(yt_map_get(x, "layers") != yt_map_get(y, "layers"));
    assert_true(yt_map_get(x, "layers")->items[0] != yt_map_get(y, "layers")->items[0]);
    assert_scalar(yt_map_get(y, "lr"), "0.1", 1);
    // A copy keeps the marks of the anchored original: the alias itself has no node in libyaml.
    assert_mark(x, 1, 7);
    assert_mark(yt_map_get(x, "lr"), 1, 15);

    yt_mark cli = {yt_intern(doc, "<command line>"), 1, 1};
    yt_map_set(doc, x, "lr", yt_new_scalar(doc, "0.5", 1, cli), cli);
    yt_seq_set(yt_map_get(x, "layers"), 0, yt_new_scalar(doc, "9", 1, cli));
    assert_scalar(yt_map_get(x, "lr"), "0.5", 1);
    assert_scalar(yt_map_get(x, "layers")->items[0], "9", 1);
    assert_scalar(yt_map_get(y, "lr"), "0.1", 1);
    assert_scalar(yt_map_get(base, "lr"), "0.1", 1);
    assert_scalar(yt_map_get(y, "layers")->items[0], "1", 1);
    assert_scalar(yt_map_get(base, "layers")->items[0], "1", 1);

    assert_true(yt_map_get(root, "s") != yt_map_get(root, "t"));
    assert_scalar(yt_map_get(root, "t"), "hello", 1);
    yt_doc_free(doc);
}

static void test_recursive_alias_is_an_error(void **state)
{
    (void)state;
    // The mark and the key path are the anchored node's, not the alias's.
    expect_error("a: &a [*a]\n",
                 "t.yaml:1:4: error: a: recursive alias: this anchored node contains an alias to itself");
    expect_error("x: 1\na: &a\n  b:\n    c: *a\n",
                 "t.yaml:2:4: error: a: recursive alias: this anchored node contains an alias to itself");
    expect_error("x:\n  y: &a\n    - z: [1, *a]\n",
                 "t.yaml:2:6: error: x.y: recursive alias: this anchored node contains an alias to itself");
}

static void test_alias_bomb_is_an_error(void **state)
{
    (void)state;
    // "Billion laughs": nine levels of ten aliases each would expand to 10^9 nodes.
    char text[2048];
    int k = snprintf(text, sizeof text, "a: &a [1,1,1,1,1,1,1,1,1,1]\n");
    for (char c = 'b'; c <= 'i'; c++) {
        k += snprintf(text + k, sizeof text - (size_t)k, "%c: &%c [", c, c);
        for (int i = 0; i < 10; i++) k += snprintf(text + k, sizeof text - (size_t)k, "%s*%c", i ? "," : "", c - 1);
        k += snprintf(text + k, sizeof text - (size_t)k, "]\n");
    }
    expect_error(text, "t.yaml:6:4: error: f: document too large after expanding aliases (more than 1000000 nodes)");
}

// prefix, then n '[', then inner, then n ']', then suffix; the caller frees it.
static char *nest(const char *prefix, size_t n, const char *inner, const char *suffix)
{
    size_t lp = strlen(prefix), li = strlen(inner), ls = strlen(suffix);
    char *text = malloc(lp + 2 * n + li + ls + 1);
    assert_non_null(text);
    memcpy(text, prefix, lp);
    memset(text + lp, '[', n);
    memcpy(text + lp + n, inner, li);
    memset(text + lp + n + li, ']', n);
    memcpy(text + lp + 2 * n + li, suffix, ls + 1);
    return text;
}

static void test_deep_nesting_is_an_error(void **state)
{
    (void)state;
    // libyaml itself accepts this; we stop at 200 levels before recursing through it. A key
    // path this deep keeps its first ten steps and its last two.
    const char *too_deep = "nesting too deep (more than 200 levels)";
    char want[256];
    char *text = nest("", 20000, "", "\n");
    snprintf(want, sizeof want, "t.yaml:1:201: error: [0][0][0][0][0][0][0][0][0][0]...[0][0]: %s", too_deep);
    expect_error(text, want);
    free(text);
    text = nest("", 200, "1", "\n");  // the scalar is level 201
    snprintf(want, sizeof want, "t.yaml:1:201: error: [0][0][0][0][0][0][0][0][0][0]...[0][0]: %s", too_deep);
    expect_error(text, want);
    free(text);
    text = nest("a:\n  b:\n    c: ", 198, "1", "\n");  // c's list is level 4, so col 8 + 197 is level 201
    snprintf(want, sizeof want, "t.yaml:3:205: error: a.b.c[0][0][0][0][0][0][0]...[0][0]: %s", too_deep);
    expect_error(text, want);
    free(text);
    text = nest("", 199, "1", "\n");  // exactly 200 levels
    yt_doc_free(load_ok(text));
    free(text);

    // Depth reached through an alias counts where the copy lands, and the key path is there;
    // the mark is the anchor's (libyaml keeps no mark for an alias).
    char *inner = nest("a: &a ", 150, "", "\nb: ");
    text = nest(inner, 60, "*a", "\n");
    snprintf(want, sizeof want, "t.yaml:1:4: error: b[0][0][0][0][0][0][0][0][0]...[0][0]: %s", too_deep);
    expect_error(text, want);
    free(text);
    free(inner);
}

static void test_undefined_alias_is_an_error(void **state)
{
    (void)state;
    expect_error("a: 1\nb: *nope\n", "t.yaml:2:4: error: b: found undefined alias");
    expect_error("m:\n  x: [1, *nope]\n", "t.yaml:2:10: error: m.x[1]: found undefined alias");
    expect_error("m:\n  - *nope\n", "t.yaml:2:5: error: m[0]: found undefined alias");
}

static void test_duplicate_anchor_is_an_error(void **state)
{
    (void)state;
    expect_error("a: &x 1\nb:\n  c: &x 2\n", "t.yaml:3:6: error: b.c: duplicate anchor (first at line 1, column 4)");
}

// ---- merge keys ------------------------------------------------------------------------------------

static void test_merge_single_mapping(void **state)
{
    (void)state;
    yt_doc *doc = load_ok("base: &b {a: 1, b: 2}\n"
                          "m:\n"
                          "  <<: *b\n"
                          "  b: 3\n"
                          "  c: 4\n");
    yt_node *m = yt_map_get(yt_root(doc), "m");
    assert_int_equal(m->n, 3);
    assert_int_equal(yt_map_find(m, "<<"), -1);
    // Merged pairs take the place of `<<`; explicit keys win and keep their place.
    assert_string_equal(m->keys[0]->text, "a");
    assert_string_equal(m->keys[1]->text, "b");
    assert_string_equal(m->keys[2]->text, "c");
    assert_scalar(yt_map_get(m, "a"), "1", 1);
    assert_scalar(yt_map_get(m, "b"), "3", 1);
    assert_scalar(yt_map_get(m, "c"), "4", 1);
    // A merged pair keeps the marks where it was written.
    assert_mark(m->keys[0], 1, 11);
    assert_mark(yt_map_get(m, "a"), 1, 14);
    assert_mark(m->keys[1], 4, 3);
    assert_mark(m, 3, 3);

    // Merged values are copies too.
    yt_mark cli = {"<command line>", 0, 0};
    yt_map_set(doc, m, "a", yt_new_scalar(doc, "7", 1, cli), cli);
    assert_scalar(yt_map_get(yt_map_get(yt_root(doc), "base"), "a"), "1", 1);
    yt_doc_free(doc);
}

static void test_merge_explicit_key_after_merge_wins(void **state)
{
    (void)state;
    yt_doc *doc = load_ok("m:\n"
                          "  <<: {a: 1, b: 2}\n"
                          "  a: 0\n");
    yt_node *m = yt_map_get(yt_root(doc), "m");
    assert_int_equal(m->n, 2);
    assert_string_equal(m->keys[0]->text, "b");
    assert_string_equal(m->keys[1]->text, "a");
    assert_scalar(yt_map_get(m, "a"), "0", 1);
    yt_doc_free(doc);
}

static void test_merge_list_earlier_sources_win(void **state)
{
    (void)state;
    yt_doc *doc = load_ok("one: &one {a: 1, b: 1}\n"
                          "two: &two {b: 2, c: 2, d: 2}\n"
                          "m:\n"
                          "  c: 0\n"
                          "  <<: [*one, *two]\n");
    yt_node *m = yt_map_get(yt_root(doc), "m");
    assert_int_equal(m->n, 4);
    assert_string_equal(m->keys[0]->text, "c");
    assert_string_equal(m->keys[1]->text, "a");
    assert_string_equal(m->keys[2]->text, "b");
    assert_string_equal(m->keys[3]->text, "d");
    assert_scalar(yt_map_get(m, "c"), "0", 1);
    assert_scalar(yt_map_get(m, "a"), "1", 1);
    assert_scalar(yt_map_get(m, "b"), "1", 1);
    assert_scalar(yt_map_get(m, "d"), "2", 1);
    yt_doc_free(doc);

    doc = load_ok("m: {<<: []}\n");  // an empty list merges nothing
    assert_int_equal(yt_map_get(yt_root(doc), "m")->n, 0);
    yt_doc_free(doc);
}

static void test_merge_nested(void **state)
{
    (void)state;
    yt_doc *doc = load_ok("a: &a {x: 1, y: 0}\n"
                          "b: &b\n"
                          "  <<: *a\n"
                          "  y: 2\n"
                          "c:\n"
                          "  deep:\n"
                          "    <<: *b\n"
                          "    z: 3\n"
                          "    inner:\n"
                          "      <<: *a\n");
    yt_node *root = yt_root(doc);
    yt_node *deep = yt_map_get(yt_map_get(root, "c"), "deep");
    assert_int_equal(deep->n, 4);
    assert_scalar(yt_map_get(deep, "x"), "1", 1);
    assert_scalar(yt_map_get(deep, "y"), "2", 1);
    assert_scalar(yt_map_get(deep, "z"), "3", 1);
    assert_int_equal(yt_map_find(deep, "<<"), -1);
    yt_node *inner = yt_map_get(deep, "inner");
    assert_int_equal(inner->n, 2);
    assert_scalar(yt_map_get(inner, "y"), "0", 1);
    assert_int_equal(yt_map_get(root, "b")->n, 2);
    assert_true(yt_map_get(deep, "x") != yt_map_get(yt_map_get(root, "a"), "x"));
    yt_doc_free(doc);
}

static void test_merge_quoted_key_is_an_ordinary_key(void **state)
{
    (void)state;
    yt_doc *doc = load_ok("m:\n  \"<<\": {a: 1}\n");
    yt_node *m = yt_map_get(yt_root(doc), "m");
    assert_int_equal(m->n, 1);
    assert_int_equal(yt_map_get(m, "<<")->kind, YT_MAP);
    yt_doc_free(doc);
}

static void test_merge_bad_value_is_an_error(void **state)
{
    (void)state;
    // The key path is the mapping that holds the `<<`.
    expect_error("a: 1\nm:\n  <<: 5\n",
                 "t.yaml:3:3: error: m: merge key '<<' expects a mapping or a list of mappings, found a scalar ('5')");
    expect_error("x: &x {a: 1}\nm:\n  <<: [*x, [1]]\n",
                 "t.yaml:3:3: error: m: merge key '<<' expects a mapping or a list of mappings, found a list whose "
                 "item 2 is a list");
    expect_error("m:\n  <<:\n",
                 "t.yaml:2:3: error: m: merge key '<<' expects a mapping or a list of mappings, found an empty value");
    expect_error("x: &x {a: 1}\nm:\n  <<: *x\n  <<: *x\n",
                 "t.yaml:4:3: error: m: duplicate key '<<' (first at line 3, column 3); to merge several mappings "
                 "write <<: [*a, *b]");
    expect_error("<<: 5\n",
                 "t.yaml:1:1: error: (recipe): merge key '<<' expects a mapping or a list of mappings, found a "
                 "scalar ('5')");
    expect_error("model:\n  layers:\n    - {<<: [1]}\n",
                 "t.yaml:3:8: error: model.layers[0]: merge key '<<' expects a mapping or a list of mappings, found a "
                 "list whose item 1 is a scalar ('1')");
    // An error inside a merge source is at the source, under `<<`.
    expect_error("m: {<<: {a: 1, a: 2}}\n",
                 "t.yaml:1:16: error: m.<<.a: duplicate key 'a' (first at line 1, column 10)");
    expect_error("x: &x {a: 1}\nm:\n  <<: [*x, {b: 1, b: 2}]\n",
                 "t.yaml:3:19: error: m.<<[1].b: duplicate key 'b' (first at line 3, column 13)");
}

// ---- key errors ---------------------------------------------------------------------------------

static void test_duplicate_key_names_both_positions(void **state)
{
    (void)state;
    // The key path is the duplicated key's, the mark its second occurrence.
    expect_error("a: 1\nb: 2\na: 3\n", "t.yaml:3:1: error: a: duplicate key 'a' (first at line 1, column 1)");
    expect_error("model:\n  width: 1\n  depth: 2\n  width: 3\n",
                 "t.yaml:4:3: error: model.width: duplicate key 'width' (first at line 2, column 3)");
    expect_error("m: {a: 1, \"a\": 2}\n", "t.yaml:1:11: error: m.a: duplicate key 'a' (first at line 1, column 5)");
    // In a list item, block and flow.
    expect_error("model:\n"
                 "  layers:\n"
                 "    - {type: relu}\n"
                 "    - {type: dense, units: 3, units: 4}\n",
                 "t.yaml:4:31: error: model.layers[1].units: duplicate key 'units' (first at line 4, column 21)");
    expect_error("model:\n"
                 "  layers:\n"
                 "    - type: relu\n"
                 "    - type: dense\n"
                 "      units: 3\n"
                 "      units: 4\n",
                 "t.yaml:6:7: error: model.layers[1].units: duplicate key 'units' (first at line 5, column 7)");
    // In an anchored mapping, the error is found at the original, which comes before any alias.
    expect_error("base: &b {a: 1, a: 2}\nuse: *b\n",
                 "t.yaml:1:17: error: base.a: duplicate key 'a' (first at line 1, column 11)");
    // Many keys: the set grows past its first size.
    char text[4096];
    int k = 0;
    for (int i = 0; i < 100; i++) k += snprintf(text + k, sizeof text - (size_t)k, "k%d: %d\n", i, i);
    snprintf(text + k, sizeof text - (size_t)k, "k42: again\n");
    expect_error(text, "t.yaml:101:1: error: k42: duplicate key 'k42' (first at line 43, column 1)");
}

static void test_non_scalar_key_is_an_error(void **state)
{
    (void)state;
    expect_error("? [1, 2]\n: x\n", "t.yaml:1:3: error: (recipe): mapping keys must be plain strings, found a list");
    expect_error("{a: 1}: x\n", "t.yaml:1:1: error: (recipe): mapping keys must be plain strings, found a mapping");
    expect_error("m:\n  ? [1]\n  : x\n", "t.yaml:2:5: error: m: mapping keys must be plain strings, found a list");
}

// ---- syntax errors ---------------------------------------------------------------------------------

static void test_malformed_yaml_reports_line_and_column(void **state)
{
    (void)state;
    // Bad indentation.
    expect_error("a:\n  - 1\n b: 2\n",
                 "t.yaml:3:2: error: (recipe): did not find expected key (while parsing a block mapping at line 1, "
                 "column 1)");
    expect_error("a: 1\n  b: 2\n", "t.yaml:2:4: error: (recipe): mapping values are not allowed in this context");
    // Unclosed quote: libyaml stops at the end and names where the quote opened.
    expect_error("a: \"abc\nb: 1\n",
                 "t.yaml:3:1: error: a: found unexpected end of stream (while scanning a quoted scalar at line 1, "
                 "column 4)");
    // A tab used for indentation gets a hint.
    expect_error("a:\n\tb: 1\n", "t.yaml:2:1: error: a: found character that cannot start any token (while scanning "
                                 "for the next token); tab characters cannot indent YAML; use spaces");
    // Bytes that are not UTF-8.
    expect_error_prefix("a: 1\nb: x\xff\n", "t.yaml:2:5: error: b: invalid ");
    expect_error_prefix("model:\n  name: x\xff\n", "t.yaml:2:10: error: model.name: invalid ");
    // Error text is cut to the buffer and stays terminated.
    yt_doc *doc = NULL;
    char small[8];
    assert_int_equal(yt_load_string("a: 1\na: 2\n", "t.yaml", &doc, small, sizeof small), -1);
    assert_string_equal(small, "t.yaml:");
    assert_int_equal(yt_load_string("a: 1\na: 2\n", "t.yaml", &doc, NULL, 0), -1);
    assert_null(doc);
}

// libyaml's loader leaves no tree on a syntax error; the key path comes from a second pass.
static void test_syntax_error_key_path_at_depth(void **state)
{
    (void)state;
    // A key indented deeper than its siblings in the third layer: the value of `type` ended on
    // its own line, so the error belongs to the layer.
    expect_error("model:\n"
                 "  layers:\n"
                 "    - {type: dense, units: 16}\n"
                 "    - {type: relu}\n"
                 "    - type: dense\n"
                 "       units: 3\n"
                 "optimizer:\n"
                 "  lr: 0.1\n",
                 "t.yaml:6:13: error: model.layers[2]: mapping values are not allowed in this context");
    // A key with no value on its line, then a bad line: the error is in that key's value.
    expect_error("train:\n  epochs: 5\n  batch_size\noptimizer: 1\n",
                 "t.yaml:4:1: error: train: could not find expected ':' (while scanning a simple key at line 3, "
                 "column 3)");
    expect_error("model:\n"
                 "  layers:\n"
                 "\t- {type: dense, units: 3}\n",
                 "t.yaml:3:1: error: model.layers: found character that cannot start any token (while scanning for the "
                 "next token); tab characters cannot indent YAML; use spaces");
    // Unclosed quotes at several depths: in a list item, in a key of a list item, in a flow mapping.
    expect_error("name: \"spirals\nseed: 3\n",
                 "t.yaml:3:1: error: name: found unexpected end of stream (while scanning a quoted scalar at line 1, "
                 "column 7)");
    expect_error("model:\n  layers:\n    - a\n    - \"abc\n",
                 "t.yaml:5:1: error: model.layers[1]: found unexpected end of stream (while scanning a quoted scalar "
                 "at line 4, column 7)");
    expect_error("model:\n  layers:\n    - type: dense\n      name: \"abc\n",
                 "t.yaml:5:1: error: model.layers[0].name: found unexpected end of stream (while scanning a quoted "
                 "scalar at line 4, column 13)");
    expect_error("m: {a: 1, b: 'x}\n",
                 "t.yaml:2:1: error: m.b: found unexpected end of stream (while scanning a quoted scalar at line 1, "
                 "column 14)");
    // Unclosed flow lists: the path is the list, not an item after its last one.
    expect_error("model:\n"
                 "  layers: [{type: dense, units: 16}, {type: relu}, {type: dense, units: 3}\n"
                 "optimizer:\n"
                 "  lr: 0.1\n",
                 "t.yaml:3:1: error: model.layers: did not find expected ',' or ']' (while parsing a flow sequence at "
                 "line 2, column 11)");
    expect_error("a:\n  b:\n    c: [1, 2\n",
                 "t.yaml:4:1: error: a.b.c: did not find expected ',' or ']' (while parsing a flow sequence at line 3, "
                 "column 8)");
    expect_error("model:\n  layers:\n    - {type: dense, units: [1, 2}\n",
                 "t.yaml:3:33: error: model.layers[0].units: did not find expected ',' or ']' (while parsing a flow "
                 "sequence at line 3, column 28)");
    // A missing value in a flow mapping; a tab inside a list.
    expect_error("x: {a: 1, b: ]}\n",
                 "t.yaml:1:14: error: x.b: did not find expected node content (while parsing a flow node)");
    expect_error_prefix("x:\n  - a\n  -\t- b\n", "t.yaml:3:4: error: x[1]: ");
    // A syntax error in a second document has the path inside that document.
    expect_error("a: 1\n---\nb:\n  c: [\n",
                 "t.yaml:5:1: error: b.c[0]: did not find expected node content (while parsing a flow node)");
}

// yt_load_value leaves the placing to its caller.
static void test_load_value_error_is_message_only(void **state)
{
    (void)state;
    yt_doc *doc = (yt_doc *)1;
    char err[512] = "";
    assert_int_equal(yt_load_value("[unclosed", "<command line>", &doc, err, sizeof err), -1);
    assert_null(doc);
    assert_string_equal(err, "did not find expected ',' or ']' (while parsing a flow sequence at line 1, column 1)");
    assert_int_equal(yt_load_value("{a: 1, a: 2}", "<command line>", &doc, err, sizeof err), -1);
    assert_string_equal(err, "duplicate key 'a' (first at line 1, column 2)");
    assert_int_equal(yt_load_value("[1, 2]", "<command line>", &doc, err, sizeof err), 0);
    assert_int_equal(yt_root(doc)->n, 2);
    assert_string_equal(yt_root(doc)->mark.file, "<command line>");
    yt_doc_free(doc);
}

static void test_second_document_is_an_error(void **state)
{
    (void)state;
    expect_error("a: 1\n---\nb: 2\n", "t.yaml:2:1: error: (recipe): only one YAML document is allowed per recipe");
    expect_error("---\na: 1\n...\n---\n", "t.yaml:4:1: error: (recipe): only one YAML document is allowed per recipe");
    // An explicit end marker alone is fine.
    yt_doc *doc = load_ok("a: 1\n...\n");
    yt_doc_free(doc);
    // A syntax error in the second document is still reported as such.
    expect_error_prefix("a: 1\n---\nb: [\n", "t.yaml:4:1: error: b[0]: did not find expected node content");
}

// ---- files ---------------------------------------------------------------------------------------------

static void test_load_file(void **state)
{
    (void)state;
    char path[64];
    write_temp(path, "name: demo\nsteps: [1, 2]\n");
    yt_doc *doc = NULL;
    char err[512] = "";
    assert_int_equal(yt_load_file(path, &doc, err, sizeof err), 0);
    yt_node *steps = yt_map_get(yt_root(doc), "steps");
    assert_int_equal(steps->n, 2);
    assert_string_equal(steps->mark.file, path);
    assert_int_equal(steps->mark.line, 2);
    assert_int_equal(steps->mark.col, 8);
    yt_doc_free(doc);

    // Errors from a file name the file.
    FILE *f = fopen(path, "w");
    fputs("a: 1\na: 2\n", f);
    fclose(f);
    assert_int_equal(yt_load_file(path, &doc, err, sizeof err), -1);
    assert_null(doc);
    char want[256];
    snprintf(want, sizeof want, "%s:2:1: error: a: duplicate key 'a' (first at line 1, column 1)", path);
    assert_string_equal(err, want);

    // An empty file is an empty mapping.
    f = fopen(path, "w");
    fclose(f);
    assert_int_equal(yt_load_file(path, &doc, err, sizeof err), 0);
    assert_int_equal(yt_root(doc)->kind, YT_MAP);
    assert_int_equal(yt_root(doc)->n, 0);
    yt_doc_free(doc);
    unlink(path);
}

static void test_unreadable_file(void **state)
{
    (void)state;
    char path[64];
    write_temp(path, "a: 1\n");
    unlink(path);
    yt_doc *doc = (yt_doc *)1;
    char err[512] = "", want[256];
    assert_int_equal(yt_load_file(path, &doc, err, sizeof err), -1);
    assert_null(doc);
    snprintf(want, sizeof want, "%s: error: cannot read: No such file or directory", path);
    assert_string_equal(err, want);

    char dir[64];
    strcpy(dir, "/tmp/test_ytree_dir_XXXXXX");
    assert_non_null(mkdtemp(dir));
    doc = (yt_doc *)1;
    assert_int_equal(yt_load_file(dir, &doc, err, sizeof err), -1);
    assert_null(doc);
    snprintf(want, sizeof want, "%s: error: cannot read: Is a directory", dir);
    assert_string_equal(err, want);
    rmdir(dir);
}

// ---- mutation -------------------------------------------------------------------------------------

static void test_map_set_replaces_and_appends(void **state)
{
    (void)state;
    yt_doc *doc = load_ok("train:\n  lr: 0.1\n  steps: 10\n");
    yt_node *train = yt_map_get(yt_root(doc), "train");
    yt_mark cli = {yt_intern(doc, "<command line>"), 1, 7};
    assert_ptr_equal(cli.file, yt_intern(doc, "<command line>"));  // interned once
    assert_ptr_equal(yt_intern(doc, "t.yaml"), train->mark.file);

    // Replacing keeps the key (and its mark) and the order.
    yt_map_set(doc, train, "lr", yt_new_scalar(doc, "0.01", 1, cli), cli);
    assert_int_equal(train->n, 2);
    assert_int_equal(yt_map_find(train, "lr"), 0);
    assert_mark(train->keys[0], 2, 3);
    assert_scalar(yt_map_get(train, "lr"), "0.01", 1);
    assert_string_equal(yt_map_get(train, "lr")->mark.file, "<command line>");

    // Appending adds a plain key with the given mark, many times over.
    yt_map_set(doc, train, "seed", yt_new_scalar(doc, "7", 0, cli), cli);
    assert_int_equal(train->n, 3);
    assert_scalar(train->keys[2], "seed", 1);
    assert_int_equal(train->keys[2]->mark.col, 7);
    assert_scalar(yt_map_get(train, "seed"), "7", 0);
    char key[16];
    for (int i = 0; i < 100; i++) {
        snprintf(key, sizeof key, "k%d", i);
        yt_map_set(doc, train, key, yt_new_scalar(doc, key, 1, cli), cli);
    }
    assert_int_equal(train->n, 103);
    for (int i = 0; i < 100; i++) {
        snprintf(key, sizeof key, "k%d", i);
        assert_int_equal(yt_map_find(train, key), i + 3);
        assert_scalar(yt_map_get(train, key), key, 1);
    }
    assert_scalar(yt_map_get(train, "steps"), "10", 1);

    // A new mapping built from nothing, then hung into the tree.
    yt_node *opt = yt_new_map(doc, cli);
    assert_int_equal(opt->kind, YT_MAP);
    assert_int_equal(opt->n, 0);
    assert_null(yt_map_get(opt, "x"));
    yt_map_set(doc, opt, "name", yt_new_scalar(doc, "adam", 1, cli), cli);
    yt_map_set(doc, yt_root(doc), "optim", opt, cli);
    assert_scalar(yt_map_get(yt_map_get(yt_root(doc), "optim"), "name"), "adam", 1);
    assert_null(yt_new_scalar(doc, "z", 1, cli)->items);
    yt_doc_free(doc);
}

static void test_seq_set_replaces_item(void **state)
{
    (void)state;
    yt_doc *doc = load_ok("dims: [8, 16, 32]\n");
    yt_node *dims = yt_map_get(yt_root(doc), "dims");
    yt_mark cli = {"<command line>", 1, 1};
    yt_seq_set(dims, 2, yt_new_scalar(doc, "64", 1, cli));
    assert_int_equal(dims->n, 3);
    assert_scalar(dims->items[0], "8", 1);
    assert_scalar(dims->items[2], "64", 1);
    assert_int_equal(dims->items[2]->mark.line, 1);
    yt_doc_free(doc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nested_maps_and_lists_keep_marks),
        cmocka_unit_test(test_quoted_and_plain_scalars),
        cmocka_unit_test(test_empty_document_is_empty_map),
        cmocka_unit_test(test_non_map_root_is_kept),
        cmocka_unit_test(test_alias_uses_are_independent_copies),
        cmocka_unit_test(test_recursive_alias_is_an_error),
        cmocka_unit_test(test_alias_bomb_is_an_error),
        cmocka_unit_test(test_deep_nesting_is_an_error),
        cmocka_unit_test(test_undefined_alias_is_an_error),
        cmocka_unit_test(test_duplicate_anchor_is_an_error),
        cmocka_unit_test(test_merge_single_mapping),
        cmocka_unit_test(test_merge_explicit_key_after_merge_wins),
        cmocka_unit_test(test_merge_list_earlier_sources_win),
        cmocka_unit_test(test_merge_nested),
        cmocka_unit_test(test_merge_quoted_key_is_an_ordinary_key),
        cmocka_unit_test(test_merge_bad_value_is_an_error),
        cmocka_unit_test(test_duplicate_key_names_both_positions),
        cmocka_unit_test(test_non_scalar_key_is_an_error),
        cmocka_unit_test(test_malformed_yaml_reports_line_and_column),
        cmocka_unit_test(test_syntax_error_key_path_at_depth),
        cmocka_unit_test(test_load_value_error_is_message_only),
        cmocka_unit_test(test_second_document_is_an_error),
        cmocka_unit_test(test_load_file),
        cmocka_unit_test(test_unreadable_file),
        cmocka_unit_test(test_map_set_replaces_and_appends),
        cmocka_unit_test(test_seq_set_replaces_item),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
