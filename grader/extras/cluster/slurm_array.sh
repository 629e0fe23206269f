#!/bin/bash
# Autograde a class as a Slurm job array: each array task grades one shard of the class on its own node.
#
# From the repository root, after `python -m grader collect` (logs go to grading/slurm/, which must exist
# before sbatch: Slurm does not create the folder of --output):
#   mkdir -p grading/slurm
#   sbatch --cpus-per-task=8 --mem=32G grader/extras/cluster/slurm_array.sh                   # 8 shards (0-7)
#   sbatch --array=0-31 --cpus-per-task=4 --mem=16G grader/extras/cluster/slurm_array.sh     # 32 shards (from 0, no step)
# --cpus-per-task and --mem default to 8 and 32G below. On a partition whose nodes are smaller, Slurm either
# rejects that at submission ("Requested node configuration is not available") or, depending on the
# cluster's EnforcePartLimits, accepts it and leaves every task PENDING for ever (squeue's reason:
# Resources, or ReqNodeNotAvail). Look first: `sinfo -o "%P %c %m"` prints each partition's CPUs and MB per
# node; pass what a node has (one worker per 2 CPUs, each kernel capped at --mem-gb, 6 GB: give --mem >= 3G
# per CPU), and pass the same flags again whenever you resubmit a task.
#
# Merge and export when the array has ended, whatever happened to its tasks (afterany, not afterok: with
# afterok one failed task would leave the merge pending forever, even after a successful resubmit):
#   jobid=$(sbatch --parsable --cpus-per-task=8 --mem=32G grader/extras/cluster/slurm_array.sh)
#   sbatch --dependency=afterany:$jobid grader/extras/cluster/slurm_merge.sh
# If a task died (preempted, out of time, node failure, scancel), the merge refuses and its log
# (grading/slurm/las-merge-<jobid>.log) names every student not graded yet, per shard. Resubmit just
# that task, with the array's size and the same resource flags; it resumes where it stopped (finished
# students are skipped), then merge again:
#   jobid=$(sbatch --parsable --array=3 --cpus-per-task=8 --mem=32G --export=ALL,LAS_SHARD_COUNT=8 grader/extras/cluster/slurm_array.sh)
#   sbatch --dependency=afterany:$jobid grader/extras/cluster/slurm_merge.sh
# (or, on the login node once `squeue --me` lists none: python -m grader merge-shards && python -m grader export).
#
# Needs this repository, its Python environment and grading/ on storage that every node sees. The
# interpreter: $LAS_PYTHON if set, else .venv/bin/python (./pack.sh's), else python3 on PATH (a conda
# environment active at sbatch time: sbatch passes the environment on). Bubblewrap on the nodes:
# the task runs with --sandbox bwrap and exits 1 at once ("bubblewrap is not usable here") on a node
# without it, rather than run student code next to grading/ unprotected; to grade anyway with what the
# node has, append `--sandbox auto` to the sbatch line (arguments after the script go to `autograde`),
# and the summary at the end of the log says which protections were off.
# Task I grades the students of shard I into grading/shards/I-of-N/ with the class's judge seed
# (grading/judge-seed.txt; the first task to start creates it). scancel (SIGTERM) stops a task cleanly:
# the students in flight are graded again by the resubmitted task, its scratch folder is removed.
# Each task first regenerates the release and the solution's reference values (measured: about 60-70 s
# of a node's time for the five notebooks before its first student), so use fewer, larger shards for
# small classes. Extra options before the verb (e.g. --grading-dir DIR, --assignment ex02) go in
# $LAS_GRADER_OPTIONS; slurm_merge.sh needs the same.
#
#SBATCH --job-name=las-autograde
#SBATCH --array=0-7
#SBATCH --nodes=1
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=8
#SBATCH --mem=32G
#SBATCH --time=02:00:00
#SBATCH --output=grading/slurm/%x-%A_%a.log
set -euo pipefail
cd "${SLURM_SUBMIT_DIR:-.}"
if [ -n "${LAS_PYTHON:-}" ]; then py=$LAS_PYTHON
elif [ -x .venv/bin/python ]; then py=.venv/bin/python
else py=$(command -v python3 || true); fi
if [ -z "$py" ] || ! "$py" -c "import grader, nbgrader" 2>/dev/null; then
    echo "no Python with the pack installed: tried \$LAS_PYTHON (${LAS_PYTHON:-unset}), .venv/bin/python, python3" \
         "(${py:-none}); run ./pack.sh, or activate the conda environment (environment.yml) before sbatch" >&2
    exit 1
fi
# The shard count is the array's (SLURM_ARRAY_TASK_COUNT) unless given, as when one task is rerun.
# Workers: one per 2 CPUs of the allocation (each kernel may use up to --mem-gb, 6 GB: 4 workers fit
# --mem=32G), one torch thread per kernel (os.cpu_count() on a node counts the whole machine, not this
# allocation).
cpus=${SLURM_CPUS_PER_TASK:-2}
workers=$(( cpus / 2 > 0 ? cpus / 2 : 1 ))
# The grader runs in the background so that a SIGTERM sent to this shell alone (scancel --batch) reaches
# it too; it turns SIGTERM into a clean stop (grader/autograde.py), and this shell waits for that.
# shellcheck disable=SC2086 # LAS_GRADER_OPTIONS is a list of options
"$py" -m grader ${LAS_GRADER_OPTIONS:-} autograde --shard auto --sandbox bwrap --workers "$workers" --session-threads 1 "$@" &
pid=$!
trap 'echo "SIGTERM: stopping shard ${SLURM_ARRAY_TASK_ID:-?} (resubmit it to resume)"; kill -TERM "$pid" 2>/dev/null' TERM
rc=0
wait "$pid" || rc=$?
while kill -0 "$pid" 2>/dev/null; do wait "$pid" || rc=$?; done   # wait again after the trap interrupted it
if [ "$rc" != 0 ]; then
    echo "shard ${SLURM_ARRAY_TASK_ID:-?} stopped (exit $rc); resubmit it with the same flags to resume:" \
         "sbatch --array=${SLURM_ARRAY_TASK_ID:-I} --cpus-per-task=${SLURM_CPUS_PER_TASK:-8} --mem=<as before>" \
         "--export=ALL,LAS_SHARD_COUNT=<N> grader/extras/cluster/slurm_array.sh" >&2
    exit "$rc"
fi
echo "shard ${SLURM_ARRAY_TASK_ID:-?} done; when every task is: python -m grader merge-shards && python -m grader export" \
     "(or sbatch --dependency=afterany:${SLURM_ARRAY_JOB_ID:-<jobid>} grader/extras/cluster/slurm_merge.sh)"
