# The phases every platform runs, sourced by the platform scripts once they have exported their
# knobs and set PLATFORM (which names the console log): the untimed init phase (clear the kernel
# cache, compile and BEAM-search every kernel on fake data), then the timed run phase; both append
# to one console log and one MLPerf log. Last, the run report from the console log.
export LOGMLPERF="${LOGMLPERF:-1}"
export SEED="${SEED:-$RANDOM}"
LOGFILE="bert_${PLATFORM}_$(date "+%m%d%H%M")_${SEED}.log"

TRAIN=("$ROOT/node_modules/.bin/tsx" "$ROOT/mlperf/bert/train.ts")

# init
BENCHMARK="${INIT_BENCHMARK:-10}" INITMLPERF=1 "${TRAIN[@]}" | tee "$LOGFILE"

# run
RUNMLPERF=1 "${TRAIN[@]}" | tee -a "$LOGFILE"

# the run report: loss, LR, eval accuracy, step time and throughput curves from the console log
"$ROOT/node_modules/.bin/tsx" "$ROOT/mlperf/bert/report.ts" "$LOGFILE" -o "${LOGFILE%.log}.html"
