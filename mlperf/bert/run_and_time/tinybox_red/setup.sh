#!/bin/bash
# One-time setup of a tinybox red before tinybox_red.sh: compute power profile, memory clock
# level 3, high performance level on every GPU (as the reference submission's setup.sh).
set -e
rocm-smi --setprofile compute
rocm-smi --setmclk 3
rocm-smi --setperflevel high

# optional: cap each of the 6 cards at 350 W
# echo "350000000" | sudo tee /sys/class/drm/card{1..6}/device/hwmon/hwmon*/power1_cap
