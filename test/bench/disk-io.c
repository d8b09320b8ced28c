/*
 * disk-io MODE PATH MIB [SECONDS]: one fio-style job with direct I/O
 * (O_DIRECT, one request in flight, as fio's psync engine with iodepth 1)
 * on the first MIB MiB of PATH, a file or a block device:
 *   seq-write   1 MiB writes from offset 0 to MIB MiB, then fsync
 *   seq-read    1 MiB reads of the same
 *   rand-read   4 KiB reads at random 4 KiB-aligned offsets for SECONDS
 *   rand-write  4 KiB writes likewise for SECONDS, then fsync
 * and prints one line: `MODE bytes=B ops=N ns=T` (T covers the I/O and the
 * fsync). The storage bench runs the same binary on the node and in the test
 * guest (test/bench/storage-io.ts parses the line). Freestanding (no libc,
 * x86_64 Linux syscalls), so it is a few KiB and reaches the guest as one
 * `kubectl exec` argument, as test/helpers/rawsend.c does: the test guest
 * has no fio, and Debian's links Ceph and Gluster libraries.
 */
#include "../helpers/freestanding.h"

#define SYS_write 1
#define SYS_open 2
#define SYS_mmap 9
#define SYS_pread64 17
#define SYS_pwrite64 18
#define SYS_fsync 74
#define SYS_exit 60
#define SYS_clock_gettime 228
#define O_RDONLY 0
#define O_RDWR 02
#define O_CREAT 0100
#define O_DIRECT 040000
#define CLOCK_MONOTONIC 1
#define SEQ_BLOCK (1L << 20)
#define RAND_BLOCK 4096L

static char line[160];
static long used;

static void put(const char *s) {
  while (*s && used < (long)sizeof line) line[used++] = *s++;
}

static void putNumber(unsigned long v) {
  char digits[24];
  int n = 0;
  do digits[n++] = (char)('0' + v % 10); while ((v /= 10) != 0);
  while (n > 0 && used < (long)sizeof line) line[used++] = digits[--n];
}

static void flush(int fd) {
  sys(SYS_write, fd, (long)line, used, 0, 0, 0);
  used = 0;
}

/* Exits 1 naming what failed and the kernel's errno. */
static void fail(const char *what, long ret) {
  put("disk-io: ");
  put(what);
  put(" failed, errno ");
  putNumber((unsigned long)-ret);
  put("\n");
  flush(2);
  sys(SYS_exit, 1, 0, 0, 0, 0, 0);
}

static int same(const char *a, const char *b) {
  while (*a && *a == *b) a++, b++;
  return *a == *b;
}

static unsigned long number(const char *s) {
  unsigned long v = 0;
  if (!*s) fail("a number argument", -22);
  for (; *s; s++) {
    if (*s < '0' || *s > '9') fail("a number argument", -22);
    v = v * 10 + (unsigned long)(*s - '0');
  }
  return v;
}

static unsigned long nowNs(void) {
  long ts[2];
  sys(SYS_clock_gettime, CLOCK_MONOTONIC, (long)ts, 0, 0, 0, 0);
  return (unsigned long)ts[0] * 1000000000UL + (unsigned long)ts[1];
}

static unsigned long xorshift(unsigned long *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

void start(long *sp) {
  long argc = sp[0];
  char **argv = (char **)(sp + 1);
  if (argc < 4) fail("usage: disk-io seq-write|seq-read|rand-read|rand-write PATH MIB [SECONDS]", -22);
  const char *mode = argv[1];
  int seqWrite = same(mode, "seq-write"), seqRead = same(mode, "seq-read");
  int randRead = same(mode, "rand-read"), randWrite = same(mode, "rand-write");
  if (!seqWrite && !seqRead && !randRead && !randWrite) fail("the mode", -22);
  unsigned long span = number(argv[3]) << 20;
  unsigned long seconds = (randRead || randWrite) ? (argc > 4 ? number(argv[4]) : 0) : 0;
  if ((randRead || randWrite) && seconds == 0) fail("SECONDS (random modes need it)", -22);
  int writes = seqWrite || randWrite;
  long fd = sys(SYS_open, (long)argv[2], (writes ? O_RDWR | O_CREAT : O_RDONLY) | O_DIRECT, 0600, 0, 0, 0);
  if (fd < 0) fail("open", fd);
  /* mmap gives page-aligned memory, as O_DIRECT needs. */
  unsigned char *buf = (unsigned char *)sys(SYS_mmap, 0, SEQ_BLOCK, 3, 0x22, -1, 0);
  if ((long)buf < 0) fail("mmap", (long)buf);
  unsigned long seed = 0x9e3779b97f4a7c15UL;
  /* Bytes that are not zeros: no layer may skip or compress them. */
  for (long i = 0; i < SEQ_BLOCK; i += 8) *(unsigned long *)(buf + i) = xorshift(&seed);

  unsigned long ops = 0, bytes = 0, t0 = nowNs(), t1;
  if (seqWrite || seqRead) {
    for (unsigned long off = 0; off < span; off += SEQ_BLOCK, ops++) {
      long r = sys(seqWrite ? SYS_pwrite64 : SYS_pread64, fd, (long)buf, SEQ_BLOCK, (long)off, 0, 0);
      if (r != SEQ_BLOCK) fail(seqWrite ? "pwrite" : "pread", r < 0 ? r : -5);
    }
    bytes = span;
  } else {
    unsigned long pages = span / RAND_BLOCK, deadline = t0 + seconds * 1000000000UL;
    if (pages == 0) fail("MIB (must be at least 1)", -22);
    /* The clock is read every 16 requests: a syscall each is a cost of its own under TCG. */
    while ((ops & 15) != 0 || nowNs() < deadline) {
      long off = (long)(xorshift(&seed) % pages * RAND_BLOCK);
      long r = sys(randWrite ? SYS_pwrite64 : SYS_pread64, fd, (long)buf, RAND_BLOCK, off, 0, 0);
      if (r != RAND_BLOCK) fail(randWrite ? "pwrite" : "pread", r < 0 ? r : -5);
      ops++;
    }
    bytes = ops * RAND_BLOCK;
  }
  if (writes) {
    long r = sys(SYS_fsync, fd, 0, 0, 0, 0, 0);
    if (r < 0) fail("fsync", r);
  }
  t1 = nowNs();
  put(mode);
  put(" bytes=");
  putNumber(bytes);
  put(" ops=");
  putNumber(ops);
  put(" ns=");
  putNumber(t1 - t0);
  put("\n");
  flush(1);
  sys(SYS_exit, 0, 0, 0, 0, 0, 0);
}
