#!/bin/sh
# Run first by `npm test`: the multi-process tests need Open MPI (mpirun and libmpi). As root on Debian
# (CI, these machines) it is installed here; elsewhere one line says how, and the MPI tests then fail
# naming what is missing (they are never skipped).
if command -v mpirun >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u 2>/dev/null)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "ensure-mpi: mpirun not found, installing Open MPI (openmpi-bin libopenmpi-dev)"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    openmpi-bin libopenmpi-dev >/dev/null && exit 0
  echo "ensure-mpi: installing Open MPI failed; the MPI tests will fail" >&2
  exit 0
fi
echo "ensure-mpi: mpirun not found: install Open MPI (Debian/Ubuntu: sudo apt-get install openmpi-bin libopenmpi-dev; macOS: brew install open-mpi), or the MPI tests in test/dist/ will fail" >&2
