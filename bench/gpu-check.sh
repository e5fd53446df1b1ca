#!/usr/bin/env bash
# Every GPU check in one run, for the next session that is lent a GPU (see ../shared/device/README.md):
#   1. the op test-suite on the CUDA device (correctness, against the float64 references),
#   2. tsgrad's tensor-core kernels against the JS device on small odd shapes (again at two wgmma tiles:
#      wgmma_checks), then float16 GEMM TFLOP/s (and two of them again at every tile BEAM may choose,
#      mma.sync and wgmma, block and warp shapes and pipeline depths, each tile's output checked against
#      the default tile's, after the BERT step),
#   3. PyTorch on the same GPU: the same GEMMs through cuBLAS and the same BERT-large float16 train step,
#   4. tsgrad's BERT-large float16 train step at sequence 512 (jitted), with a per-kernel profile, and
#      again with its tensor-core kernels on a wgmma tile (WGMMA_TILE, default 128x256x64:wgmma),
#   5. a 2-layer BERT-large step checked kernel by kernel against the CPU device (bench/gpu/validate.ts),
# then summary.json with the ratios. Each part runs under a watchdog with its own time limit; all of it
# fits in GPU_CHECK_S seconds (default 470, about 8 minutes).
#
# Here, with node_modules (bundles the code with esbuild, packs Node and koffi's linux x64 binary into .device/):
#   bench/gpu-check.sh --prepare
# On the GPU machine (the run tool, carrying [".device"]):
#   source .device/unpack.sh; bash bench/gpu-check.sh
# Results go to $OUT (default ./gpu-results): summary.json, gpu-check.log (with every failing op test) and
# results.tgz (JSON per part, the op suite's TAP output, nvidia-smi): three files, as the device tool
# brings back at most eight. BERT_BATCH (default 8) sets the batch of both BERT steps; GPU_CHECK_S (default
# 470) is the whole run's budget in seconds, shared out over the parts in proportion; PARTS (default
# ops,diag,gemm,torch,bert,bert_wgmma,validate, run in that order) picks which parts run.
#
# Without a GPU, `bench/gpu-check.sh --emulate` runs the same script on the CPU emulator of a CUDA GPU
# (test/cuda/emu) with small sizes (tiny BERT, small GEMMs; PyTorch's script on the CPU where a Python here has
# torch: `apt-get install python3-torch`): a dry run of every part, the bundles and the summary before a session
# spends device time on them. It needs --prepare first and g++.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

small=${GPU_CHECK_SMALL:-0}
if [ "${1:-}" = "--emulate" ]; then
  emu=$(mktemp -d "${TMPDIR:-/tmp}/tsgrad-gpu-check-emu-XXXXXX")
  library=$(npx tsx test/cuda/emu/build.ts "$emu") || { rm -rf "$emu"; exit 2; }
  export TSGRAD_LIBCUDA="$library" TSGRAD_LIBNVRTC="$library" TG_EMU_CACHE="$emu/modules" GPU_CHECK_CACHE="$emu/cache"
  # bert_wgmma is left out: emulated wgmma products make that step take 12 minutes (PARTS=bert_wgmma
  # GPU_CHECK_S=6000 runs it: same losses as the mma.sync step)
  export PARTS=${PARTS:-ops,diag,gemm,torch,bert,validate} OUT=${OUT:-$root/gpu-results-emulated}
  small=1
  # the parts run the bundles: a source changed since --prepare would be tested as it was
  stale=$(find src models mlperf bench test/core \( -name '*.ts' -o -name '*.py' \) -newer .device/bundle/bert_step.mjs 2>/dev/null | head -3)
  if [ ! -f .device/bundle/bert_step.mjs ] || [ -n "$stale" ]; then
    echo "gpu-check --emulate: the bundles in .device are missing or older than $(echo ${stale:-the sources} | tr "\n" " ")(run bench/gpu-check.sh --prepare first)" >&2
    rm -rf "$emu"
    exit 2
  fi
fi

OP_TESTS="elementwise nn_ops reduce_movement regressions jit autograd_assign conv activations einsum scan sort upsample"

if [ "${1:-}" = "--help" ]; then
  sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi

