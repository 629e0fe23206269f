#!/usr/bin/env bash
# The student's commands (see README.md):
#   ./pack.sh env                  create .venv/ (pinned packages from requirements.txt) -- once
#   ./pack.sh lab                  open JupyterLab on notebooks/{{ASSIGNMENT}}/
#   ./pack.sh validate             before you submit: nbgrader's check, then the grader's view of your code
#   ./pack.sh run [smoke|cpu|gpu]  execute your notebooks end to end into build/notebooks/
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

VENV=.venv
PY=${PYTHON:-python3}

ensure_env() {
    local stamp want
    want=$(cat requirements.txt pyproject.toml | sha256sum | cut -c1-16)
    stamp="$VENV/.pack-env-$want"
    if [ -f "$stamp" ]; then return 0; fi
    echo "== creating the environment in $VENV (first use only: about 5 minutes and 3 GB, mostly PyTorch) =="
    [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet --upgrade pip
    "$VENV/bin/python" -m pip install --quiet -r requirements.txt
    "$VENV/bin/python" -m pip install --quiet --no-deps -e .
    # Hide nbgrader's staff menus (course list, assignment list, formgrader) in this JupyterLab.
    mkdir -p "$VENV/etc/jupyter/labconfig"
    cp jupyter/labconfig/page_config.json "$VENV/etc/jupyter/labconfig/page_config.json"
    rm -f "$VENV"/.pack-env-* && touch "$stamp"
}

export PATH="$PWD/$VENV/bin:$PATH"

cmd=${1:-help}
[ $# -gt 0 ] && shift
case "$cmd" in
    env)      ensure_env ;;
    lab)      ensure_env; exec "$VENV/bin/jupyter" lab notebooks/{{ASSIGNMENT}} "$@" ;;
    validate) ensure_env
              if [ $# -eq 0 ]; then set -- notebooks/{{ASSIGNMENT}}/*.ipynb; fi
              status=0
              # 1. nbgrader's check: every cell runs, the visible tests pass (in your own kernel)
              "$VENV/bin/nbgrader" validate "$@" || status=1
              # 2. the grader's view: your cells loaded as the grader loads them (every line, in order,
              #    30 s each); names every line it could not run and every visible test that then fails
              echo "== the grader's view of your notebooks =="
              "$VENV/bin/python" -m utils.answer_loader "$@" || status=1
              exit $status ;;
    run)      ensure_env; exec "$VENV/bin/python" -m utils.run_notebooks --notebooks notebooks/{{ASSIGNMENT}} "$@" ;;
    *)        echo "usage: ./pack.sh env | lab | validate [NOTEBOOK ...] | run [smoke|cpu|gpu]" >&2; exit 2 ;;
esac
