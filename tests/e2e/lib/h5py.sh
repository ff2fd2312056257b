# shellcheck shell=bash
# h5py.sh: a Python with h5py and numpy, for tests that read galley's HDF5 files with a real reader.
# Source after common.sh, then:
#
#   PY=$(h5py_python) || skip "cannot install h5py from PyPI (offline?)"
#
# The venv is made once per build directory ($GALLEY_BUILD/h5py-venv), under a lock so that tests
# running in parallel share it.

# h5py_python: prints the venv's python, making the venv on first use; 1 if pip cannot install.
h5py_python() {
    local venv=$GALLEY_BUILD/h5py-venv
    (
        flock 9
        if [[ -x $venv/bin/python ]] && "$venv/bin/python" -c 'import h5py, numpy' 2>/dev/null; then
            exit 0
        fi
        rm -rf "$venv"
        python3 -m venv "$venv" >&2 || fail "python3 -m venv failed (Debian: apt-get install python3-venv)"
        if ! "$venv/bin/pip" install -q --disable-pip-version-check h5py numpy >&2; then
            rm -rf "$venv"
            exit 1
        fi
    ) 9>"$GALLEY_BUILD/h5py-venv.lock" || return 1
    echo "$venv/bin/python"
}