if [ "${1:-}" = "--prepare" ]; then
  set -e
  bash "$root/../shared/device/pack-node.sh" >/dev/null
  rm -rf .device/bundle .device/node_modules
  mkdir -p .device/bundle/tests .device/node_modules/@koromix
  # (bench/gpu/bundle.ts: the tests run an op-test bundle made the same way)
  npx tsx bench/gpu/bundle.ts .device/bundle bench/gpu/gemm.ts bench/gpu/bert_step.ts bench/gpu/validate.ts bench/gpu/int_reduce_check.ts bench/gpu/nccl_check.ts
  npx tsx bench/gpu/bundle.ts .device/bundle/tests $(for t in $OP_TESTS; do echo "test/core/$t.test.ts"; done)
  cp bench/gpu/torch_bench.py .device/bundle/
  # koffi loads its native module from @koromix/koffi-<platform> beside it: only linux x64 (glibc) travels
  cp -r node_modules/koffi .device/node_modules/
  mkdir -p .device/node_modules/@koromix/koffi-linux-x64
  cp node_modules/@koromix/koffi-linux-x64/package.json node_modules/@koromix/koffi-linux-x64/index.js .device/node_modules/@koromix/koffi-linux-x64/ 2>/dev/null || true
  cp -r node_modules/@koromix/koffi-linux-x64/linux_x64 .device/node_modules/@koromix/koffi-linux-x64/
  du -sh .device >&2
  exit 0
fi

OUT=${OUT:-$root/gpu-results}
mkdir -p "$OUT"
results=$(mktemp -d)
start=$(date +%s)
log() { echo "[gpu-check $(($(date +%s) - start)) s] $*" | tee -a "$results/gpu-check.log" >&2; }
# the emulator is slow (fibers, host-compiled kernels): its dry run gets half an hour
budget=${GPU_CHECK_S:-$([ "$small" = 1 ] && echo 1800 || echo 470)}
share() { echo $((budget * $1 / 470)); }
# whatever happens, what was measured comes back
finish() {
  for name in gemm torch bert bert_wgmma; do
    [ -s "$results/$name.err" ] && { echo "--- $name stderr (tail)"; tail -40 "$results/$name.err"; } >> "$results/gpu-check.log"
  done
  tar czf "$OUT/results.tgz" -C "$results" . 2>/dev/null
  cp "$results/gpu-check.log" "$OUT/" 2>/dev/null
  [ -f "$results/summary.json" ] && cp "$results/summary.json" "$OUT/"
  if [ "${1:-}" = last ]; then
    rm -rf "$results" # all of it is in $OUT/results.tgz
    [ -n "${emu:-}" ] && rm -rf "$emu"
  fi
  true
}
trap 'finish last' EXIT
bundle=.device/bundle
if [ ! -d "$bundle" ] || ! command -v node >/dev/null; then
  echo "gpu-check: run 'bench/gpu-check.sh --prepare' first, and 'source .device/unpack.sh' on the GPU machine" >&2
  exit 2
fi

# the environment: GPU, driver, NVRTC (searched once and printed), a fresh kernel cache
nvidia-smi > "$results/nvidia-smi.txt" 2>&1 || true
nvrtc=$( (ldconfig -p 2>/dev/null | awk '/libnvrtc\.so/ {print $NF}'; ls /usr/local/cuda*/lib64/libnvrtc.so* 2>/dev/null;
  python3 -c 'import nvidia.cuda_nvrtc as m, os; d = os.path.join(list(m.__path__)[0], "lib"); print("\n".join(os.path.join(d, f) for f in os.listdir(d)))' 2>/dev/null) \
  | grep -v builtins | grep 'libnvrtc\.so' | head -1)
[ -z "${TSGRAD_LIBNVRTC:-}" ] && [ -n "$nvrtc" ] && export TSGRAD_LIBNVRTC="$nvrtc"
# libcuda.so.1 where the dynamic loader does not look (some driver folders are not in its cache)
if [ -z "${TSGRAD_LIBCUDA:-}" ] && ! ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1'; then
  libcuda=$(ls /usr/lib/x86_64-linux-gnu/libcuda.so.1 /usr/lib64/libcuda.so.1 /usr/local/nvidia/lib64/libcuda.so.1 /usr/lib/wsl/lib/libcuda.so.1 2>/dev/null | head -1)
  [ -n "$libcuda" ] && export TSGRAD_LIBCUDA="$libcuda"
