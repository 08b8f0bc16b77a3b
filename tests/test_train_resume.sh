#!/usr/bin/env bash
# Exact resume from epoch-end checkpoints: a 2-rank run killed with SIGKILL in mid-epoch
# and resumed from its last checkpoint ends with the same weights, byte for byte, as the
# uninterrupted run with the same seed and ranks (exported safetensors compared with cmp).
# Three cases:
#  - mlp, SGD with momentum, warm-up and a cosine schedule: optimizer state, epoch and
#    lr have to carry over;
#  - resnet20 (batch norm: running statistics and num_batches_tracked), Adam, augmentation.
# Dropout's mask counter (alexnet) is test_train_resume_mid.sh's case alone: it resumes
# the counter through the same checkpoint code from a mid-epoch checkpoint, the harder
# position; alexnet's 57M parameters made a case here cost 25-60 s of the CI's time.
# The mid-epoch checkpoints are test_train_resume_mid.sh's (two files keep each under
# the runner's time limit in the sanitizer builds).
# Under a sanitizer (HVD_TEST_SANITIZER, set by make SANITIZE=... test), which looks for
# memory errors, not figures: each run is one epoch shorter (the resumed run trains one
# epoch).
set -u
cd "$(dirname "$0")/.." || exit 2
. tests/train_resume_prelude.sh

epochs_mlp=4 epochs_resnet=3
[ -n "${HVD_TEST_SANITIZER:-}" ] && epochs_mlp=3 epochs_resnet=2

# 1024 synthetic samples, 10% held out: 922 train, 461 per rank, 15 steps of 32 per epoch;
# step 37 is step 7 of epoch 3.
check_case mlp_sgd 37 2 "$epochs_mlp" --model mlp --dataset synthetic --synthetic-samples 1024 \
  --batch-size 32 --seed 7 --threads 1 --lr 0.02 --warmup-epochs 1 --lr-schedule cosine --bucket-mb 0.5
# 160 samples: 144 train, 72 per rank, 5 steps of 16; step 6 is step 1 of epoch 2.
check_case resnet20_adam 6 1 "$epochs_resnet" --model resnet20 --dataset synthetic \
  --synthetic-samples 160 --batch-size 16 --seed 5 --threads 1 --optimizer adam --augment

