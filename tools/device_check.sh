#!/usr/bin/env bash
# The device check (bench/device_check.py) on an accelerator machine that has Python and JAX for
# its device but no TensorFlow, no Keras and no network. Two halves:
#
#   tools/device_check.sh wheels          # here, with PyPI: Keras and the few packages gan3d's
#                                         # JAX path imports, as wheels for that machine's Python
#                                         # (DEVICE_PYTHON, default 3.12) -> build/device/wheels
#   tools/device_check.sh run [ARGS...]   # there, offline, from a copy of this checkout that
#                                         # carries build/device: install the wheels beside the
#                                         # machine's JAX, then run the check (ARGS go to it)
#
# The run writes OUT/device_check.json (OUT: $OUT, else results/device), the trained generator
# and discriminator, and prints a table; it stays within --budget seconds (default 540).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
wheels=$root/build/device/wheels
packages=(keras==3.15.1 pyyaml tqdm psutil)  # Keras as pinned here; gan3d's own imports
say() { printf '[device-check] %s\n' "$*" >&2; }
die() { printf '[device-check] error: %s\n' "$*" >&2; exit 1; }

case "${1:-}" in
wheels)
    py=${DEVICE_PYTHON:-3.12}
    rm -rf "$wheels.tmp" && mkdir -p "$wheels.tmp"
    say "downloading ${packages[*]} and their dependencies for CPython $py (manylinux x86_64)"
    python3 -m pip download -q --only-binary=:all: --python-version "$py" --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 -d "$wheels.tmp" "${packages[@]}" \
        || die "pip could not download the wheels (network, or no wheel for Python $py)"
    rm -rf "$wheels" && mv "$wheels.tmp" "$wheels"
    say "$(ls "$wheels" | wc -l) wheels, $(du -sh "$wheels" | cut -f1) in $wheels"
    ;;
run)
    shift
    py=${PYTHON:-python3}
    export KERAS_BACKEND=jax  # Keras must not look for TensorFlow
    "$py" -c "import jax" 2>/dev/null || die "$py cannot import jax: this machine needs JAX for its device"
    if ! "$py" -c "import keras, yaml, tqdm, psutil" 2>/dev/null; then
        [[ -d "$wheels" ]] || die "Keras is not installed and $wheels is missing: run 'tools/device_check.sh wheels' where PyPI is reachable and bring build/device along"
        say "installing ${packages[*]} from $wheels (offline)"
        "$py" -m pip install -q --no-index --find-links "$wheels" "${packages[@]}" \
            || die "installing from $wheels failed (wheels for another Python? set DEVICE_PYTHON when downloading)"
    fi
    "$py" -c "import jax; print('[device-check] devices:', jax.devices())" >&2
    PYTHONPATH="$root/src${PYTHONPATH:+:$PYTHONPATH}" exec "$py" bench/device_check.py --output "${OUT:-results/device}" "$@"
    ;;
*)
    die "usage: tools/device_check.sh wheels | run [device_check.py arguments]"
    ;;
esac
