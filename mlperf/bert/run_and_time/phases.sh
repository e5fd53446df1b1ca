# The phases every platform runs, sourced by the platform scripts once they have exported their
# knobs and set PLATFORM (which names the console log): the untimed init phase (clear the kernel
# cache, compile and BEAM-search every kernel on fake data), then the timed run phase; both append
# to one console log and one MLPerf log. Last, the run report from the console log.
export LOGMLPERF="${LOGMLPERF:-1}"
# the run's own kernel cache, which the init phase clears (never the user-wide ~/.cache/tsgrad, unless named here)
export TSGRAD_CACHE="${TSGRAD_CACHE:-$PWD/kernel-cache}"
export SEED="${SEED:-$RANDOM}"
LOGFILE="bert_${PLATFORM}_$(date "+%m%d%H%M")_${SEED}.log"

# node with tsx's loader, not the tsx command: its signal relay kills a trainer busy in a step, so Ctrl-C
# would leave no checkpoint
TRAIN=(node --import "$ROOT/node_modules/tsx/dist/loader.mjs" "$ROOT/mlperf/bert/train.ts")
# RANKS=N: N processes of one data-parallel job (BS is the global batch, GPUS the devices of each rank),
# started by mpirun (MPIRUN_FLAGS adds flags: -H node0:4,node1:4, --hostfile FILE, -x VAR); rank 0 prints
if [ "${RANKS:-1}" -gt 1 ]; then
  LAUNCH=(mpirun -np "$RANKS")
  [ "$(id -u)" = 0 ] && LAUNCH+=(--allow-run-as-root)
  # shellcheck disable=SC2206 # flags are words
  LAUNCH+=(${MPIRUN_FLAGS:-})
  TRAIN=("${LAUNCH[@]}" "${TRAIN[@]}")
fi

# init
BENCHMARK="${INIT_BENCHMARK:-10}" INITMLPERF=1 "${TRAIN[@]}" | tee "$LOGFILE"

# run
RUNMLPERF=1 "${TRAIN[@]}" | tee -a "$LOGFILE"

# the run report: loss, LR, eval accuracy, step time and throughput curves from the console log
"$ROOT/node_modules/.bin/tsx" "$ROOT/mlperf/bert/report.ts" "$LOGFILE" -o "${LOGFILE%.log}.html"
