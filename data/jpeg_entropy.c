/* data/jpeg_entropy.c: a JPEG's entropy (Huffman) decoding alone, every coefficient of
   every block, with no inverse DCT, upsampling or colour conversion. No DCT scaling or
   region decoding avoids this pass over the rows above a crop's bottom edge (a
   sequential JPEG's blocks can only be found by decoding the ones before them), so its
   rate bounds what those savings can reach; data_bench prints it beside the others. */
#include "data/data.h"

#include <stdio.h>

#ifdef HVD_NO_IMAGES

int data_jpeg_entropy_decode(const uint8_t *buf, size_t len, char *err, size_t errlen) {
  (void)buf, (void)len;
  snprintf(err, errlen, "image input: this build has no libjpeg-turbo (built with "
           "IMAGES=none); rebuild with it (scripts/install-deps.sh)");
  return -1;
}

#else

#include <jpeglib.h>
#include <setjmp.h>

typedef struct {
  struct jpeg_error_mgr pub;
  jmp_buf jmp;
  char msg[JMSG_LENGTH_MAX];
} entropy_err_t;

static void entropy_exit(j_common_ptr c) {
  entropy_err_t *e = (entropy_err_t *)c->err;
  c->err->format_message(c, e->msg);
  longjmp(e->jmp, 1);
}

static void entropy_emit(j_common_ptr c, int level) {
  if (level < 0) entropy_exit(c);   /* corrupt data fails, as in the decoder */
}

int data_jpeg_entropy_decode(const uint8_t *buf, size_t len, char *err, size_t errlen) {
  struct jpeg_decompress_struct ci;
  entropy_err_t je;
  volatile int rc = -1;
  ci.err = jpeg_std_error(&je.pub);
  je.pub.error_exit = entropy_exit;
  je.pub.emit_message = entropy_emit;
  if (len > 0x7fffffff) {
    snprintf(err, errlen, "JPEG of %zu bytes (at most 2 GiB)", len);
    return -1;
  }
  if (setjmp(je.jmp) == 0) {
    jpeg_create_decompress(&ci);
    jpeg_mem_src(&ci, buf, (unsigned long)len);
    jpeg_read_header(&ci, TRUE);
    if (ci.image_width > DATA_MAX_SIDE || ci.image_height > DATA_MAX_SIDE ||
        (uint64_t)ci.image_width * ci.image_height > DATA_MAX_PIXELS) {
      snprintf(err, errlen, "image of %ux%u pixels: more than this reader takes",
               ci.image_width, ci.image_height);
    } else if (jpeg_read_coefficients(&ci) != NULL) {   /* the whole entropy pass */
      rc = 0;
    } else {
      snprintf(err, errlen, "bad JPEG data (no coefficients)");
    }
  } else {
    snprintf(err, errlen, "bad JPEG data (%s)", je.msg);
  }
  jpeg_destroy_decompress(&ci);
  return rc;
}

#endif
