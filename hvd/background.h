/* hvd/background.h: the background loop (hvd/background.c). */
#ifndef HVD_BACKGROUND_H
#define HVD_BACKGROUND_H

#include "hvd/hvd_internal.h"

/* hvd_background_help: hvd_wait's caller runs the background loop's
   turns itself while req is not done and they make progress (see background.c);
   hvd_caller_will_help: set by a blocking call around its submission, which then does
   not wake the background thread. */
void *hvd_background_main(void *arg);
void hvd_background_help(struct hvd_request *req);
/* Whether /dev holds an NVIDIA GPU's device node (the auto rule of HVD_BACKGROUND_NICE). */
int hvd_machine_has_nvidia_gpu(void);
extern _Thread_local int hvd_caller_will_help;

#endif /* HVD_BACKGROUND_H */
