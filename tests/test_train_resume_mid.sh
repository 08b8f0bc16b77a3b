#!/usr/bin/env bash
# Exact resume from mid-epoch checkpoints (--checkpoint-every-steps: the step in the
# epoch, the epoch's metrics so far, every rank's batch-norm statistics) with
# --resume auto: the run killed with SIGKILL goes on from the step of its last mid-epoch
# checkpoint and ends bit for bit as the uninterrupted run, its epoch lines (loss,
# accuracy, val_loss, val_accuracy, lr) the same too. The cases of
# test_train_resume.sh and alexnet (dropout), killed inside the last epoch of a shorter
# run. Under a sanitizer (HVD_TEST_SANITIZER, set by make SANITIZE=... test), which
# looks for memory errors, not figures, resnet20 runs batches of 4 instead of 16, and
# alexnet is left out: its 456 MB checkpoint every step was three quarters of the test's
# time, and the checkpoint and resume code it runs is the other cases' (its one field of
# its own, the dropout step, is a number). This is the only dropout case (see
# test_train_resume.sh).
set -u
cd "$(dirname "$0")/.." || exit 2
. tests/train_resume_prelude.sh

# mlp: 15 steps an epoch, every 4: the kill at step 37 finds the checkpoint of global step 36, step 6 of epoch 3.
every=4 at_step=6 check_case mlp_sgd_mid 37 2 3 --model mlp --dataset synthetic \
  --synthetic-samples 1024 --batch-size 32 --seed 7 --threads 1 --lr 0.02 --warmup-epochs 1 \
  --lr-schedule cosine --bucket-mb 0.5
# resnet20 (each rank's own batch-norm statistics): 5 steps an epoch, every 2: the kill
# at step 9 (9 steps done) finds the checkpoint of 8 steps, step 3 of epoch 2. (Under a
# sanitizer batches of 4: the same 5 steps an epoch at a quarter of the work.)
resnet=(160 16)
[ -n "${HVD_TEST_SANITIZER:-}" ] && resnet=(40 4)
every=2 at_step=3 check_case resnet20_adam_mid 9 1 2 --model resnet20 --dataset synthetic \
  --synthetic-samples "${resnet[0]}" --batch-size "${resnet[1]}" --seed 5 --threads 1 \
  --optimizer adam --augment
# alexnet: 3 steps an epoch, every 1: the kill at step 5 finds step 2 of epoch 2.
[ -n "${HVD_TEST_SANITIZER:-}" ] && exit 0
every=1 at_step=2 check_case alexnet_dropout_mid 5 1 2 --model alexnet \
  --dataset synthetic --synthetic-samples 24 --batch-size 4 --seed 3 --threads 1 --lr 0.001
