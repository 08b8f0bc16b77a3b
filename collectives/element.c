/* collectives/element.c: one element of a buffer of any dtype, as a double. For the
   programs that fill buffers with known values and check results exactly (the
   benchmark, the tests), so each dtype's case is written once. */
#include "collectives/coll.h"

#include <math.h>

double coll_element_get(const void *buf, size_t i, coll_dtype_t dtype) {
  switch (dtype) {
    case COLL_FLOAT32: return ((const float *)buf)[i];
    case COLL_FLOAT64: return ((const double *)buf)[i];
    case COLL_FLOAT16: return coll_half_to_float(((const uint16_t *)buf)[i]);
    case COLL_BFLOAT16: return coll_bfloat16_to_float(((const uint16_t *)buf)[i]);
    case COLL_INT8: return ((const int8_t *)buf)[i];
    case COLL_UINT8: return ((const uint8_t *)buf)[i];
    case COLL_INT32: return ((const int32_t *)buf)[i];
    case COLL_INT64: return (double)((const int64_t *)buf)[i];
  }
  return NAN;
}

void coll_element_set(void *buf, size_t i, coll_dtype_t dtype, double v) {
  switch (dtype) {
    case COLL_FLOAT32: ((float *)buf)[i] = (float)v; break;
    case COLL_FLOAT64: ((double *)buf)[i] = v; break;
    case COLL_FLOAT16: ((uint16_t *)buf)[i] = coll_float_to_half((float)v); break;
    case COLL_BFLOAT16: ((uint16_t *)buf)[i] = coll_float_to_bfloat16((float)v); break;
    case COLL_INT8: ((int8_t *)buf)[i] = (int8_t)v; break;
    case COLL_UINT8: ((uint8_t *)buf)[i] = (uint8_t)v; break;
    case COLL_INT32: ((int32_t *)buf)[i] = (int32_t)v; break;
    case COLL_INT64: ((int64_t *)buf)[i] = (int64_t)v; break;
  }
}
