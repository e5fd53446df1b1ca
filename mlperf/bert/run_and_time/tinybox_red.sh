#!/bin/bash
# MLPerf Training BERT on a tinybox red (6x RX 7900 XTX): the reference submission's knobs.
# Run tinybox_red/setup.sh once first (clocks and power profile). Init phase (untimed: clear the
# kernel cache, compile and BEAM-search on fake data), then the timed run phase.
set -eo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"

export MODEL="bert"
export SUBMISSION_PLATFORM="${SUBMISSION_PLATFORM:-tinybox_red}"
export DEVICE="${DEVICE:-AMD}"
export DEFAULT_FLOAT="${DEFAULT_FLOAT:-HALF}" GPUS="${GPUS:-6}" BS="${BS:-66}" EVAL_BS="${EVAL_BS:-6}"

export BEAM="${BEAM:-3}"
export IGNORE_JIT_FIRST_BEAM="${IGNORE_JIT_FIRST_BEAM:-1}"
export BASEDIR="${BASEDIR:-/raid/datasets/wiki}"

PLATFORM="red"
source "$ROOT/mlperf/bert/run_and_time/phases.sh"
