#!/usr/bin/env bash
# The course pack's two entry points (see README.md):
#   ./pack.sh run [smoke|cpu|gpu|full]   execute every solution notebook into build/
#   ./pack.sh test [pytest args]         run the test suite (two passes: see below)
#   ./pack.sh test fast [pytest args]    the fast tier: unit and judge tests and one small class end to end
# Both create the virtual environment .venv/ on first use (and refresh it when
# requirements.txt or pyproject.toml change).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

VENV=.venv
PY=${PYTHON:-python3}

ensure_env() {
    local stamp want
    want=$(cat requirements.txt pyproject.toml | sha256sum | cut -c1-16)
    stamp="$VENV/.pack-env-$want"
    if [ -f "$stamp" ]; then return 0; fi
    echo "== creating the environment in $VENV (first use: a few minutes) =="
    [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet --upgrade pip
    "$VENV/bin/python" -m pip install --quiet -r requirements.txt
    "$VENV/bin/python" -m pip install --quiet --no-deps -e .
    rm -f "$VENV"/.pack-env-* && touch "$stamp"
}

# nbgrader runs helper executables (alembic) from the environment, so its bin/ goes first on PATH.
export PATH="$PWD/$VENV/bin:$PATH"

cmd=${1:-run}
[ $# -gt 0 ] && shift
case "$cmd" in
    run)
        ensure_env
        exec "$VENV/bin/python" -m utils.run_notebooks "$@"
        ;;
    test)
        ensure_env
        if [ "${1:-}" = fast ]; then   # the ten-minute loop: unit and judge tiers, one small class end to end
            shift
            export LAS_SWEEP_SEEDS=${LAS_SWEEP_SEEDS:-1}   # the judge sweeps on one seed (CI: 6), the variants split over the cores
            # two pytest workers (pytest-xdist), each test file on one of them: the serial tests leave a core idle
            exec "$VENV/bin/python" -m pytest -m "unit or judge or fast_e2e" -n "${LAS_TEST_WORKERS:-2}" --dist loadfile \
                --durations=15 "$@"
        fi
        # The whole suite (CI) in two passes (tests/conftest.py marks the tiers): first everything but the
        # tests marked `alone`, on two pytest workers, each test file on one; then the `alone` tests one at a
        # time: they grade classes with workers of their own, and their time limits and the grader's overload
        # rule assume the machine is theirs.
        for arg in "$@"; do   # a marker expression of the caller's own picks the tests: one pass
            case "$arg" in -m*) exec "$VENV/bin/python" -m pytest "$@" ;; esac
        done
        set +e
        own_cache=""   # the grader's caches, shared by both passes (tests/conftest.py TEST_CACHES)
        if [ -z "${LAS_TEST_CACHE:-}" ]; then
            own_cache=$(mktemp -d -t las-test-cache.XXXXXX) && export LAS_TEST_CACHE=$own_cache
        fi
        "$VENV/bin/python" -m pytest -m "not alone" -n "${LAS_TEST_WORKERS:-2}" \
            --dist loadfile "$@"
        first=$?
        "$VENV/bin/python" -m pytest -m alone "$@"
        second=$?
        [ -n "$own_cache" ] && rm -rf "$own_cache"
        # 5 is "no test collected": fine for one pass (a single file named), not for both
        [ "$first" = 5 ] && [ "$second" = 5 ] && exit 5
        for rc in "$first" "$second"; do
            [ "$rc" = 0 ] || [ "$rc" = 5 ] || exit "$rc"
        done
        exit 0
        ;;
    env)
        ensure_env
        ;;
    *)
        echo "usage: ./pack.sh run [smoke|cpu|gpu|full] | ./pack.sh test [pytest args] | ./pack.sh env" >&2
        exit 2
        ;;
esac