fi
log "node $(node --version), libcuda: ${TSGRAD_LIBCUDA:-libcuda.so.1}, nvrtc: ${TSGRAD_LIBNVRTC:-none (nvcc fallback: $(command -v nvcc || echo none))}"
export TSGRAD_CACHE="${GPU_CHECK_CACHE:-${TMPDIR:-/tmp}/tsgrad-gpu-check-cache}"
# no CPU device: the op tests run on CUDA and on JS (the reference) only
export CC=/nonexistent/cc
batch=${BERT_BATCH:-$([ "$small" = 1 ] && echo 2 || echo 8)}

# Each part runs in the background under a watchdog: a GPU kernel that never ends leaves its process
# stuck in the driver, where no signal reaches it, so the check abandons it and goes on.
setsid=$(command -v setsid || true)
part() { # part NAME LIMIT_S OUTFILE COMMAND...
  local name=$1 limit=$2 out=$3 waited=0
  shift 3
  # in a process group of its own, so that its children go with it (node --test runs each file in a child,
  # which outlived the runner when only the runner was killed)
  $setsid "$@" > "$out" 2>> "$results/$name.err" &
  local pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    if [ "$waited" -ge "$limit" ]; then
      kill -9 -- "-$pid" 2>/dev/null || { pkill -9 -P "$pid"; kill -9 "$pid"; } 2>/dev/null
      log "$name: still running after ${limit} s, abandoned (a hung kernel?)"
      return 124
    fi
    sleep 1
    waited=$((waited + 1))
  done
  wait "$pid"
  local status=$?
  finish # what is measured so far comes back, even if a later part outlives the run
  return $status
}
wanted() { [[ ",$PARTS," == *",$1,"* ]]; }
PARTS=${PARTS:-ops,diag,gemm,torch,bert,bert_wgmma,validate}
WGMMA_TILE=${WGMMA_TILE:-128x256x64:wgmma}

if wanted ops; then
  log "op suite on CUDA"
  tests=$(for t in $OP_TESTS; do echo "$bundle/tests/$t.test.mjs"; done)
  part ops "$(share 170)" "$results/op_suite.tap" node --test --test-reporter=tap $tests
  echo "{\"exit\": $?, \"pass\": $(awk '/^# pass/ {print $3}' "$results/op_suite.tap" | tail -1 | grep . || echo null), \"fail\": $(awk '/^# fail/ {print $3}' "$results/op_suite.tap" | tail -1 | grep . || echo null)}" > "$results/op_suite.json"
  log "op suite: $(cat "$results/op_suite.json")"
  # each failing test with the start of its error, into the log
  grep -A14 '^ *not ok' "$results/op_suite.tap" | grep -v '^ *\(duration_ms\|location\|failureType\|stack\|---\)' | head -300 >> "$results/gpu-check.log"
fi

# diagnostics: the int32 max kernel that is wrong on an H200 (NVRTC vs nvcc, variants, NVRTC's PTX), and
# one-off checks a session may drop into .device/bundle/diag.mjs
if wanted diag; then
  part diag 30 "$results/int_reduce_check.json" node "$bundle/int_reduce_check.mjs"
  log "int reduce check exit $?: $(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("tsgrad", d["via_tsgrad"], "nvrtc", d["nvrtc"], "nvcc", d["nvcc"])' "$results/int_reduce_check.json" 2>/dev/null)"
  # NCCL from PyTorch's nvidia-nccl wheel, one rank (issue 34)
  if [ -z "${TSGRAD_LIBNCCL:-}" ]; then
    TSGRAD_LIBNCCL=$(python3 -c 'import os, nvidia.nccl as m; print(os.path.join(list(m.__path__)[0], "lib", "libnccl.so.2"))' 2>/dev/null) && export TSGRAD_LIBNCCL
  fi
  part diag 30 "$results/nccl_check.json" node "$bundle/nccl_check.mjs"
  log "nccl check exit $?: $(cat "$results/nccl_check.json" 2>/dev/null)"
  if [ -f "$bundle/diag.mjs" ]; then
    part diag 30 "$results/diag.txt" node "$bundle/diag.mjs"
    log "diag exit $?"
  fi
