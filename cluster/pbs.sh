#!/bin/bash
# gan3d on a PBS cluster (PBS Pro, OpenPBS): the paper's training, one MPI rank per GPU
# (docs/cluster.md).
#
#   qsub cluster/pbs.sh                              # 3 nodes x 4 GPUs = 12 ranks, as the paper
#   qsub -l select=1:ncpus=32:ngpus=4:mpiprocs=4 cluster/pbs.sh     # one node of 4 GPUs
#   qsub -v GAN3D_LAUNCHER=horovodrun cluster/pbs.sh
#
# Submit from the checkout: relative paths below are taken from it. qsub's own options override
# the lines below; keep mpiprocs equal to ngpus (one rank per GPU: $PBS_NODEFILE then lists each
# node once per rank). Torque: -l nodes=3:ppn=4:gpus=4.
#PBS -N gan3d-paper
#PBS -l select=3:ncpus=32:ngpus=4:mpiprocs=4
#PBS -l walltime=04:00:00
#PBS -j oe
set -eu -o pipefail

# What a site and a run change: edit here, or pass them with qsub -v NAME=VALUE,NAME=VALUE.
GAN3D_MODULES=${GAN3D_MODULES-}          # the site's modules, e.g. "gcc/12 cuda/12.4 openmpi/5"
GAN3D_VENV=${GAN3D_VENV-.venv}           # the Python environment with gan3d ("": modules' own)
GAN3D_PROFILE=${GAN3D_PROFILE:-paper}
GAN3D_DATA=${GAN3D_DATA-}                # folder of shower files ("": the profile's data.path)
GAN3D_OUTPUT=${GAN3D_OUTPUT:-results/training/$GAN3D_PROFILE-$PBS_JOBID}
GAN3D_SETS=${GAN3D_SETS-}                # more settings: "KEY=VALUE KEY=VALUE", each a --set
GAN3D_LAUNCHER=${GAN3D_LAUNCHER:-mpirun} # mpirun or horovodrun
GAN3D_DRY_RUN=${GAN3D_DRY_RUN-}          # 1: say the command, run nothing

fail() { echo "gan3d job: $*" >&2; exit 2; }

cd "$PBS_O_WORKDIR"
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
np=$(wc -l < "$PBS_NODEFILE")
nodes=$(sort -u "$PBS_NODEFILE" | wc -l)
hosts=$(sort "$PBS_NODEFILE" | uniq -c | awk '{print $2 ":" $1}' | paste -sd, -)  # node1:4,...
case $GAN3D_LAUNCHER in
    mpirun) launch=(mpirun -np "$np" -H "$hosts" -x PATH)
            for v in LD_LIBRARY_PATH PYTHONPATH; do [[ -z ${!v-} ]] || launch+=(-x "$v"); done ;;
    # Gloo: Horovod 0.28's MPI mode passes options Open MPI 5's mpirun refuses
    horovodrun) launch=(horovodrun -np "$np" -H "$hosts" --gloo) ;;
    *) fail "GAN3D_LAUNCHER=$GAN3D_LAUNCHER: choose mpirun or horovodrun" ;;
esac

echo "gan3d job $PBS_JOBID: $np ranks on $nodes node(s) from $PWD"
echo "${launch[*]} gan3d ${args[*]}"
[[ -n $GAN3D_DRY_RUN ]] || exec "${launch[@]}" gan3d "${args[@]}"
