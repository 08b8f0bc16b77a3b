/* data/example.c: tf.train.Example records as tf_cnn_benchmarks' ImageNet TFRecords hold
   them, parsed with protobuf-c (proto/tensorflow/core/example/, upstream's messages), the
   maintained parser of the format rather than a hand-written one. */
#include "data/data.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef HVD_NO_PROTOBUF

int data_example_parse(const uint8_t *rec, size_t len, uint8_t **image, size_t *image_len,
                       int64_t *label, char *err, size_t errlen) {
  (void)rec, (void)len, (void)label;
  *image = NULL;
  *image_len = 0;
  snprintf(err, errlen, "TFRecord input: this build has no protobuf-c (built with "
           "PROTOBUF=none); rebuild with protobuf-c (scripts/install-deps.sh) to read TFRecords");
  return -1;
}

#else

#include "tensorflow/core/example/example.pb-c.h"

static const Tensorflow__Feature *find(const Tensorflow__Features *fs, const char *key) {
  for (size_t i = 0; i < fs->n_feature; i++)
    if (fs->feature[i]->key && strcmp(fs->feature[i]->key, key) == 0) return fs->feature[i]->value;
  return NULL;
}

int data_example_parse(const uint8_t *rec, size_t len, uint8_t **image, size_t *image_len,
                       int64_t *label, char *err, size_t errlen) {
  *image = NULL;
  *image_len = 0;
  Tensorflow__Example *ex = tensorflow__example__unpack(NULL, len, rec);
  if (!ex) {
    snprintf(err, errlen, "not a tf.train.Example (protobuf-c cannot parse the %zu bytes)",
             len);
    return -1;
  }
  int rc = -1;
  const Tensorflow__Feature *img = ex->features ? find(ex->features, "image/encoded") : NULL;
  const Tensorflow__Feature *lab = ex->features ? find(ex->features, "image/class/label") : NULL;
  if (!img || img->kind_case != TENSORFLOW__FEATURE__KIND_BYTES_LIST ||
      img->bytes_list->n_value < 1) {
    snprintf(err, errlen, "the Example has no image/encoded bytes");
  } else if (!lab || lab->kind_case != TENSORFLOW__FEATURE__KIND_INT64_LIST ||
             lab->int64_list->n_value < 1) {
    snprintf(err, errlen, "the Example has no image/class/label int64");
  } else {
    const ProtobufCBinaryData *b = &img->bytes_list->value[0];
    *image = malloc(b->len ? b->len : 1);
    if (!*image) {
      snprintf(err, errlen, "out of memory (%zu bytes of image)", b->len);
    } else {
      memcpy(*image, b->data, b->len);
      *image_len = b->len;
      *label = lab->int64_list->value[0];
      rc = 0;
    }
  }
  tensorflow__example__free_unpacked(ex, NULL);
  return rc;
}

#endif
