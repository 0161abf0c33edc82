/* A fake libcuda.so.1 (CUDA driver API) for ncclenv's check tests: "device memory" is host memory.
 * FAKE_NCCL_GPUS=N sets the device count (default 2; 0 makes cuInit return CUDA_ERROR_NO_DEVICE = 100). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static int gpus(void) { const char *v = getenv("FAKE_NCCL_GPUS"); return v && *v ? atoi(v) : 2; }

int cuInit(unsigned flags) { (void)flags; return gpus() == 0 ? 100 : 0; }
int cuDeviceGetCount(int *n) { *n = gpus(); return 0; }
int cuDeviceGet(int *d, int ordinal) { if (ordinal < 0 || ordinal >= gpus()) return 101; *d = ordinal; return 0; }
int cuDevicePrimaryCtxRetain(void **ctx, int dev) { *ctx = (void *)(intptr_t)(dev + 1); return 0; }
int cuCtxSetCurrent(void *ctx) { (void)ctx; return 0; }
int cuMemAlloc_v2(uint64_t *p, size_t n) { void *m = malloc(n ? n : 1); if (!m) return 2; *p = (uint64_t)(uintptr_t)m; return 0; }
int cuMemcpyHtoD_v2(uint64_t dst, const void *src, size_t n) { memcpy((void *)(uintptr_t)dst, src, n); return 0; }
int cuMemcpyDtoH_v2(void *dst, uint64_t src, size_t n) { memcpy(dst, (const void *)(uintptr_t)src, n); return 0; }
int cuStreamCreate(void **s, unsigned flags) { (void)flags; *s = (void *)1; return 0; }
int cuStreamSynchronize(void *s) { (void)s; return 0; }
int cuGetErrorString(int e, const char **s) { (void)e; *s = "fake cuda error"; return 0; }
