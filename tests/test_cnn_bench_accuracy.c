/* test_cnn_bench_accuracy: the top_1/top_5 accuracy cnn_bench prints with --forward_only
   and --print_training_accuracy (bench/cnn_bench.c top_k_accuracy, included here with
   its main renamed), against cases worked by hand: tf.nn.in_top_k's rule (the label
   is in the top k when fewer than k classes score strictly higher; ties count for it;
   a non-finite logit of the label never does), and the batch order (step k takes
   batch k mod nb). */
#define main cnn_bench_main
#include "bench/cnn_bench.c"
#undef main

#include "tests/check.h"

static void near(const char *what, double got, double want) {
  CHECK(fabs(got - want) < 1e-12, "%s: %.6f, expected %.6f", what, got, want);
}

int main(void) {
  /* 4 samples, 6 classes. */
  const float logits[4][6] = {
      {0.1f, 0.9f, 0.2f, 0.3f, 0.4f, 0.5f},   /* label 1: the largest: top-1 and top-5 */
      {0.6f, 0.5f, 0.4f, 0.3f, 0.2f, 0.1f},   /* label 5: the smallest, 5 above: neither */
      {0.6f, 0.5f, 0.4f, 0.3f, 0.2f, 0.1f},   /* label 4: 4 above: top-5 only */
      {0.7f, 0.7f, 0.1f, 0.1f, 0.1f, 0.1f},   /* label 1: tied with class 0: top-1 */
  };
  const int32_t labels[4] = {1, 5, 4, 1};
  double top1, top5;
  top_k_accuracy(&logits[0][0], labels, 4, 6, &top1, &top5);
  near("top_1 of 4 samples", top1, 2.0 / 4);
  near("top_5 of 4 samples", top5, 3.0 / 4);

  /* Fewer than 5 classes: every finite label is in the top 5. */
  const float three[2][3] = {{1, 2, 3}, {3, 2, 1}};
  const int32_t l3[2] = {0, 0};
  top_k_accuracy(&three[0][0], l3, 2, 3, &top1, &top5);
  near("top_1, 3 classes", top1, 0.5);
  near("top_5, 3 classes", top5, 1.0);

  /* A NaN or infinite logit of the label never counts; a NaN elsewhere does not block. */
  const float bad[3][3] = {{NAN, 0, 0}, {INFINITY, 0, 0}, {1, NAN, 0}};
  const int32_t lb[3] = {0, 0, 0};
  top_k_accuracy(&bad[0][0], lb, 3, 3, &top1, &top5);
  near("top_1 with non-finite logits", top1, 1.0 / 3);
  near("top_5 with non-finite logits", top5, 1.0 / 3);

  /* Batches in turn: step k takes batch k mod nb. */
  float images[3 * 2] = {0, 0, 1, 1, 2, 2};
  int32_t lab[3 * 2] = {0, 1, 2, 3, 4, 5};
  trainer_t t = {.images = images, .labels = lab, .nb = 3, .image_floats = 2, .batch = 2};
  for (int64_t k = 0; k < 7; k++) {
    CHECK(batch_images(&t, k)[0] == (float)(k % 3), "step %lld took images of batch %g",
          (long long)k, (double)batch_images(&t, k)[0]);
    CHECK(batch_labels(t.labels, &t, k)[1] == (int32_t)(2 * (k % 3) + 1),
          "step %lld took labels %d", (long long)k, batch_labels(t.labels, &t, k)[1]);
  }
  if (failures) {
    printf("test_cnn_bench_accuracy: %d failure(s)\n", failures);
    return 1;
  }
  printf("test_cnn_bench_accuracy: all passed\n");
  return 0;
}
