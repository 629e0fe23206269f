#!/bin/bash
# Merge the shards of grader/extras/cluster/slurm_array.sh and export grades.csv, as a Slurm job that runs once
# the array has ended, however its tasks ended (see slurm_array.sh's header):
#   jobid=$(sbatch --parsable --cpus-per-task=8 --mem=32G grader/extras/cluster/slurm_array.sh)
#   sbatch --dependency=afterany:$jobid grader/extras/cluster/slurm_merge.sh
# If a shard has not graded all of its students (a task failed or was cancelled), merge-shards refuses,
# exits 1 and this log names the missing students per shard; resubmit that task as the array's header
# says and submit this merge again with --dependency=afterany:<the new job id>.
# Arguments after the script go to `export` (e.g. --lms canvas --roster R --to FILE).
#
#SBATCH --job-name=las-merge
#SBATCH --nodes=1
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=1
#SBATCH --mem=4G
#SBATCH --time=00:30:00
#SBATCH --output=grading/slurm/%x-%j.log
set -euo pipefail
cd "${SLURM_SUBMIT_DIR:-.}"
if [ -n "${LAS_PYTHON:-}" ]; then py=$LAS_PYTHON
elif [ -x .venv/bin/python ]; then py=.venv/bin/python
else py=$(command -v python3 || true); fi
if [ -z "$py" ] || ! "$py" -c "import grader, nbgrader" 2>/dev/null; then
    echo "no Python with the pack installed: tried \$LAS_PYTHON, .venv/bin/python, python3 (${py:-none})" >&2
    exit 1
fi
# shellcheck disable=SC2086 # LAS_GRADER_OPTIONS is a list of options
"$py" -m grader ${LAS_GRADER_OPTIONS:-} merge-shards
# shellcheck disable=SC2086
"$py" -m grader ${LAS_GRADER_OPTIONS:-} export "$@"
