#!/usr/bin/env bash
# figure_allreduce.sh: one command for the allreduce picture and its table. Runs
# scripts/compare_allreduce.sh (hvd, the bare ring, MPI_Allreduce in our bench and in the
# MPI peer, Gloo, MPI_Sendrecv; interleaved rounds, medians), keeps its output, and makes
# from that one output both docs/img/allreduce_busbw.png and the table beside it
# (docs/img/allreduce_busbw.md, spliced into docs/performance.md), with the date, the
# commit and the machine's load in the table's header (scripts/figures.py).
#   usage: scripts/figure_allreduce.sh [compare_allreduce.sh's flags: -np N -reps R -b MIN -e MAX --no-gloo]
#   env:   HVD_BUILD (build), MACHINE_NOTE ("machine shared/loaded"; on a quiet machine
#          e.g. MACHINE_NOTE="machine otherwise idle"), FIGURES_DOCS (docs/performance.md;
#          '' leaves the docs alone)
set -u
cd "$(dirname "$0")/.."
build=${HVD_BUILD:-build}
out=$build/figures
mkdir -p "$out"
/usr/bin/python3 -c 'import matplotlib' 2>/dev/null || apt-get install -y python3-matplotlib >/dev/null ||
  { echo "figure_allreduce: no matplotlib (apt-get install -y python3-matplotlib)" >&2; exit 1; }
load=$(cut -d' ' -f1-3 /proc/loadavg)
HVD_BUILD=$build scripts/compare_allreduce.sh "$@" | tee "$out/compare_allreduce.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || { echo "figure_allreduce: compare_allreduce.sh failed" >&2; exit 1; }
echo "figure_allreduce: the run's output is $out/compare_allreduce.txt"
exec /usr/bin/python3 scripts/figures.py allreduce "$out/compare_allreduce.txt" \
  --load-start "$load" --docs "${FIGURES_DOCS-docs/performance.md}" \
  --command "scripts/figure_allreduce.sh${*:+ $*}"
