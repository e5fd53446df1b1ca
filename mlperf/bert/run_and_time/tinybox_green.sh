#!/bin/bash
# MLPerf Training BERT on a tinybox green (6x RTX 4090): the reference submission's knobs.
# Init phase (untimed: clear the kernel cache, compile and BEAM-search on fake data), then the
# timed run phase; one console log and one MLPerf log. Knobs can be overridden from the environment.
set -eo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"

export MODEL="bert"
export SUBMISSION_PLATFORM="${SUBMISSION_PLATFORM:-tinybox_green}"
export DEVICE="${DEVICE:-CUDA}"
export DEFAULT_FLOAT="${DEFAULT_FLOAT:-HALF}" GPUS="${GPUS:-6}" BS="${BS:-66}" EVAL_BS="${EVAL_BS:-6}"

export BEAM="${BEAM:-4}" BEAM_UOPS_MAX="${BEAM_UOPS_MAX:-2000}" BEAM_UPCAST_MAX="${BEAM_UPCAST_MAX:-64}" BEAM_LOCAL_MAX="${BEAM_LOCAL_MAX:-512}"
export IGNORE_JIT_FIRST_BEAM="${IGNORE_JIT_FIRST_BEAM:-1}"
export BASEDIR="${BASEDIR:-/raid/datasets/wiki}"

PLATFORM="green"
source "$ROOT/mlperf/bert/run_and_time/phases.sh"
