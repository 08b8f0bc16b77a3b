/* data/crc32c.c: CRC-32C (Castagnoli), the checksum of TFRecord files. A byte-wise table
   is plenty: the CRC costs a small fraction of decoding the image it covers. */
#include "data/data.h"

#include <pthread.h>

static uint32_t table[256];
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void make_table(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
    table[i] = c;
  }
}

uint32_t data_crc32c(uint32_t crc, const void *buf, size_t len) {
  pthread_once(&table_once, make_table);
  const uint8_t *p = buf;
  crc = ~crc;
  while (len--) crc = table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
  return ~crc;
}

uint32_t data_crc32c_masked(const void *buf, size_t len) {
  uint32_t c = data_crc32c(0, buf, len);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}
