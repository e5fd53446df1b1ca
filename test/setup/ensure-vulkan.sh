#!/bin/sh
# Run first by `npm test`: the WEBGPU tests run Dawn (npm's optional `webgpu` package) on a Vulkan driver, here
# SwiftShader from Debian's Chromium (ensure-chromium.sh), which needs the Vulkan loader, libvulkan1. As root on
# Debian (CI, these machines) it is installed here; elsewhere one line says how, and the WEBGPU tests then fail
# naming what is missing (test/webgpu/ is never skipped).
if ldconfig -p 2>/dev/null | grep -q 'libvulkan\.so\.1'; then
  exit 0
fi
if [ "$(id -u 2>/dev/null)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "ensure-vulkan: libvulkan.so.1 not found, installing the Vulkan loader (libvulkan1)"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    libvulkan1 >/dev/null && exit 0
  echo "ensure-vulkan: installing libvulkan1 failed; the WEBGPU tests will fail" >&2
  exit 0
fi
echo "ensure-vulkan: libvulkan.so.1 not found: install the Vulkan loader (Debian/Ubuntu: sudo apt-get install libvulkan1), or the WEBGPU tests in test/webgpu/ will fail" >&2
