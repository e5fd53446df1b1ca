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

export LOGMLPERF="${LOGMLPERF:-1}"
export SEED="${SEED:-$RANDOM}"
DATETIME=$(date "+%m%d%H%M")
LOGFILE="bert_h200_${DATETIME}_${SEED}.log"

TRAIN=("$ROOT/node_modules/.bin/tsx" "$ROOT/mlperf/bert/train.ts")

# init
BENCHMARK="${INIT_BENCHMARK:-10}" INITMLPERF=1 "${TRAIN[@]}" | tee "$LOGFILE"

# run
RUNMLPERF=1 "${TRAIN[@]}" | tee -a "$LOGFILE"

# the run report: loss, LR, eval accuracy, step time and throughput curves from the console log
"$ROOT/node_modules/.bin/tsx" "$ROOT/mlperf/bert/report.ts" "$LOGFILE" -o "${LOGFILE%.log}.html"
