#!/bin/bash
# MLPerf Training BERT on a tinybox red (6x RX 7900 XTX, gfx1100): the reference submission's knobs.
# Run tinybox_red/setup.sh once first (clocks and power profile). Init phase (untimed: clear the
# kernel cache, compile and BEAM-search on fake data), then the timed run phase.
#
#   tinybox_red.sh --dry-run   compiles every kernel of one BERT-large float16 train step for the GPU
#                              (AMD_ARCH, default gfx1100) and prints the counts, with or without one:
#                              needs hiprtc (ROCm 6+) or hipcc (ROCm, or Debian's hipcc package).
set -eo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"

export MODEL="bert"
export SUBMISSION_PLATFORM="${SUBMISSION_PLATFORM:-tinybox_red}"
export DEVICE="${DEVICE:-AMD}"
export DEFAULT_FLOAT="${DEFAULT_FLOAT:-HALF}" GPUS="${GPUS:-6}" BS="${BS:-66}" EVAL_BS="${EVAL_BS:-6}"

if [ "${1:-}" = "--dry-run" ]; then
  # each GPU's share of the global batch, at sequence 512
  exec "$ROOT/node_modules/.bin/tsx" "$ROOT/bench/amd/compile_step.ts" --preset large --batch "$((BS / GPUS))" \
    --seq 512 --arch "${AMD_ARCH:-gfx1100}"
fi

# before the init phase clears anything: every GPU the run shards over must open (DEVICE, DEVICE:1, ...)
node --import "$ROOT/node_modules/tsx/dist/loader.mjs" --input-type=module -e '
  const { Device } = await import(process.argv[1]);
  const kind = process.env.DEVICE.split(":")[0];
  for (let i = 0; i < (Number(process.env.GPUS) || 1); i++) {
    try {
      Device.allocator(i ? `${kind}:${i}` : kind);
    } catch (e) {
      console.error(`tinybox_red.sh: ${e.message}\n(--dry-run compiles a BERT-large step for the GPU without one)`);
      process.exit(1);
    }
  }' "$ROOT/src/index.ts"

export BEAM="${BEAM:-3}"
export IGNORE_JIT_FIRST_BEAM="${IGNORE_JIT_FIRST_BEAM:-1}"
export BASEDIR="${BASEDIR:-/raid/datasets/wiki}"

PLATFORM="red"
source "$ROOT/mlperf/bert/run_and_time/phases.sh"
