#!/bin/bash
# gan3d on a Slurm cluster: the paper's training, one MPI rank per GPU (docs/cluster.md).
#
#   sbatch cluster/slurm.sh                          # 3 nodes x 4 GPUs = 12 ranks, as the paper
#   sbatch --nodes=1 cluster/slurm.sh                # one node of 4 GPUs
#   GAN3D_LAUNCHER=horovodrun sbatch cluster/slurm.sh
#
# Submit from the checkout: relative paths below are taken from it. sbatch's own options
# override the lines below; keep --ntasks-per-node equal to --gpus-per-node (one rank per GPU)
# and give each rank its share of a node's cores (--cpus-per-task). Older Slurm: --gres=gpu:4.
#SBATCH --job-name=gan3d-paper
#SBATCH --nodes=3
#SBATCH --ntasks-per-node=4
#SBATCH --gpus-per-node=4
#SBATCH --cpus-per-task=8
#SBATCH --time=04:00:00
#SBATCH --output=gan3d-%j.out
set -eu -o pipefail

# What a site and a run change: edit here, or set them in the shell that runs sbatch.
GAN3D_MODULES=${GAN3D_MODULES-}          # the site's modules, e.g. "gcc/12 cuda/12.4 openmpi/5"
GAN3D_VENV=${GAN3D_VENV-.venv}           # the Python environment with gan3d ("": modules' own)
GAN3D_PROFILE=${GAN3D_PROFILE:-paper}
GAN3D_DATA=${GAN3D_DATA-}                # folder of shower files ("": the profile's data.path)
GAN3D_OUTPUT=${GAN3D_OUTPUT:-results/training/$GAN3D_PROFILE-$SLURM_JOB_ID}
GAN3D_SETS=${GAN3D_SETS-}                # more settings: "KEY=VALUE KEY=VALUE", each a --set
GAN3D_LAUNCHER=${GAN3D_LAUNCHER:-srun}   # srun, mpirun or horovodrun
GAN3D_SRUN_ARGS=${GAN3D_SRUN_ARGS-"--mpi=pmix --cpu-bind=cores"}  # Open MPI 5 needs PMIx
GAN3D_DRY_RUN=${GAN3D_DRY_RUN-}          # 1: say the command, run nothing

fail() { echo "gan3d job: $*" >&2; exit 2; }

cd "$SLURM_SUBMIT_DIR"
if [[ -n $GAN3D_MODULES ]]; then
    if command -v module >/dev/null; then
        # shellcheck disable=SC2086  # one word per module
        module load $GAN3D_MODULES
    else
        echo "gan3d job: no 'module' command here: GAN3D_MODULES ($GAN3D_MODULES) not loaded" >&2
    fi
fi
if [[ -n $GAN3D_VENV ]]; then
    [[ -f $GAN3D_VENV/bin/activate ]] || fail "GAN3D_VENV=$GAN3D_VENV: no Python environment there"
    # shellcheck source=/dev/null
    source "$GAN3D_VENV/bin/activate"
fi
command -v gan3d >/dev/null || fail "no gan3d command: set GAN3D_VENV or GAN3D_MODULES"

args=(train --profile "$GAN3D_PROFILE" --output "$GAN3D_OUTPUT")
[[ -z $GAN3D_DATA ]] || args+=(--set "data.path=$GAN3D_DATA")
read -r -a sets <<< "$GAN3D_SETS"
for s in "${sets[@]}"; do args+=(--set "$s"); done

# Every launcher starts `gan3d train` once per rank; inside the job it does not launch again.
np=$SLURM_NTASKS
per_node=${SLURM_NTASKS_PER_NODE:-$((np / SLURM_JOB_NUM_NODES))}
hosts() { scontrol show hostnames "$SLURM_JOB_NODELIST" | sed "s/\$/:$per_node/" | paste -sd, -; }
case $GAN3D_LAUNCHER in
    srun) read -r -a launch <<< "srun $GAN3D_SRUN_ARGS" ;;
    mpirun) launch=(mpirun -np "$np" -H "$(hosts)" -x PATH)
            for v in LD_LIBRARY_PATH PYTHONPATH; do [[ -z ${!v-} ]] || launch+=(-x "$v"); done ;;
    # Gloo: Horovod 0.28's MPI mode passes options Open MPI 5's mpirun refuses
    horovodrun) launch=(horovodrun -np "$np" -H "$(hosts)" --gloo) ;;
    *) fail "GAN3D_LAUNCHER=$GAN3D_LAUNCHER: choose srun, mpirun or horovodrun" ;;
esac

echo "gan3d job $SLURM_JOB_ID: $np ranks on $SLURM_JOB_NUM_NODES node(s) from $PWD"
echo "${launch[*]} gan3d ${args[*]}"
[[ -n $GAN3D_DRY_RUN ]] || exec "${launch[@]}" gan3d "${args[@]}"
