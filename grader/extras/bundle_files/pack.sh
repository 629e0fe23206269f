#!/usr/bin/env bash
# The student's commands (see README.md):
#   ./pack.sh env [cpu]            create .venv/ (pinned packages from requirements.txt) -- once;
#                                  "cpu": CPU-only PyTorch (Linux without an NVIDIA GPU: about 4 GB less)
#   ./pack.sh lab                  open JupyterLab in this folder, at notebooks/{{ASSIGNMENT}}/
#   ./pack.sh validate             before you submit: nbgrader's check, then the grader's view of your code
#   ./pack.sh run [smoke|cpu|gpu]  execute your notebooks end to end into build/notebooks/
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

VENV=.venv
PY=${PYTHON:-python3}

# PyTorch's own index of CPU-only wheels: on Linux, PyPI's torch brings about 4 GB of CUDA libraries
# ($PACK_CPU_INDEX: a mirror of it)
CPU_INDEX=${PACK_CPU_INDEX:-https://download.pytorch.org/whl/cpu}

index_reachable() {   # index_reachable URL: the index answers (proxy settings as pip uses them)
    "$PY" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=20).close()' "$1/torch/" 2>/dev/null
}

ensure_env() {   # ensure_env [cpu]
    local stamp want
    want=$(cat requirements.txt pyproject.toml | sha256sum | cut -c1-16)
    stamp="$VENV/.pack-env-$want"
    if [ -f "$stamp" ]; then
        if [ "${1:-}" = cpu ]; then echo "the environment exists already: remove .venv/ first to rebuild it CPU-only" >&2; fi
        return 0
    fi
    if [ "${1:-}" = cpu ] && ! index_reachable "$CPU_INDEX"; then
        echo "./pack.sh env cpu: PyTorch's CPU-only index $CPU_INDEX cannot be reached (offline, or a proxy or firewall blocks it), nothing was installed: rerun when it can be reached, or use conda: conda env create -f environment.yml" >&2
        exit 1
    fi
    # a failed install leaves no half-made environment behind (one that was there before stays)
    if [ ! -e "$VENV" ]; then
        trap "rc=\$?; if [ \$rc -ne 0 ]; then rm -rf '$VENV'; echo './pack.sh env${1:+ $1}: the install failed (pip says why above); $VENV/ removed, nothing half-made is left' >&2; fi" EXIT
    fi
    echo "== creating the environment in $VENV (first use only; measured on Linux x86_64: 6.3 GB installed,"
    echo "   4.1 GB of it PyTorch's CUDA libraries; about 2 minutes plus downloading the wheels;"
    echo "   './pack.sh env cpu' installs CPU-only PyTorch instead, on Linux without an NVIDIA GPU) =="
    [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet --upgrade pip
    if [ "${1:-}" = cpu ]; then
        # the same pinned versions, built without CUDA ("2.14.1+cpu" satisfies "torch==2.14.1")
        "$VENV/bin/python" -m pip install --quiet --index-url "$CPU_INDEX" \
            $(grep -E '^(torch|torchvision)==' requirements.txt | cut -d' ' -f1)
    fi
    "$VENV/bin/python" -m pip install --quiet -r requirements.txt
    # PYTHONWARNINGS: setuptools prints a boxed, harmless "Editable installation" warning otherwise
    PYTHONWARNINGS=ignore "$VENV/bin/python" -m pip install --quiet --no-deps -e .
    rm -f "$VENV"/.pack-env-* && touch "$stamp"
    trap - EXIT
}

export PATH="$PWD/$VENV/bin:$PATH"
# jupyter/ holds this course's JupyterLab settings: nbgrader's instructor menus and server extensions
# are off, only its Validate button stays.
export JUPYTER_CONFIG_PATH="$PWD/jupyter${JUPYTER_CONFIG_PATH:+:$JUPYTER_CONFIG_PATH}"

cmd=${1:-help}
[ $# -gt 0 ] && shift
case "$cmd" in
    env)      ensure_env "${1:-}" ;;
    # the server's root is this folder (README.md, data/, build/figures/ in reach); it opens at the notebooks
    lab)      ensure_env; exec "$VENV/bin/jupyter" lab --ServerApp.root_dir="$PWD" \
                  --LabApp.default_url=/lab/tree/notebooks/{{ASSIGNMENT}} "$@" ;;
    validate) ensure_env
              if [ $# -eq 0 ]; then set -- notebooks/{{ASSIGNMENT}}/*.ipynb; fi
              # nbgrader's check (every cell runs, the visible tests pass, as the Validate button does),
              # then the grader's view (your cells loaded as the grader loads them); one line per
              # notebook at the end, and a non-zero exit when any notebook has a problem
              exec "$VENV/bin/python" -m utils.validate "$@" ;;
    run)      ensure_env; exec "$VENV/bin/python" -m utils.run_notebooks --notebooks notebooks/{{ASSIGNMENT}} "$@" ;;
    *)        echo "usage: ./pack.sh env [cpu] | lab | validate [NOTEBOOK ...] | run [smoke|cpu|gpu]" >&2; exit 2 ;;
esac