fi

if wanted gemm; then
  log "tsgrad float16 GEMMs"
  part gemm "$(share 90)" "$results/tsgrad_gemm.json" node "$bundle/gemm.mjs" $([ "$small" = 1 ] && echo --shapes 256x384x512 --runs 2)
  log "tsgrad gemm exit $?"
  # Hopper's wgmma tiles on the same checks (every layout of the factors, split k, bfloat16), each tile
  # in a process of its own (the tile is chosen when the device opens); elsewhere they say it is no sm_90
  for tile in 128x128x32:wgmma 128x256x64:wgmma; do
    TC_TILE=$tile part gemm "$(share 15)" "$results/wgmma_checks_${tile%%:*}.json" node "$bundle/gemm.mjs" --checks-only
    log "wgmma checks $tile exit $?: $(head -c 400 "$results/wgmma_checks_${tile%%:*}.json")"
  done
fi

if wanted torch; then
  # the first Python that has torch (PYTHON picks one)
  python=${PYTHON:-}
  if [ -z "$python" ]; then
    for candidate in python3 /usr/bin/python3 python; do
      "$candidate" -c 'import torch' 2>/dev/null && { python=$candidate; break; }
    done
  fi
  if [ -n "$python" ] && [ "$small" = 1 ]; then
    # the dry run: the same script on the CPU in float32, tiny BERT
    log "PyTorch ($python) on the CPU: the script's dry run"
    part torch "$(share 100)" "$results/torch.json" "$python" "$bundle/torch_bench.py" --device cpu --preset tiny --batch "$batch" --seq 64 --steps 2 --shapes 256x384x512 --runs 2
    log "torch exit $?: $(head -c 400 "$results/torch.json")"
  elif [ -n "$python" ]; then
    log "PyTorch ($python): cuBLAS GEMMs and the BERT-large step"
    part torch "$(share 100)" "$results/torch.json" "$python" "$bundle/torch_bench.py" --batch "$batch"
    log "torch exit $?"
  else
    log "torch skipped: no Python here imports torch (python3, /usr/bin/python3, python; PYTHON=... names another)"
  fi
fi

if wanted bert; then
  log "tsgrad BERT-$([ "$small" = 1 ] && echo "tiny float16 step, batch $batch, seq 64" || echo "large float16 step, batch $batch, seq 512")"
  remaining=$((budget - ($(date +%s) - start) - $(wanted validate && share 60 || echo 0) - $(wanted gemm && share 45 || echo 0) - $(wanted bert_wgmma && share 60 || echo 0)))
  DEBUG=1 part bert "$((remaining > 60 ? remaining : 60))" "$results/tsgrad_bert.json" node "$bundle/bert_step.mjs" --batch "$batch" \
    --profile-out "$results/tsgrad_bert_profile.json" \
    $([ "$small" = 1 ] && echo --preset tiny --seq 64 --steps 2 || echo --seq 512 --steps 3)
  log "tsgrad bert exit $?"
fi

# the tensor-core tiles: two GEMMs again at every tile BEAM may choose (the default tile ran above)
if wanted gemm; then
  part gemm "$(share 45)" "$results/tsgrad_gemm_tiles.json" node "$bundle/gemm.mjs" --no-checks --tiles \
    $([ "$small" = 1 ] && echo --shapes 256x384x512 --runs 2 || echo --shapes 16384x4096x1024,4096x4096x4096 --runs 5)
  log "tsgrad gemm by tile exit $?"
fi

# the same BERT step with every pipelined tensor-core kernel on a wgmma tile (H100/H200: the tile sweep
# above says how the tiles compare on two GEMMs; this, on the step)
if wanted bert_wgmma; then
  log "tsgrad BERT step again, TC_TILE=$WGMMA_TILE"
  TC_TILE=$WGMMA_TILE DEBUG=1 part bert_wgmma "$(share 60)" "$results/tsgrad_bert_wgmma.json" node "$bundle/bert_step.mjs" --batch "$batch" \
    $([ "$small" = 1 ] && echo --preset tiny --seq 64 --steps 2 || echo --seq 512 --steps 2)
  log "tsgrad bert (wgmma) exit $?"
