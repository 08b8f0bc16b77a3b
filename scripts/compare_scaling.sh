#!/usr/bin/env bash
# compare_scaling.sh: training throughput of bench/cnn_bench against PyTorch DDP (Gloo),
# side by side on this machine (a benchmark, not a test).
#
# For each model, REPS rounds; each round runs every configuration once, in turn
# (A B C ... A B C ...), so slow phases of a shared machine hit all of them alike; the
# table shows medians. Configurations, batch BATCH per rank, one thread per rank:
#   ours np=1, ours np=2 (--variable_update horovod), none np=2 (no communication: the
#   ceiling), np=2 --no-overlap, np=2 --fp16-allreduce, PyTorch np=1, PyTorch DDP np=2.
#
# Usage: scripts/compare_scaling.sh [OUT_DIR]          (default build/scaling)
# Environment: MODELS ("lenet resnet20"), BATCH (64), STEPS (timed steps, 20),
#   WARMUP (3, as the PyTorch peer), REPS (3), BUILD (build), MPIRUN_ARGS (--bind-to none,
#   as the PyTorch processes are not bound either), BUCKET_MB / FIRST_BUCKET_MB (cnn_bench's
#   --bucket_mb / --first_bucket_mb; default: its own, 25 and 1 as PyTorch DDP), CONFIGS
#   (a subset of the names below, e.g. CONFIGS="ours2 nooverlap2"; the table shows nan for
#   the others; barrier2, none np=2 with a barrier after every step, runs only when named
#   here and appears only in scaling_raw.tsv).
# Writes OUT_DIR/scaling_raw.tsv (every run), OUT_DIR/scaling_median.tsv (medians),
# OUT_DIR/scaling_ranks_MODEL.dat (images/sec vs ranks, plain columns; the docs' picture and
# tables come from scaling_raw.tsv by scripts/figures.py: scripts/figure_scaling.sh),
# and prints a markdown table.
set -u
cd "$(dirname "$0")/.."
out=${1:-build/scaling}
build=${BUILD:-build}
models=${MODELS:-lenet resnet20}
batch=${BATCH:-64}
steps=${STEPS:-20}
warmup=${WARMUP:-3}
reps=${REPS:-3}
mpirun_args=${MPIRUN_ARGS:---bind-to none}
bucket_args=()
[ -n "${BUCKET_MB:-}" ] && bucket_args+=(--bucket_mb "$BUCKET_MB")
[ -n "${FIRST_BUCKET_MB:-}" ] && bucket_args+=(--first_bucket_mb "$FIRST_BUCKET_MB")
peer=scripts/peers/torch_ddp_bench.py
py=/usr/bin/python3
bench=$build/cnn_bench

[ -x "$bench" ] || { echo "compare_scaling: $bench not built (run make)" >&2; exit 1; }
[ -f "$peer" ] || { echo "compare_scaling: PyTorch peer $peer not found" >&2; exit 1; }
if ! $py -c 'import torch, torch.distributed' 2>/dev/null; then
  echo "compare_scaling: $py has no torch; installing Debian's python3-torch" >&2
  apt-get install -y python3-torch >/dev/null || { echo "compare_scaling: no torch" >&2; exit 1; }
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
mkdir -p "$out"
raw=$out/scaling_raw.tsv
printf 'model\tconfig\trep\timages_per_sec\thidden_pct\tblocked_ms\tcomm_ms\n' >"$raw"

configs=${CONFIGS:-ours1 ours2 none2 nooverlap2 fp16_2 torch1 torch2}

# run_one MODEL CONFIG -> prints "images/sec hidden% blocked_ms comm_ms" ("nan" where
# absent); blocked = communication not overlapped, per step (cnn_bench's last line)
run_one() {
  local model=$1 cfg=$2 log
  # --optimizer momentum: a momentum buffer, as the PyTorch peer's SGD(momentum=0.9)
  # (cnn_bench's default sgd is tf_cnn_benchmarks' plain gradient descent).
  local common=(--model "$model" --batch_size "$batch" --num_batches "$steps"
                --num_warmup_batches "$warmup" --display_every "$steps" --threads 1
                --optimizer momentum
                ${bucket_args[@]+"${bucket_args[@]}"})
  case $cfg in
    ours1)      log=$(mpirun $mpirun_args -np 1 "$bench" "${common[@]}" 2>&1) ;;
    ours2)      log=$(mpirun $mpirun_args -np 2 "$bench" "${common[@]}" 2>&1) ;;
    none2)      log=$(mpirun $mpirun_args -np 2 "$bench" "${common[@]}" --variable_update none 2>&1) ;;
    barrier2)   log=$(mpirun $mpirun_args -np 2 "$bench" "${common[@]}" --variable_update barrier 2>&1) ;;
    nooverlap2) log=$(mpirun $mpirun_args -np 2 "$bench" "${common[@]}" --no-overlap 2>&1) ;;
    fp16_2)     log=$(mpirun $mpirun_args -np 2 "$bench" "${common[@]}" --fp16-allreduce 2>&1) ;;
    torch1)     log=$(OMP_NUM_THREADS=1 $py "$peer" "$model" "$batch" "$steps" 1 1 2>&1) ;;
    torch2)     log=$(OMP_NUM_THREADS=1 $py "$peer" "$model" "$batch" "$steps" 2 1 2>&1) ;;
  esac
  local ips hidden blocked comm
  ips=$(sed -n 's/^total images\/sec: \([0-9.]*\).*/\1/p' <<<"$log" | tail -n 1)
  hidden=$(sed -n 's/^communication hidden: \([0-9.]*\)%.*/\1/p' <<<"$log" | tail -n 1)
  blocked=$(sed -n 's/^communication hidden: .*not overlapped \([0-9.]*\) ms of \([0-9.]*\) ms.*/\1/p' <<<"$log" | tail -n 1)
  comm=$(sed -n 's/^communication hidden: .*not overlapped \([0-9.]*\) ms of \([0-9.]*\) ms.*/\2/p' <<<"$log" | tail -n 1)
  if [ -z "$ips" ]; then
    echo "compare_scaling: $model $cfg gave no total:" >&2
    tail -n 5 <<<"$log" >&2
    ips=nan
  fi
  echo "$ips ${hidden:-nan} ${blocked:-nan} ${comm:-nan}"
}

