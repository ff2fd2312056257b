#!/usr/bin/env bash
# tests/run.sh BUILD_DIR [BUILD_DIR...]: run each build's ctest suite and sum up.
#
# A build configured with -DGALLEY_SANITIZE=ON runs with ASAN_OPTIONS/UBSAN_OPTIONS set.
# The last line of output is always `N passed, N failed, N skipped` (all build dirs together).
# Exit 1 when a test failed (a test that could not run counts as failed) or none passed, else 0.
# GALLEY_TEST_JOBS sets ctest's -j (default 2).
set -uo pipefail

if [[ $# -lt 1 ]]; then
    echo "usage: $0 BUILD_DIR [BUILD_DIR...]" >&2
    echo "0 passed, 0 failed, 0 skipped"
    exit 1
fi

jobs=${GALLEY_TEST_JOBS:-2}
passed=0
failed=0
skipped=0
failed_names=()
log=$(mktemp)
trap 'rm -f "$log"' EXIT

# is_sanitize DIR: 0 when DIR is a sanitizer build.
is_sanitize() {
    local dir=$1
    if [[ -r $dir/galley-build-info.txt ]]; then
        grep -q '^sanitize=1$' "$dir/galley-build-info.txt"
    else
        grep -qE '^GALLEY_SANITIZE:BOOL=(ON|1|TRUE|YES)$' "$dir/CMakeCache.txt" 2>/dev/null
    fi
}

re_result='^[[:space:]]*[0-9]+/[0-9]+ Test +#[0-9]+: ([^ ]+) '
re_passed='[ .]Passed +[0-9.]+ sec$'
re_skipped='\*\*\*(Skipped|Not Run \(Disabled\)) +[0-9.]+ sec$'

for dir in "$@"; do
    echo
    if [[ -d $dir ]] && is_sanitize "$dir"; then
        echo "== tests: sanitizer build (ASan+UBSan)"
        san=1
    else
        echo "== tests: release build"
        san=0
    fi
    echo "   build dir: $dir"
    if [[ ! -f $dir/CTestTestfile.cmake ]]; then
        echo "tests/run.sh: $dir is not a configured build directory" >&2
        failed=$((failed + 1))
        failed_names+=("$dir: not a build directory")
        continue
    fi

    if [[ $san == 1 ]]; then
        ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 \
        UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
            ctest --test-dir "$dir" --output-on-failure -j"$jobs" 2>&1 | tee "$log"
        rc=${PIPESTATUS[0]}
    else
        ctest --test-dir "$dir" --output-on-failure -j"$jobs" 2>&1 | tee "$log"
        rc=${PIPESTATUS[0]}
    fi

    p=0 f=0 s=0
    while IFS= read -r line; do
        [[ $line =~ $re_result ]] || continue
        name=${BASH_REMATCH[1]}
        if [[ $line =~ $re_passed ]]; then
            p=$((p + 1))
        elif [[ $line =~ $re_skipped ]]; then
            s=$((s + 1))
        else
            f=$((f + 1))
            failed_names+=("$dir: $name")
        fi
    done <"$log"
    if [[ $rc -ne 0 && $f -eq 0 ]]; then
        echo "tests/run.sh: ctest exited $rc in $dir without a failed test" >&2
        f=1
        failed_names+=("$dir: ctest exited $rc")
    fi
    echo "-- $dir: $p passed / $f failed / $s skipped"
    passed=$((passed + p))
    failed=$((failed + f))
    skipped=$((skipped + s))
done

echo
if [[ ${#failed_names[@]} -gt 0 ]]; then
    echo "failed:"
    printf '  %s\n' "${failed_names[@]}"
fi
status=0
if [[ $failed -gt 0 ]]; then
    status=1
elif [[ $passed -eq 0 ]]; then
    echo "tests/run.sh: no test ran (none passed)"
    status=1
fi
echo "$passed passed, $failed failed, $skipped skipped"
exit "$status"
