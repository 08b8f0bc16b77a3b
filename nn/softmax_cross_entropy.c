/* nn/softmax_cross_entropy.c: softmax + cross-entropy, mean over the batch.
   loss_i = logsumexp(z_i) - z_i[label], computed with the row maximum subtracted so
   exp never overflows; d(mean loss)/dz_i = (softmax(z_i) - onehot(label)) / n. */
#include "nn/nn.h"

#include <math.h>

nn_status_t nn_softmax_cross_entropy(int n, int k, const float *logits,
                                     const int32_t *labels, float *loss, int *correct,
                                     float *dlogits) {
  if (n < 1 || k < 1)
    return nn_set_error(NN_ERR_ARG, "nn_softmax_cross_entropy: bad shape n=%d k=%d", n, k);
  if (!logits || !labels)
    return nn_set_error(NN_ERR_ARG, "nn_softmax_cross_entropy: logits or labels is NULL");
  for (int i = 0; i < n; i++)
    if (labels[i] < 0 || labels[i] >= k)
      return nn_set_error(NN_ERR_ARG, "nn_softmax_cross_entropy: label %d of row %d is outside [0, %d)",
                          labels[i], i, k);
  double total = 0;
  int right = 0;
  const float inv_n = 1.0f / (float)n;
  for (int i = 0; i < n; i++) {
    const float *z = logits + (size_t)i * k;
    int arg = 0;
    float mx = z[0];
    for (int j = 1; j < k; j++)
      if (z[j] > mx) {
        mx = z[j];
        arg = j;
      }
    double sum = 0;
    for (int j = 0; j < k; j++) sum += exp((double)z[j] - mx);
    double lse = mx + log(sum);
    total += lse - z[labels[i]];
    right += arg == labels[i];
    if (dlogits) {
      float *d = dlogits + (size_t)i * k;
      for (int j = 0; j < k; j++) d[j] = (float)(exp((double)z[j] - lse)) * inv_n;
      d[labels[i]] -= inv_n;
    }
  }
  if (loss) *loss = (float)(total / n);
  if (correct) *correct = right;
  return NN_OK;
}
