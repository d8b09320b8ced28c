/*
 * What a freestanding x86_64 Linux program (no libc; built by
 * freestanding.ts) needs: raw syscalls, and a _start that hands `start` the
 * initial stack (argc, then argv). The program defines
 * `void start(long *sp)`, which must end with SYS_exit.
 */
static long sys(long n, long a, long b, long c, long d, long e, long f) {
  long ret;
  register long r10 __asm__("r10") = d;
  register long r8 __asm__("r8") = e;
  register long r9 __asm__("r9") = f;
  __asm__ volatile("syscall" : "=a"(ret) : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9) : "rcx", "r11", "memory");
  return ret;
}

/* The kernel starts a static binary with argc at the stack pointer. */
__asm__(".text\n.global _start\n_start:\n\txor %rbp, %rbp\n\tmov %rsp, %rdi\n\tand $-16, %rsp\n\tcall start\n\thlt\n");
