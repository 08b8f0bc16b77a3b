/* serve/image_input.h: encoded images as model input, for both protocols (REST's
   {"b64": "..."}, gRPC's DT_STRING): JPEG decoded by TurboJPEG, PNG by libpng, to grey
   (models of 1 channel) or RGB (3), resized to the model's h x w (bilinear, pixel
   centres aligned) when their size differs, and normalised as the version's export
   records with the arithmetic of serve/instances.c (a pixel k gives bit for bit what
   the float k/255 gives there). One file so that the image decoder of data/ can replace
   it. Errors: -1 with one line in err. */
#ifndef SERVE_IMAGE_INPUT_H
#define SERVE_IMAGE_INPUT_H

#include "serve/instances.h"

#include <stddef.h>
#include <stdint.h>

#define SERVE_IMAGE_MAX_PIXELS (16u << 20) /* larger images are refused before decoding */

/* bytes[0..len) (JPEG or PNG) -> x[c][h][w] of spec, normalised. */
int serve_image_decode(const uint8_t *bytes, size_t len, const serve_input_spec_t *spec,
                       float *x, char *err, size_t errlen);
/* Standard base64 (RFC 4648, padding optional, no line breaks) -> *out (malloc'ed) of
   *outlen bytes; -1 on a character outside the alphabet or a malformed length. */
int serve_base64_decode(const char *in, size_t len, uint8_t **out, size_t *outlen);

#endif /* SERVE_IMAGE_INPUT_H */
