#!/bin/bash
# MLPerf Training BERT on any CPU (the default device: C kernels built by the system compiler).
# Two processes, as the reference: the untimed init phase (clear the kernel cache, compile and
# BEAM-search every kernel on fake data), then the timed run phase (train on BASEDIR's shards
# to masked-LM accuracy 0.72). Both append to one console log and one MLPerf log.
# Any knob below can be overridden from the environment (BS=16 ./cpu.sh).
set -eo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"

export MODEL="bert"
export SUBMISSION_PLATFORM="${SUBMISSION_PLATFORM:-cpu}"
export DEFAULT_FLOAT="${DEFAULT_FLOAT:-FLOAT}" GPUS="${GPUS:-1}" BS="${BS:-8}" EVAL_BS="${EVAL_BS:-8}"

# kernels under 5 us are not searched, and a search stops once a round gains under 5 us (most of a
# CPU step is in a few big kernels; the init phase would otherwise search hundreds of small ones)
export BEAM="${BEAM:-2}" BEAM_MIN_PROGRESS="${BEAM_MIN_PROGRESS:-5}"
export IGNORE_JIT_FIRST_BEAM="${IGNORE_JIT_FIRST_BEAM:-1}"
export BASEDIR="${BASEDIR:-${XDG_DATA_HOME:-$HOME/.local/share}/tsgrad/wiki}"

PLATFORM="cpu"
source "$ROOT/mlperf/bert/run_and_time/phases.sh"