# ours1 ours2 none2 nooverlap2 fp16_2 torch1 torch2: see run_one.
for model in $models; do
  for rep in $(seq 1 "$reps"); do
    for cfg in $configs; do
      read -r ips hidden blocked comm < <(run_one "$model" "$cfg")
      printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$model" "$cfg" "$rep" "$ips" "$hidden" \
        "$blocked" "$comm" >>"$raw"
      echo "  $model rep $rep $cfg: $ips images/sec (hidden $hidden%)" >&2
    done
  done
done

# Medians, the table and the plot data.
$py - "$raw" "$out" "$batch" "$steps" "$reps" <<'PY'
import math, statistics, sys, datetime
raw, out, batch, steps, reps = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
rows = [l.rstrip("\n").split("\t") for l in open(raw)][1:]
vals, hid, cost = {}, {}, {}
for model, cfg, rep, ips, h, blocked, comm in rows:
    if ips != "nan": vals.setdefault((model, cfg), []).append(float(ips))
    if h != "nan": hid.setdefault((model, cfg), []).append(float(h))
    if ips != "nan" and blocked != "nan":
        # share of the step spent blocked on communication: blocked / step time, with
        # the step time from the total (ranks * batch / total images/sec)
        ranks = 1 if cfg.endswith("1") else 2
        step_ms = 1e3 * ranks * int(batch) / float(ips)
        cost.setdefault((model, cfg), []).append(100 * float(blocked) / step_ms)
def med(d, k):
    return statistics.median(d[k]) if k in d else float("nan")
models = list(dict.fromkeys(r[0] for r in rows))
cfgs = ["ours1", "ours2", "none2", "nooverlap2", "fp16_2", "torch1", "torch2"]
with open(out + "/scaling_median.tsv", "w") as f:
    f.write("model\t" + "\t".join(cfgs) + "\thidden_ours2\thidden_fp16_2\n")
    for m in models:
        f.write(m + "\t" + "\t".join("%.2f" % med(vals, (m, c)) for c in cfgs)
                + "\t%.1f\t%.1f\n" % (med(hid, (m, "ours2")), med(hid, (m, "fp16_2"))))
for m in models:
    with open("%s/scaling_ranks_%s.dat" % (out, m), "w") as f:
        f.write("# ranks ours pytorch_ddp none_ceiling (total images/sec, medians; the\n"
                "# ceiling at 1 rank is ours at 1 rank)\n")
        f.write("1 %.2f %.2f %.2f\n" % (med(vals, (m, "ours1")), med(vals, (m, "torch1")),
                                        med(vals, (m, "ours1"))))
        f.write("2 %.2f %.2f %.2f\n" % (med(vals, (m, "ours2")), med(vals, (m, "torch2")),
                                        med(vals, (m, "none2"))))
print("Measured %s, batch %s per rank, one thread per rank, %s timed steps, median of %s"
      " alternating rounds (total images/sec):\n" % (datetime.date.today(), batch, steps, reps))
print("| model | ours np=1 | ours np=2 | none np=2 (ceiling) | np=2 no overlap | np=2 fp16 allreduce | PyTorch np=1 | PyTorch DDP np=2 |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
for m in models:
    print("| %s | " % m + " | ".join("%.1f" % med(vals, (m, c)) for c in cfgs) + " |")
print("\n| model | ours/DDP at np=2 (goal >= 1.2) | scaling efficiency ours | scaling efficiency none | ours/none efficiency (goal >= 0.95) | overlap on/off | fp16 on/off | communication hidden (ours, fp16) | step blocked on communication (ours, no overlap, fp16) |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
for m in models:
    g = lambda c: med(vals, (m, c))
    eff_ours = g("ours2") / 2 / g("ours1")
    eff_none = g("none2") / 2 / g("ours1")
    print("| %s | %.2f | %.1f%% | %.1f%% | %.2f | %.2f | %.2f | %.0f%%, %.0f%% | %.1f%%, %.1f%%, %.1f%% |" % (
        m, g("ours2") / g("torch2"), 100 * eff_ours, 100 * eff_none, eff_ours / eff_none,
        g("ours2") / g("nooverlap2"), g("fp16_2") / g("ours2"),
        med(hid, (m, "ours2")), med(hid, (m, "fp16_2")), med(cost, (m, "ours2")),
        med(cost, (m, "nooverlap2")), med(cost, (m, "fp16_2"))))
PY
