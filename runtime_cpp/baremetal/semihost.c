/* Semihosting calls (Arm "Semihosting for AArch32 and AArch64", version 2). */
#include "semihost.h"

enum {
  SYS_OPEN = 0x01,
  SYS_CLOSE = 0x02,
  SYS_WRITE0 = 0x04,
  SYS_WRITE = 0x05,
  SYS_READ = 0x06,
  SYS_FLEN = 0x0C,
  SYS_EXIT = 0x18,
  SYS_EXIT_EXTENDED = 0x20,
  ADP_STOPPED_APPLICATION_EXIT = 0x20026
};

static int call_host(int operation, const void* argument) {
  register int r0 __asm__("r0") = operation;
  register const void* r1 __asm__("r1") = argument;
  /* "memory": the host reads and writes the blocks r1 points to. */
  __asm__ volatile("bkpt 0xAB" : "+r"(r0) : "r"(r1) : "memory");
  return r0;
}

static size_t length_of(const char* text) {
  size_t n = 0;
  while (text[n] != '\0') ++n;
  return n;
}

int tinsmith_sh_open(const char* path, int mode) {
  const uintptr_t block[3] = {(uintptr_t)path, (uintptr_t)mode, (uintptr_t)length_of(path)};
  return call_host(SYS_OPEN, block);
}

int tinsmith_sh_read_exact(int fd, void* to, size_t bytes) {
  const uintptr_t block[3] = {(uintptr_t)fd, (uintptr_t)to, (uintptr_t)bytes};
  return call_host(SYS_READ, block) == 0; /* the host returns the count NOT read */
}

int tinsmith_sh_write_all(int fd, const void* from, size_t bytes) {
  const uintptr_t block[3] = {(uintptr_t)fd, (uintptr_t)from, (uintptr_t)bytes};
  return call_host(SYS_WRITE, block) == 0; /* the host returns the count NOT written */
}

long tinsmith_sh_file_length(int fd) {
  const uintptr_t block[1] = {(uintptr_t)fd};
  return call_host(SYS_FLEN, block);
}

int tinsmith_sh_close(int fd) {
  const uintptr_t block[1] = {(uintptr_t)fd};
  return call_host(SYS_CLOSE, block) == 0;
}

void tinsmith_sh_puts(const char* text) { call_host(SYS_WRITE0, text); }

int tinsmith_sh_write_field(int fd, const char* label, uint64_t value) {
  char digits[21];
  char* first = digits + sizeof digits;
  do {
    *--first = (char)('0' + (int)(value % 10u));
    value /= 10u;
  } while (value != 0u);
  return tinsmith_sh_write_all(fd, label, length_of(label)) && tinsmith_sh_write_all(fd, " ", 1) &&
         tinsmith_sh_write_all(fd, first, (size_t)(digits + sizeof digits - first)) &&
         tinsmith_sh_write_all(fd, "\n", 1);
}

void tinsmith_sh_exit(int status) {
  /* SYS_EXIT_EXTENDED carries the status; plain SYS_EXIT on 32-bit cores cannot. */
  const uintptr_t block[2] = {ADP_STOPPED_APPLICATION_EXIT, (uintptr_t)status};
  call_host(SYS_EXIT_EXTENDED, block);
  for (;;) {
  }
}
