#!/bin/bash
# Autograde a class as a Slurm job array: each array task grades one shard of the class on its own node.
#
#   sbatch grader/cluster/slurm_array.sh                  # from the repository root: 8 shards (0-7)
#   sbatch --array=0-31 grader/cluster/slurm_array.sh     # 32 shards (the array must start at 0, no step)
#
# Then, when every task has ended (`squeue --me` lists none), on the login node:
#   .venv/bin/python -m grader merge-shards && .venv/bin/python -m grader export
# or let Slurm run the merge once the whole array has succeeded:
#   jobid=$(sbatch --parsable grader/cluster/slurm_array.sh)
#   sbatch --dependency=afterok:$jobid --wrap ".venv/bin/python -m grader merge-shards && .venv/bin/python -m grader export"
#
# Needs this repository, its .venv/ and grading/ (after `python -m grader collect`) on storage that every
# node sees; bubblewrap on the nodes for the filesystem sandbox (the summary says when it is missing).
# Task I grades the students of shard I into grading/shards/I-of-N/ with the class's judge seed
# (grading/judge-seed.txt; the first task to start creates it). A task that died (preempted, out of
# time, node failure) resumes where it stopped: resubmit just that task with the array's size, e.g.
#   sbatch --array=3 --export=ALL,LAS_SHARD_COUNT=8 grader/cluster/slurm_array.sh
# merge-shards names every student a shard has not graded yet, and refuses shards of another seed.
#
#SBATCH --job-name=las-autograde
#SBATCH --array=0-7
#SBATCH --nodes=1
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=8
#SBATCH --mem=32G
#SBATCH --time=02:00:00
#SBATCH --output=grading-shard-%a.log
set -euo pipefail
cd "${SLURM_SUBMIT_DIR:-.}"
# The shard count is the array's (SLURM_ARRAY_TASK_COUNT) unless given, as when one task is rerun.
# Workers: one per 2 CPUs of the allocation (each kernel may use up to --mem-gb, 6 GB: 4 workers fit
# --mem=32G), one torch thread per kernel (os.cpu_count() on a node counts the whole machine, not this
# allocation). --sandbox bwrap: fail rather than run student code next to grading/ without bubblewrap.
cpus=${SLURM_CPUS_PER_TASK:-2}
workers=$(( cpus / 2 > 0 ? cpus / 2 : 1 ))
.venv/bin/python -m grader autograde --shard auto --sandbox bwrap --workers "$workers" --kernel-threads 1 "$@"
echo "shard ${SLURM_ARRAY_TASK_ID} done; when every task is: .venv/bin/python -m grader merge-shards && .venv/bin/python -m grader export"
