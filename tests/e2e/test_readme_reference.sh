#!/usr/bin/env bash
# The README's recipe reference must be exactly what the program generates from its schema.
set -euo pipefail
# shellcheck source=tests/e2e/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
need_galley

readme="$GALLEY_SRC/README.md"
begin='<!-- recipe-reference:begin -->'
end='<!-- recipe-reference:end -->'
grep -qF "$begin" "$readme" || fail "README.md lacks the marker $begin"
grep -qF "$end" "$readme" || fail "README.md lacks the marker $end"
sed -n "/^$begin\$/,/^$end\$/p" "$readme" | sed '1d;$d' >"$GL_TMP/readme.md"
run "$GALLEY" help recipe
assert_rc 0
printf '%s\n' "$OUT" >"$GL_TMP/program.md"
if ! diff -u "$GL_TMP/readme.md" "$GL_TMP/program.md" >"$GL_TMP/diff"; then
    cat "$GL_TMP/diff"
    fail "README.md's recipe reference differs from 'galley help recipe'; run ./build.sh docs"
fi
# The reference covers every top-level section and every layer kind the program knows.
for key in name seed data model train optimizer; do
    grep -q "| \`$key\` |" "$GL_TMP/program.md" || fail "reference lacks top-level key $key"
done
info "README reference matches the program ($(wc -l <"$GL_TMP/program.md") lines)"
