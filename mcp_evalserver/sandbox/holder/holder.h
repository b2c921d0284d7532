/* mcp-evalserver: what the compiled holder's files share (the program: see holder.c's top).
 * The system headers, the sizes the supervisor's exec_init.py shares with them, the settings,
 * and what each file offers the others. */
#ifndef MCP_EVALSERVER_HOLDER_H
#define MCP_EVALSERVER_HOLDER_H

#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* exec_init.py's INLINE_REQUEST_MAX and EXEC_MESSAGE_MAX. */
#define INLINE_REQUEST_MAX (32 << 10)
#define EXEC_MESSAGE_MAX (INLINE_REQUEST_MAX + 256)

/* exec_init.py's FRAME: a kind byte, a big-endian length, that many bytes; kinds: the
 * command's stdout, its stderr, a JSON line. FRAME_CHUNK: exec_init.py's too. */
#define FRAME_HEADER 5
#define FRAME_CHUNK ((64 << 10) - FRAME_HEADER)

/* The settings (holder.c: read_settings fills them). */
extern unsigned long long KEPT_CAPS;
extern const char *root, *mask_file, *mask_dir;
extern unsigned char *seccomp_program;
extern size_t seccomp_len;
extern int info_fd; /* runner.c: the exec's info pipe, in its runner */
extern int init_ns; /* holder.c: the workspace's pid namespace, in the holder */

/* wire.c: frames on the info pipe, messages on the sockets. */
void write_all(int fd, const char *data, size_t len);
void frame_header(char *at, char kind, size_t len);
void send_frame(int fd, char *frame, char kind, size_t len);
void report_error(int fd, const char *kind, const char *fmt, ...);
char *next_field(char **at, char *end);
int header_says(const char *message, size_t len, const char *word);
int exec_fds(const char *message, size_t len);
int receive(int sock, char *msg, size_t size, int *fds, size_t *len);

/* confine.c: what confines a command, and the init. */
int lookup_user(const char *user, uid_t *uid, gid_t *gid, gid_t *groups, int *ngroups,
                char *home, size_t home_size);
void drop_bounding_set(void);
void drop_privileges(const uid_t *uid, gid_t gid, const gid_t *groups, int ngroups);
void confine_runner(void);
void mount_proc(void);
void set_limit(int resource, long long n);
int find_program(const char *name, const char *path, char *out, size_t size,
                 const char **reason);

/* runner.c: an exec's runner. */
void setup_failed(const char *what);
void reset_signals(void);
void runner_main(int sock);

#endif
