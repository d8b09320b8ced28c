/*
 * rawsend IFNAME HEXFRAME...: sends each Ethernet frame, given in hex, out
 * of IFNAME through a packet socket, in order; exits 0 when all were sent.
 * The anti-spoofing tests' attacker, run in a guest (which always has raw
 * sockets) or a test namespace. Freestanding (no libc, x86_64 Linux
 * syscalls, as vkvm hosts are): the binary is a few KiB, so it reaches the
 * test guest as one `kubectl exec` argument. Built by rawsend.ts.
 */
#include "freestanding.h"

#define SYS_write 1
#define SYS_ioctl 16
#define SYS_socket 41
#define SYS_sendto 44
#define SYS_exit 60
#define AF_PACKET 17
#define SOCK_RAW 3
#define SIOCGIFINDEX 0x8933

struct ifreq {
  char name[16];
  int ifindex;
  char pad[20];
};

struct sockaddr_ll {
  unsigned short family;
  unsigned short protocol;
  int ifindex;
  unsigned short hatype;
  unsigned char pkttype;
  unsigned char halen;
  unsigned char addr[8];
};

static void die(const char *msg) {
  long len = 0;
  while (msg[len]) len++;
  sys(SYS_write, 2, (long)msg, len, 0, 0, 0);
  sys(SYS_exit, 1, 0, 0, 0, 0, 0);
}

static int nibble(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

static unsigned char frame[4096];

void start(long *sp) {
  long argc = sp[0];
  char **argv = (char **)(sp + 1);
  if (argc < 3) die("usage: rawsend IFNAME HEXFRAME...\n");
  long fd = sys(SYS_socket, AF_PACKET, SOCK_RAW, 0, 0, 0, 0);
  if (fd < 0) die("rawsend: socket failed\n");
  struct ifreq ifr;
  for (int i = 0; i < (int)sizeof ifr; i++) ((char *)&ifr)[i] = 0;
  for (int i = 0; i < 15 && argv[1][i]; i++) ifr.name[i] = argv[1][i];
  if (sys(SYS_ioctl, fd, SIOCGIFINDEX, (long)&ifr, 0, 0, 0) < 0) die("rawsend: no such interface\n");
  struct sockaddr_ll to;
  for (int i = 0; i < (int)sizeof to; i++) ((char *)&to)[i] = 0;
  to.family = AF_PACKET;
  to.ifindex = ifr.ifindex;
  to.halen = 6;
  for (long f = 2; f < argc; f++) {
    long n = 0;
    for (const char *h = argv[f]; h[0] && h[1]; h += 2) {
      int hi = nibble(h[0]), lo = nibble(h[1]);
      if (hi < 0 || lo < 0 || n == (long)sizeof frame) die("rawsend: a frame is not hex or too long\n");
      frame[n++] = (unsigned char)(hi << 4 | lo);
    }
    if (n < 14) die("rawsend: a frame is shorter than an Ethernet header\n");
    if (sys(SYS_sendto, fd, (long)frame, n, 0, (long)&to, sizeof to) != n) die("rawsend: sendto failed\n");
  }
  sys(SYS_exit, 0, 0, 0, 0, 0, 0);
}
