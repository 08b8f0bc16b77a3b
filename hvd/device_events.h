/* hvd/device_events.h: the pool of CUDA events of the device path (hvd/device_events.c).
   Events are passed as void * (cudaEvent_t), so that files without CUDA may hold them. */
#ifndef HVD_DEVICE_EVENTS_H
#define HVD_DEVICE_EVENTS_H

/* A timing-free event of the current GPU, from the pool or new: 0, or the CUDA error. */
int hvd_device_event_take(void **event);
void hvd_device_event_give(void *event);   /* back to the pool (never fails)  */
void hvd_device_events_destroy(void);      /* the pooled ones (shutdown)      */

#endif /* HVD_DEVICE_EVENTS_H */
