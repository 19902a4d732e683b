/* Semihosting: file and console I/O on the debug host (or emulator) of a bare-metal core.
 *
 * Each call traps with `bkpt 0xAB`, which QEMU (-semihosting-config enable=on) and debug
 * probes answer on the host. Without a host attached the trap is a HardFault, so only
 * test and measurement firmware should use this. Written here rather than taken from
 * newlib's rdimon so that nothing pulls in stdio or the heap. */
#ifndef TINSMITH_SEMIHOST_H
#define TINSMITH_SEMIHOST_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Open modes of SYS_OPEN, as fopen() spells them. */
enum { TINSMITH_SH_READ_BINARY = 1, TINSMITH_SH_WRITE_BINARY = 5 };

/* A host file handle, or -1 on failure. */
int tinsmith_sh_open(const char* path, int mode);
/* Reads exactly `bytes` bytes; nonzero on success. */
int tinsmith_sh_read_exact(int fd, void* to, size_t bytes);
/* Writes all `bytes` bytes; nonzero on success. */
int tinsmith_sh_write_all(int fd, const void* from, size_t bytes);
/* Length of an open file in bytes, or -1. */
long tinsmith_sh_file_length(int fd);
/* Nonzero on success. */
int tinsmith_sh_close(int fd);
/* Writes a NUL-terminated string to the host's console. */
void tinsmith_sh_puts(const char* text);
/* Writes "label value\n" to an open file; nonzero on success. */
int tinsmith_sh_write_field(int fd, const char* label, uint64_t value);
/* Ends the emulated program; the emulator exits with `status`. */
__attribute__((noreturn)) void tinsmith_sh_exit(int status);

#ifdef __cplusplus
}
#endif

#endif /* TINSMITH_SEMIHOST_H */
