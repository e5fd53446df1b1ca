#!/bin/bash
# MLPerf Training BERT on one NVIDIA H200 (141 GB): one device, so the whole global batch of
# the tinybox submissions (66) fits on it in fp16. Init phase (untimed: clear the kernel cache,
# compile and BEAM-search on fake data), then the timed run phase.
set -eo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"

export MODEL="bert"
export SUBMISSION_PLATFORM="${SUBMISSION_PLATFORM:-h200}"
export DEVICE="${DEVICE:-CUDA}"
export DEFAULT_FLOAT="${DEFAULT_FLOAT:-HALF}" GPUS="${GPUS:-1}" BS="${BS:-66}" EVAL_BS="${EVAL_BS:-66}"

export BEAM="${BEAM:-4}" BEAM_UOPS_MAX="${BEAM_UOPS_MAX:-2000}" BEAM_UPCAST_MAX="${BEAM_UPCAST_MAX:-64}" BEAM_LOCAL_MAX="${BEAM_LOCAL_MAX:-512}"
export IGNORE_JIT_FIRST_BEAM="${IGNORE_JIT_FIRST_BEAM:-1}"
export BASEDIR="${BASEDIR:-/raid/datasets/wiki}"

PLATFORM="h200"
source "$ROOT/mlperf/bert/run_and_time/phases.sh"