fi

if wanted validate; then
  log "BERT-$([ "$small" = 1 ] && echo tiny || echo large) (2 layers) float16 step kernel by kernel against the CPU device (last: it hung once)"
  if command -v "${REFERENCE_CC:-cc}" >/dev/null; then
    CC="${REFERENCE_CC:-cc}" part validate "$(share 60)" "$results/validate.json" node "$bundle/validate.mjs" --batch 2 --layers 2 --steps 2 \
      $([ "$small" = 1 ] && echo --preset tiny --seq 32 || echo --seq 128)
    log "validate exit $?: $(head -c 600 "$results/validate.json")"
  else
    log "validate skipped: no C compiler for the CPU reference"
  fi
fi

python3 - "$results" <<'SUMMARY'
import json, os, sys
out = sys.argv[1]
def load(name):
    try:
        with open(os.path.join(out, name)) as f:
            return json.load(f)
    except Exception as e:
        return {"error": f"{name}: {e}"}
ours, torch, ours_bert, ops, check = load("tsgrad_gemm.json"), load("torch.json"), load("tsgrad_bert.json"), load("op_suite.json"), load("validate.json")
ours_wgmma = load("tsgrad_bert_wgmma.json")
cublas = {g["shape"]: g for g in torch.get("gemm", [])}
checks = {"pass": ours.get("checks_pass"), "errors": ours.get("checks")}
gemm = [dict(shape=g["shape"], tsgrad_tflops=g["tflops"], cublas_tflops=cublas.get(g["shape"], {}).get("tflops"),
             ratio=round(g["tflops"] / cublas[g["shape"]]["tflops"], 3) if cublas.get(g["shape"], {}).get("tflops") else None) for g in ours.get("gemm", [])]
bert = dict(tsgrad=ours_bert, torch=torch.get("bert"))
if "ms_per_step" in ours_bert and torch.get("bert"):
    bert["speed_ratio_vs_torch"] = round(torch["bert"]["ms_per_step"] / ours_bert["ms_per_step"], 3)
if os.path.exists(os.path.join(out, "tsgrad_bert_wgmma.json")):
    bert["tsgrad_wgmma"] = ours_wgmma
    if "ms_per_step" in ours_wgmma and torch.get("bert"):
        bert["wgmma_speed_ratio_vs_torch"] = round(torch["bert"]["ms_per_step"] / ours_wgmma["ms_per_step"], 3)
validate = {k: check.get(k) for k in ("kernels_checked", "disagreeing", "first_non_finite", "losses", "error")}
ints = load("int_reduce_check.json")
nccl = load("nccl_check.json")
int_check = {k: ints.get(k) for k in ("expected", "via_tsgrad", "nvrtc", "nvcc", "error")}
tiles = load("tsgrad_gemm_tiles.json")
wgmma_checks = {}
for name in sorted(os.listdir(out)):
    if name.startswith("wgmma_checks_"):
        w = load(name)
        wgmma_checks[w.get("tc_tile") or name] = {"pass": w.get("checks_pass"), "errors": w.get("checks"), "error": w.get("error")}
by_tile = {g["shape"]: dict(tflops=g.get("tflops_by_tile"), difference_from_default=g.get("difference_by_tile")) for g in tiles.get("gemm", [])} or tiles.get("error")
summary = dict(gpu=torch.get("gpu"), op_suite=ops, int_reduce_check=int_check, nccl=nccl, kernel_check=validate, tensor_core_checks=checks, wgmma_checks=wgmma_checks, gemm=gemm,
               default_tile=ours.get("tc_tile"), gemm_tflops_by_tile=by_tile, bert=bert)
with open(os.path.join(out, "summary.json"), "w") as f:
    json.dump(summary, f, indent=1)
print(json.dumps(summary, indent=1))
SUMMARY
log "done"
