#!/bin/sh
# Run first by `npm test`: the AMD compile tests (test/amd/compile.test.ts, test/cuda/op_kernels.test.ts) build
# gfx1100 code objects with hipcc, which Debian 12 packages (HIP 5.2, with ROCm's device libraries and clang-15's
# AMDGPU target). As root on Debian (CI, these machines) it is installed here (about 2 minutes); elsewhere one line
# says how, and those tests skip naming what is missing.
if command -v hipcc >/dev/null 2>&1 && [ -e /usr/lib/x86_64-linux-gnu/amdgcn/bitcode/ockl.bc ] || [ -x /opt/rocm/bin/hipcc ]; then
  exit 0
fi
if [ "$(id -u 2>/dev/null)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "ensure-hip: hipcc not found, installing Debian's hipcc and rocm-device-libs"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    hipcc rocm-device-libs >/dev/null && exit 0
  echo "ensure-hip: installing hipcc failed; the AMD compile tests will skip" >&2
  exit 0
fi
echo "ensure-hip: hipcc not found: install it (Debian 12: sudo apt-get install --no-install-recommends hipcc rocm-device-libs; or ROCm), or the AMD compile tests will skip" >&2
