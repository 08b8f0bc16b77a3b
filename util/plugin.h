/* util/plugin.h: the one loader of a backend library (dlopen), for nn/cuda_loader.c
   (libnn_cuda.so.0) and hvd/device_loader.c (libhvd_cuda.so.0).

   A backend exports one function (the entry point) that returns its table of functions;
   every such table starts with `int abi; size_t size;` (the table's version and sizeof
   in the backend's build), so that a backend of another build is refused with a message
   instead of called through a wrong table. util_plugin_load looks for the backend next
   to the library that calls it (where make install puts both), else wherever the
   dynamic loader finds its soname (LD_LIBRARY_PATH, ld.so.cache). It never prints: on
   failure it says why in the caller's buffer, and the caller decides what to do (nn
   reports the device as unavailable, hvd logs a warning and takes every buffer for host
   memory). Not thread-safe by itself: the callers load once, under a lock or a
   pthread_once. */
#ifndef UTIL_PLUGIN_H
#define UTIL_PLUGIN_H

#include <stddef.h>

typedef struct {
  const void *anchor;       /* an address in the calling library (one of its statics)     */
  const char *soname;       /* "libnn_cuda.so.0"                                          */
  const char *symbol;       /* the entry point's name                                     */
  /* Calls the entry point found at sym (cast to the caller's own function type, so that
     the call is made through the right type) and returns the table. */
  const void *(*call_entry)(void *sym);
  const char *library;      /* the calling library, for messages: "nn" (libnn)           */
  int abi;                  /* the version and size of the table this build expects      */
  size_t size;
  /* Optional: further checks on a table of the right version and size (0 refuses it),
     and what they check, for the message ("other device operations"). */
  int (*accept)(const void *table);
  const char *accept_what;
} util_plugin_spec_t;

/* Loads spec->soname and returns its table, or NULL with why (a message naming the
   library and what failed: the loader's error, the path tried next to the caller, a
   missing entry point, a table of another build) when it cannot; a library that was
   opened but refused is closed again. */
const void *util_plugin_load(const util_plugin_spec_t *spec, char *why, size_t why_len)
    __attribute__((visibility("hidden")));

#endif /* UTIL_PLUGIN_H */
