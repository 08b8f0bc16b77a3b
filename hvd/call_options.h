/* hvd/call_options.h: the options of the _ex call running on this thread
   (hvd/call_options.c). */
#ifndef HVD_CALL_OPTIONS_H
#define HVD_CALL_OPTIONS_H

#include "hvd/hvd_internal.h"

/* Validates o (NULL: none) and makes it this thread's current options; an error is set
   for the caller. leave ends them and returns s. */
hvd_status_t hvd_call_options_enter(const hvd_options_t *o, const char *what);
hvd_status_t hvd_call_options_leave(hvd_status_t s);
/* Scale factors need a floating-point dtype. */
hvd_status_t hvd_call_options_check_dtype(hvd_dtype_t dtype, const char *what);

#endif /* HVD_CALL_OPTIONS_H */
