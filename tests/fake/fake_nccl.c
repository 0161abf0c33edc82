/* A fake libnccl.so.2 for ncclenv's check tests (tests/it/check_fake.rs). Built by the tests with
 * `cc -shared -fPIC`. It implements the few NCCL entry points ncclenv-check calls, with the real signatures
 * (src/nccl.h.in), and exchanges the ranks' buffers through files so that the allreduce really sums what each
 * rank process sent.
 *
 * Steering (environment):
 *   FAKE_NCCL_MODE     ok (default) | wrong_sum | init_error | hang | crash | needs_shm_disable | bootstrap_error
 *   FAKE_NCCL_VERSION  ncclGetVersion value (default 22707)
 *   FAKE_NCCL_CODE     result code for bootstrap_error (default 5)
 *   FAKE_NCCL_ADDR     IPv4 address put into the unique id (default 127.0.0.1)
 *   FAKE_NCCL_RANK     the rank that hangs or crashes (default 1)
 *   FAKE_NCCL_DIR      folder for the exchange files (default /tmp)
 *   FAKE_NCCL_CHECK_IFNAME=1  ncclGetUniqueId fails as NCCL >= 2.24 does (ncclInvalidUsage, "Bootstrap : no
 *                      socket interface found") when NCCL_SOCKET_IFNAME (a list of prefixes, `=` for exact
 *                      names; `^` exclusions are taken as matching) names no interface of /sys/class/net
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct { char internal[128]; } ncclUniqueId;
typedef struct fakeComm { int nranks, rank, seq; char key[40]; } *ncclComm_t;

static char last_err[512] = "";

static const char *mode(void) { const char *m = getenv("FAKE_NCCL_MODE"); return m ? m : "ok"; }
static int is(const char *m) { return strcmp(mode(), m) == 0; }
static int env_int(const char *n, int d) { const char *v = getenv(n); return v && *v ? atoi(v) : d; }
static void forever(void) { for (;;) pause(); }

int ncclGetVersion(int *v) { *v = env_int("FAKE_NCCL_VERSION", 22707); return 0; }

const char *ncclGetErrorString(int c) {
  switch (c) {
  case 0: return "no error";
  case 1: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
  case 2: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
  case 3: return "internal error - please report this issue to the NCCL developers";
  case 4: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
  case 5: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
  case 6: return "remote process exited or there was a network error";
  default: return "unknown result code";
  }
}

const char *ncclGetLastError(ncclComm_t comm) { (void)comm; return last_err; }

/* True when FAKE_NCCL_CHECK_IFNAME=1 and NCCL_SOCKET_IFNAME matches no interface (src/misc/socket.cc
 * matchIfList: prefixes, `=` exact). */
static int ifname_unmatched(void) {
  const char *v = getenv("NCCL_SOCKET_IFNAME");
  if (!env_int("FAKE_NCCL_CHECK_IFNAME", 0) || !v || !*v || v[0] == '^') return 0;
  int exact = v[0] == '=';
  char list[256];
  snprintf(list, sizeof list, "%s", v + exact);
  DIR *d = opendir("/sys/class/net");
  if (!d) return 0;
  int found = 0;
  struct dirent *e;
  while (!found && (e = readdir(d)) != NULL) {
    char copy[256];
    snprintf(copy, sizeof copy, "%s", list);
    for (char *save = NULL, *t = strtok_r(copy, ",", &save); t && !found; t = strtok_r(NULL, ",", &save))
      found = exact ? strcmp(e->d_name, t) == 0 : strncmp(e->d_name, t, strlen(t)) == 0;
  }
  closedir(d);
  return !found;
}

int ncclGetUniqueId(ncclUniqueId *id) {
  if (ifname_unmatched()) {
    snprintf(last_err, sizeof last_err, "Bootstrap : no socket interface found");
    return 5;
  }
  if (is("bootstrap_error")) {
    snprintf(last_err, sizeof last_err, "Bootstrap : no socket interface found");
    return env_int("FAKE_NCCL_CODE", 5);
  }
  memset(id, 0, sizeof *id);
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  uint64_t magic = ((uint64_t)getpid() << 32) ^ (uint64_t)ts.tv_nsec ^ (uint64_t)ts.tv_sec;
  memcpy(id->internal, &magic, 8);
  uint16_t fam = 2; /* AF_INET, little-endian on the host */
  uint16_t port = htons(12345);
  struct in_addr a;
  const char *as = getenv("FAKE_NCCL_ADDR");
  if (!as || inet_pton(AF_INET, as, &a) != 1) inet_pton(AF_INET, "127.0.0.1", &a);
  memcpy(id->internal + 8, &fam, 2);
  memcpy(id->internal + 10, &port, 2);
  memcpy(id->internal + 12, &a, 4);
  return 0;
}

int ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank) {
  if (is("init_error")) {
    snprintf(last_err, sizeof last_err, "fake: socket connect to bootstrap root failed");
    return 2;
  }
  struct fakeComm *c = calloc(1, sizeof *c);
  if (!c) return 2;
  c->nranks = nranks;
  c->rank = rank;
  for (int i = 0; i < 8; i++) sprintf(c->key + 2 * i, "%02x", (unsigned char)id.internal[i]);
  *comm = c;
  return 0;
}

int ncclAllReduce(const void *send, void *recv, size_t count, int dtype, int op, ncclComm_t c, void *stream) {
  (void)stream;
  if (dtype != 7 || op != 0) { snprintf(last_err, sizeof last_err, "fake: only float32 sum"); return 4; }
  int special = env_int("FAKE_NCCL_RANK", 1);
  if (is("hang") && c->rank == special) forever();
  if (is("crash") && c->rank == special) raise(SIGSEGV);
  if (is("needs_shm_disable")) {
    const char *s = getenv("NCCL_SHM_DISABLE");
    if (!s || strcmp(s, "1") != 0) {
      snprintf(last_err, sizeof last_err,
               "Error while creating shared memory segment /dev/shm/nccl-fake (size 9637888)");
      return 2;
    }
  }
  const char *dir = getenv("FAKE_NCCL_DIR");
  if (!dir || !*dir) dir = "/tmp";
  size_t bytes = count * sizeof(float);
  char path[1024], tmp[1100];
  snprintf(path, sizeof path, "%s/fake-nccl-%s-%d-%d", dir, c->key, c->seq, c->rank);
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "wb");
  if (!f || fwrite(send, 1, bytes, f) != bytes) { snprintf(last_err, sizeof last_err, "fake: cannot write the exchange file"); return 2; }
  fclose(f);
  rename(tmp, path);
  float *acc = calloc(count, sizeof(float));
  float *part = malloc(bytes);
  if (!acc || !part) return 2;
  for (int r = 0; r < c->nranks; r++) {
    snprintf(path, sizeof path, "%s/fake-nccl-%s-%d-%d", dir, c->key, c->seq, r);
    int waited = 0;
    while ((f = fopen(path, "rb")) == NULL) {
      usleep(1000);
      if (++waited > 60000) { snprintf(last_err, sizeof last_err, "fake: rank %d never sent", r); return 6; }
    }
    size_t got = fread(part, 1, bytes, f);
    fclose(f);
    if (got != bytes) { snprintf(last_err, sizeof last_err, "fake: short read"); return 2; }
    for (size_t i = 0; i < count; i++) acc[i] += part[i];
  }
  if (is("wrong_sum") && c->rank == 0 && count > 0) acc[count / 2] += 1.0f;
  memcpy(recv, acc, bytes);
  free(acc);
  free(part);
  c->seq++;
  return 0;
}

int ncclCommDestroy(ncclComm_t c) { free(c); return 0; }
