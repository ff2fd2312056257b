#!/usr/bin/env bash
# test_data_synth_h5py.sh: `galley data synth` files read by a real reader (h5py): dataset names,
# dtypes, shapes, layouts and attributes as h5data.h documents them; cosmo3d counts are int16 and
# log1p of them is close to the generator's values; per_file writes DeepCAM-style sample files;
# the output appears atomically; bad arguments exit 2.
# h5py comes from PyPI into a venv under $GALLEY_BUILD (kept between runs); skipped (77) only
# when PyPI cannot be reached.
set -euo pipefail
# shellcheck source=tests/e2e/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
need_galley
need_cmd python3

# shellcheck source=tests/e2e/lib/py.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/py.sh"
need_pyenv  # PY: a Python with h5py

cd "$GL_TMP"
for kind in spirals shapes2d cosmo3d climate2d nbody3d; do
    run "$GALLEY" data synth "$kind" "$kind.h5" n=6 size=12 seed=5 compress=4
    assert_rc 0
    assert_contains "$OUT" "wrote $kind.h5"
done
run "$GALLEY" data synth climate2d deepcam n=3 size=8 channels=4 per_file=true
assert_rc 0
run ls "$GL_TMP"
assert_not_contains "$OUT" "tmp"

cat >check.py <<'EOF'
import h5py, numpy as np, glob
def s(v): return v.decode() if isinstance(v, bytes) else str(v)
def check(path, name, dtype, shape):
    with h5py.File(path, "r") as f:
        d = f[name]
        assert d.dtype == np.dtype(dtype), (path, name, d.dtype, dtype)
        assert d.shape == shape, (path, name, d.shape, shape)
        return d[...], dict(f.attrs)
x, a = check("spirals.h5", "x", "<f4", (6, 2)); check("spirals.h5", "y", "<i4", (6,))
x, a = check("shapes2d.h5", "x", "<f4", (6, 3, 12, 12)); y, _ = check("shapes2d.h5", "y", "<i4", (6,))
assert y.min() >= 0 and y.max() < 3
x, a = check("cosmo3d.h5", "x", "<i2", (6, 4, 12, 12, 12)); check("cosmo3d.h5", "y", "<f4", (6, 4))
assert s(a["galley_transform"]) == "log1p" and s(a["galley_x"]) == "x", a
assert x.min() >= 0 and x.max() > 0, (x.min(), x.max())
v = np.log1p(x.astype(np.float64)); assert 0 < v.mean() < 6, v.mean()
x, a = check("climate2d.h5", "climate/data", "<f4", (6, 12, 12, 16))
assert s(a["galley_layout"]) == "channels_last" and s(a["galley_y"]) == "climate/labels_0", a
m, _ = check("climate2d.h5", "climate/labels_0", "<i4", (6, 12, 12))
assert set(np.unique(m)) <= {0, 1, 2}
x, a = check("nbody3d.h5", "x", "<f4", (6, 4, 12, 12, 12)); check("nbody3d.h5", "y", "<f4", (6, 5, 12, 12, 12))
assert s(a["galley_kind"]) == "nbody3d" and int(a["galley_seed"]) == 5 and int(a["galley_size"]) == 12, a
with h5py.File("nbody3d.h5", "r") as f:
    assert f["x"].chunks is not None and f["x"].compression == "gzip", (f["x"].chunks, f["x"].compression)
files = sorted(glob.glob("deepcam/sample-*.h5"))
assert len(files) == 3, files
for p in files:
    check(p, "climate/data", "<f4", (8, 8, 4)); check(p, "climate/labels_0", "<i4", (8, 8))
print("h5py: all checks passed")
EOF
run "$PY" check.py
show_run
assert_rc 0
assert_contains "$OUT" "all checks passed"

# Bad arguments: exit 2 with a reason, and nothing written.
run "$GALLEY" data synth galaxies out.h5
assert_rc 2
assert_contains "$ERR" "unknown synthetic kind 'galaxies'"
run "$GALLEY" data synth shapes2d out.h5 n=0
assert_rc 2
assert_contains "$ERR" "bad value '0' for n"
run "$GALLEY" data synth shapes2d out.h5 colour=red
assert_rc 2
assert_contains "$ERR" "unknown key 'colour'"
[[ ! -e out.h5 ]] || fail "out.h5 written despite errors"
run "$GALLEY" data synth shapes2d /nonexistent-dir/out.h5
assert_rc 1
assert_contains "$ERR" "/nonexistent-dir/out.h5"
run "$GALLEY" help data
assert_rc 0
assert_contains "$OUT" "galley data synth"
info "ok"
