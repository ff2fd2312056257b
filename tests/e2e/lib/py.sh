# shellcheck shell=bash
# py.sh: a Python virtual environment for the tests that read galley's files back with other
# people's tools: TensorBoard's own event loader, jsonschema, and h5py (data sets, checkpoints).
# Source it after common.sh:
#
#   source "$(dirname "${BASH_SOURCE[0]}")/lib/py.sh"
#   need_pyenv                 # sets PY; skips (exit 77) only when pip cannot reach PyPI
#   "$PY" script.py
#
# The environment is made once per build directory, in $GALLEY_PYENV (default
# $GALLEY_BUILD/pyenv), under a lock so that tests running in parallel share it. It needs
# `python3 -m venv` (Debian: python3-venv, which build.sh installs).

: "${GALLEY_PYENV:=$GALLEY_BUILD/pyenv}"
GL_PY_PACKAGES=("tensorboard>=2.14,<3" "jsonschema>=4.18,<5" "h5py>=3.8,<4" "numpy")

# pip_offline LOG: 0 when pip's log says it could not reach the package index.
pip_offline() {
    grep -qiE 'Failed to establish a new connection|Temporary failure in name resolution|Name or service not known|Network is unreachable|No route to host|Connection (refused|reset|timed out)|ConnectTimeoutError|Max retries exceeded|ProxyError|Could not fetch URL' "$1"
}

need_pyenv() {
    need_cmd python3 flock
    local ready="$GALLEY_PYENV/.galley-ready" want="${GL_PY_PACKAGES[*]}"
    PY="$GALLEY_PYENV/bin/python"
    if [[ -f $ready && $(cat "$ready") == "$want" ]]; then
        return 0
    fi
    mkdir -p "$(dirname "$GALLEY_PYENV")"
    local log="$GL_TMP/pip.log" rc=0
    (
        flock 9
        if [[ -f $ready && $(cat "$ready") == "$want" ]]; then
            exit 0
        fi
        rm -rf "$GALLEY_PYENV"
        echo "[py.sh] creating $GALLEY_PYENV with ${GL_PY_PACKAGES[*]} (once per build directory)"
        if ! python3 -m venv "$GALLEY_PYENV" >"$log" 2>&1; then
            echo "python3 -m venv failed (Debian/Ubuntu: apt-get install python3-venv; build.sh does)" >>"$log"
            exit 3
        fi
        "$GALLEY_PYENV/bin/python" -m pip install --disable-pip-version-check --no-input -q --timeout 30 \
            --retries 2 "${GL_PY_PACKAGES[@]}" >>"$log" 2>&1 || exit 4
        echo "$want" >"$ready"
    ) 9>"$GALLEY_PYENV.lock" || rc=$?
    case $rc in
    0) ;;
    4)
        if pip_offline "$log"; then
            tail -n 5 "$log" | sed 's/^/  | /'
            skip "pip cannot reach PyPI to install ${GL_PY_PACKAGES[*]} (the log's last lines are above)"
        fi
        cat "$log" >&2
        fail "pip install ${GL_PY_PACKAGES[*]} into $GALLEY_PYENV failed (log above)"
        ;;
    *)
        cat "$log" >&2
        fail "could not make the Python environment $GALLEY_PYENV (log above)"
        ;;
    esac
    [[ -x $PY ]] || fail "$PY is missing after setting up $GALLEY_PYENV"
}
