/* mcp-evalserver: a workspace's holder, compiled (see native.py; the Holder of
 * supervisor/holders.py is the same program in Python, and the fallback wherever this one
 * cannot be built).
 *
 * Why compiled: an idle holder only keeps its workspace's namespaces alive, and every exec is
 * a child it clones. In Python the holder is a forked interpreter (about 2 MB of its own) and
 * each exec's runner page-faults its way through that interpreter before it reaches execve;
 * here the holder is a few pages and the init a handful of system calls.
 *
 * The supervisor's Python holder prepares everything (cgroup, namespaces, the view at ROOT)
 * and then execs this program, which keeps them:
 *
 *     holder SETTINGS_FD
 *
 * SETTINGS_FD is a memfd holding NUL-terminated CTL_FD ROOT MASK_FILE MASK_DIR KEPT_CAPS (the
 * capabilities a command keeps, as a decimal mask: isolation.py's kept_mask), then the
 * seccomp filter each runner installs and its commands inherit (raw BPF, to the end).
 * CTL_FD is a SOCK_SEQPACKET socket to the supervisor; each message is one of
 *     "exec JOB[ stdin][ report][ memfd]\nREQUEST" with fds (SCM_RIGHTS) info, then the
 *                    read end of the command's stdin, its report channel and the request's
 *                    memfd, each only if its word is there (with "memfd" the request is in
 *                    that fd, not inline)
 *     "kill JOB"     "drop spare" (answered "dropped")     "respare"
 * anything else is ignored; end of file ends the holder.
 * The request is supervisor/exec_init.py's encode_exec_request: NUL-terminated fields
 *     cwd user pids memory have_nproc have_memory argc argv... envc env...
 * inline up to INLINE_REQUEST_MAX bytes (exec_init.exec_message), else in a memfd.
 * The workspace's processes live in one pid namespace, the workspace's, whose pid 1 (its
 * "init", see init_main) lives as long as the workspace's view and reaps every orphan: what
 * a command leaves running (`server &`, nohup, setsid, a double fork) goes on across the
 * trajectory's calls, and dies with the init (the holder's death kills it, and the kernel
 * kills a pid namespace whose init dies). Its /proc is mounted in the view.
 * An exec runs on a runner: a process outside that namespace (so no command can see or
 * signal it) that forks the command into it with stdout and stderr pipes of its own making
 * (and an empty stdin if none came), confines it exactly as exec_init.py's sandbox_init does,
 * and relays it on the info pipe, the one pipe the supervisor reads per exec: its output as
 * frames (exec_init.py's FRAME: kind, length, bytes) until it exits, then {"status": N} (or
 * the child's {"error": ...}) as a JSON frame, and the end of the pipe. The command never
 * holds the info pipe, so nothing it prints can pose as a frame. What a process it left
 * running writes to its pipes after that, the runner reads and drops (see sinks). A runner
 * serves one exec at a time, and exec after exec (see struct runner). "kill JOB" kills the command's process group: the command, and what
 * it started that stayed in its group (`cmd &`, pipelines; not setsid's or setpgid's).
 */
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

#define REPORT_FD 4
#define DEFAULT_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#define MAX_FIELDS_BYTES (64 << 20)
/* exec_init.py's INLINE_REQUEST_MAX and EXEC_MESSAGE_MAX. */
#define INLINE_REQUEST_MAX (32 << 10)
#define EXEC_MESSAGE_MAX (INLINE_REQUEST_MAX + 256)

/* The same lists as supervisor/view.py (PROC_MASKED, PROC_READONLY). */
static const char *const PROC_MASKED[] = {"kcore", "keys", "timer_list", "sched_debug",
                                          "latency_stats", "acpi", "scsi"};
static const char *const PROC_READONLY[] = {"sys", "sysrq-trigger", "irq", "bus", "fs"};
/* What a command keeps, as a mask of capability numbers (isolation.py's KEPT_CAPS, from the
 * settings): none, or Docker's default set for a container. */
static unsigned long long KEPT_CAPS;

static const char *root, *mask_file, *mask_dir;
static unsigned char *seccomp_program;
static size_t seccomp_len;

/* --- the info pipe: frames ---------------------------------------------------------------- */
/* exec_init.py's FRAME: a kind byte, a big-endian length, that many bytes; kinds: the
 * command's stdout, its stderr, a JSON line. FRAME_CHUNK: exec_init.py's too. */
#define FRAME_HEADER 5
#define FRAME_CHUNK ((64 << 10) - FRAME_HEADER)
#define AFTER_EXIT_CHUNKS 16 /* exec_init.py's: what is read of a stream once its command exited */
static int info_fd = -1; /* the exec's info pipe, in its runner (close-on-exec) */
static void json_string(char *out, size_t size, const char *s) {
    size_t n = 0;
    out[n++] = '"';
    for (; *s && n + 8 < size; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            out[n++] = '\\';
            out[n++] = (char)c;
        } else if (c < 0x20) {
            n += (size_t)snprintf(out + n, size - n, "\\u%04x", c);
        } else {
            out[n++] = (char)c;
        }
    }
    out[n++] = '"';
    out[n] = 0;
}

/* All of it, waiting while a non-blocking pipe (the info pipe's end) is full. */
static void write_all(int fd, const char *data, size_t len) {
    while (len) {
        ssize_t n = write(fd, data, len);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno == EAGAIN) {
            struct pollfd out = {fd, POLLOUT, 0};
            poll(&out, 1, -1);
            continue;
        }
        if (n <= 0) return;
        data += n;
        len -= (size_t)n;
    }
}

/* A frame's header at `at`: its kind and the length that follows. */
static void frame_header(char *at, char kind, size_t len) {
    at[0] = kind;
    for (int i = 0; i < 4; i++) at[1 + i] = (char)(len >> (24 - 8 * i) & 0xff);
}

/* `frame` holds FRAME_HEADER bytes of room, then `len` bytes: sent as a frame of `kind`. */
static void send_frame(int fd, char *frame, char kind, size_t len) {
    frame_header(frame, kind, len);
    write_all(fd, frame, FRAME_HEADER + len);
}

/* {"error": MESSAGE[, "kind": KIND]} on the info pipe `fd`. */
static void report_error(int fd, const char *kind, const char *fmt, ...) {
    char message[4096], quoted[8300], frame[FRAME_HEADER + 8400], *line = frame + FRAME_HEADER;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    json_string(quoted, sizeof quoted, message);
    int n = kind ? snprintf(line, 8400, "{\"error\": %s, \"kind\": \"%s\"}\n", quoted, kind)
                 : snprintf(line, 8400, "{\"error\": %s}\n", quoted);
    send_frame(fd, frame, 'j', (size_t)n);
}

static void report_status(int status) {
    char frame[FRAME_HEADER + 64];
    int n = snprintf(frame + FRAME_HEADER, 64, "{\"status\": %d}\n", status);
    send_frame(info_fd, frame, 'j', (size_t)n);
}

static int preparing_socket = -1; /* in a runner being prepared: where its request comes */
static int take_request(int sock);

/* Set-up failed: say what, with errno, and end the exec (exec_init.py: "sandbox setup").
 * A runner that fails while it prepares says so to the first request it is given. */
static void setup_failed(const char *what) {
    int err = errno;
    if (preparing_socket >= 0) {
        int sock = preparing_socket;
        preparing_socket = -1;
        if (take_request(sock) < 0) _exit(127);
    }
    report_error(info_fd, NULL, "sandbox setup: %s: %s", what, strerror(err));
    _exit(127);
}

/* --- the request ------------------------------------------------------------------------- */
struct request {
    char *cwd, *user;
    long long pids, memory; /* 0: none */
    int have_nproc, have_memory;
    char **argv, **env;
    size_t envc;
};

static char *next_field(char **at, char *end) {
    char *field = *at;
    char *nul = memchr(field, 0, (size_t)(end - field));
    if (!nul) return NULL;
    *at = nul + 1;
    return field;
}

static int parse_request(char *data, size_t len, struct request *r) {
    char *at = data, *end = data + len, *f;
    char *fields[6];
    for (int i = 0; i < 6; i++)
        if (!(fields[i] = next_field(&at, end))) return -1;
    r->cwd = fields[0];
    r->user = fields[1][0] ? fields[1] : NULL;
    r->pids = atoll(fields[2]);
    r->memory = atoll(fields[3]);
    r->have_nproc = fields[4][0] == '1';
    r->have_memory = fields[5][0] == '1';
    if (!(f = next_field(&at, end))) return -1;
    long argc = atol(f);
    if (argc < 1 || argc > (long)len) return -1;
    r->argv = calloc((size_t)argc + 1, sizeof(char *));
    for (long i = 0; i < argc; i++)
        if (!(r->argv[i] = next_field(&at, end))) return -1;
    if (!(f = next_field(&at, end))) return -1;
    long envc = atol(f);
    if (envc < 0 || envc > (long)len) return -1;
    r->env = calloc((size_t)envc + 2, sizeof(char *)); /* room for HOME */
    for (long i = 0; i < envc; i++)
        if (!(r->env[i] = next_field(&at, end))) return -1;
    r->envc = (size_t)envc;
    return 0;
}

static const char *getenv_in(char **env, const char *name) {
    size_t n = strlen(name);
    for (; *env; env++)
        if (!strncmp(*env, name, n) && (*env)[n] == '=') return *env + n + 1;
    return NULL;
}

/* --- users, from the view's own /etc (isolation.py's lookup_user) ------------------------- */
static int is_digits(const char *s) {
    if (!*s) return 0;
    for (; *s; s++)
        if (!isdigit((unsigned char)*s)) return 0;
    return 1;
}

/* Splits `line` at ':' into at most `max` fields; returns how many. */
static int split_colons(char *line, char **fields, int max) {
    int n = 0;
    line[strcspn(line, "\n")] = 0;
    fields[n++] = line;
    for (char *p = line; *p && n < max; p++)
        if (*p == ':') {
            *p = 0;
            fields[n++] = p + 1;
        }
    return n;
}

/* `path` for reading if it is a regular file: a FIFO the trajectory put at /etc/passwd must
 * not block the exec before its command exists (nothing could kill it then). */
static FILE *open_regular(const char *path) {
    struct stat st;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return NULL;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        close(fd);
        return NULL;
    }
    FILE *f = fdopen(fd, "r");
    if (!f) close(fd);
    return f;
}

static int member_of(char *list, const char *name) {
    for (char *item = strtok(list, ","); item; item = strtok(NULL, ","))
        if (!strcmp(item, name)) return 1;
    return 0;
}

/* 0, or -1 with the error reported on the info pipe. */
static int lookup_user(const char *user, uid_t *uid, gid_t *gid, gid_t *groups, int *ngroups,
                       char *home, size_t home_size) {
    char line[4096], name[4096];
    char *f[8];
    int found = 0;
    FILE *passwd = open_regular("/etc/passwd");
    while (passwd && fgets(line, sizeof line, passwd)) {
        if (split_colons(line, f, 8) < 7) continue;
        if (!strcmp(f[0], user) || (is_digits(user) && !strcmp(f[2], user))) {
            found = 1;
            break;
        }
    }
    if (passwd) fclose(passwd);
    if (!found) {
        if (!is_digits(user)) {
            report_error(info_fd, "InvalidInput",
                         "unable to find user %s: no matching entries in passwd file", user);
            return -1;
        }
        *uid = (uid_t)strtoul(user, NULL, 10);
        *gid = 0;
        groups[0] = 0;
        *ngroups = 1;
        snprintf(home, home_size, "/");
        return 0;
    }
    snprintf(name, sizeof name, "%s", f[0]);
    *uid = (uid_t)strtoul(f[2], NULL, 10);
    *gid = (gid_t)strtoul(f[3], NULL, 10);
    snprintf(home, home_size, "%s", f[5][0] ? f[5] : "/");
    groups[0] = *gid;
    *ngroups = 1;
    FILE *group = open_regular("/etc/group");
    while (group && fgets(line, sizeof line, group) && *ngroups < 64) {
        if (split_colons(line, f, 8) < 4 || !is_digits(f[2])) continue;
        gid_t g = (gid_t)strtoul(f[2], NULL, 10);
        int known = 0;
        for (int i = 0; i < *ngroups; i++) known |= groups[i] == g;
        if (!known && member_of(f[3], name)) groups[(*ngroups)++] = g;
    }
    if (group) fclose(group);
    return 0;
}

/* --- privileges (isolation.py's drop_privileges) ----------------------------------------- */
static int is_kept(int cap) { return (int)(KEPT_CAPS >> cap & 1); }

static void drop_bounding_set(void) {
    if (prctl(PR_CAPBSET_READ, CAP_SYS_ADMIN, 0, 0, 0) == 0) return; /* already done */
    for (int cap = 0; cap <= 63; cap++) {
        if (is_kept(cap)) continue;
        if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL)
            setup_failed("drop the bounding set");
    }
}

static void drop_privileges(const uid_t *uid, gid_t gid, const gid_t *groups, int ngroups) {
    drop_bounding_set();
    if (uid) {
        if (setgroups((size_t)ngroups, groups) || setgid(gid) || setuid(*uid))
            setup_failed("switch user");
    }
    if (!uid || *uid == 0) {
        __u32 keep = (__u32)KEPT_CAPS;
        struct __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
        struct __user_cap_data_struct data[2] = {{keep, keep, keep}, {0, 0, 0}};
        if (syscall(SYS_capset, &header, data)) setup_failed("capset");
    }
    /* no_new_privs and the seccomp filter came from the runner (confine_runner). */
}

/* no_new_privs and the seccomp filter, taken by the runner once its view is set up: every
 * command it forks inherits both (the kernel copies a filter to a child, and no process can
 * shed one), so a command no longer installs them itself. Installing the filter cost each
 * exec about 0.07 ms: the kernel checks the program and precomputes its verdicts. The runner
 * needs none of what the filter refuses once the view is mounted (it forks, waits, kills and
 * passes fds), and it never execs, so no_new_privs takes nothing from it. */
static void confine_runner(void) {
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)) setup_failed("no_new_privs");
    if (seccomp_len) {
        struct sock_fprog prog = {(unsigned short)(seccomp_len / 8),
                                  (struct sock_filter *)seccomp_program};
        if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0)) setup_failed("seccomp");
    }
}

/* --- the exec's runner ------------------------------------------------------------------- */
static void bind_readonly(const char *path) {
    if (mount(path, path, NULL, MS_BIND | MS_REC, NULL) ||
        mount("none", path, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY, NULL))
        setup_failed(path);
}

static void mount_proc(void) {
    char proc[4096], path[4200];
    struct stat st;
    snprintf(proc, sizeof proc, "%s/proc", root);
    if (mount("proc", proc, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL)) setup_failed(proc);
    for (size_t i = 0; i < sizeof PROC_READONLY / sizeof *PROC_READONLY; i++) {
        snprintf(path, sizeof path, "%s/%s", proc, PROC_READONLY[i]);
        if (stat(path, &st) == 0) bind_readonly(path);
    }
    for (size_t i = 0; i < sizeof PROC_MASKED / sizeof *PROC_MASKED; i++) {
        snprintf(path, sizeof path, "%s/%s", proc, PROC_MASKED[i]);
        if (lstat(path, &st) != 0) continue;
        int dir = stat(path, &st) == 0 && S_ISDIR(st.st_mode);
        if (mount(dir ? mask_dir : mask_file, path, NULL, MS_BIND, NULL)) setup_failed(path);
    }
}

static void set_limit(int resource, long long n) {
    struct rlimit limit = {(rlim_t)n, (rlim_t)n};
    if (setrlimit(resource, &limit)) setup_failed("setrlimit");
}

/* execvp's search (exec_init.py's find_program): the program, or 126/127 with a reason. */
static int find_program(const char *name, const char *path, char *out, size_t size,
                        const char **reason) {
    if (strchr(name, '/')) {
        snprintf(out, size, "%s", name);
        return 0;
    }
    int denied = 0;
    const char *p = path;
    for (;;) {
        size_t len = strcspn(p, ":");
        struct stat st;
        snprintf(out, size, "%.*s/%s", len ? (int)len : 1, len ? p : ".", name);
        if (stat(out, &st) == 0 && S_ISREG(st.st_mode)) {
            if (access(out, X_OK) == 0) return 0;
            denied = 1;
        }
        if (!p[len]) break;
        p += len + 1;
    }
    *reason = strerror(denied ? EACCES : ENOENT);
    return denied ? 126 : 127;
}

/* What does not depend on the request: the view as root, and the workspace's pid namespace
 * for the commands it forks (setns'd by runner_main: `ns_error`). Done once per runner. */
static int ns_error;
static void enter_view(void) {
    if (ns_error) {
        errno = ns_error;
        setup_failed("enter the workspace's pid namespace");
    }
    setsid(); /* no controlling terminal: /dev/tty is ENXIO, TIOCSTI has no target */
    int adj = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
    if (adj >= 0) { /* the holder's -1000 is not for us */
        write_all(adj, "0", 1);
        close(adj);
    }
    if (chroot(root) || chdir("/")) setup_failed("chroot");
}

/* The command, in the runner's child: its stdio (and report channel) put at 0-2 (and
 * REPORT_FD) from `stdio`, every other fd close-on-exec (the info pipe too), it confines
 * itself exactly as exec_init.py's sandbox_init does, then execs. Never returns: a set-up
 * failure is reported on the info pipe and a program that cannot run exits 126 or 127, whose
 * status the runner reports as the command's. */
static void run_command(struct request *r, const int *stdio) {
    static const int targets[4] = {0, 1, 2, REPORT_FD};
    for (int i = 0; i < 4; i++) /* above 4 all (see runner_main): none is in another's way */
        if (stdio[i] >= 0 && dup2(stdio[i], targets[i]) < 0) setup_failed("stdio");
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL); /* the runner's SIGCHLD is blocked (its signalfd) */
    if (setsid() < 0) setup_failed("setsid");
    if (r->pids && r->have_nproc) set_limit(RLIMIT_NPROC, r->pids);
    if (r->memory && !r->have_memory) set_limit(RLIMIT_AS, r->memory);
    set_limit(RLIMIT_CORE, 0);
    if (chdir(r->cwd)) {
        report_error(info_fd, "InvalidInput", "cwd '%s': %s", r->cwd, strerror(errno));
        _exit(127);
    }
    if (r->user) {
        uid_t uid;
        gid_t gid, groups[64];
        int ngroups;
        static char home[4096], home_var[4200];
        if (lookup_user(r->user, &uid, &gid, groups, &ngroups, home, sizeof home)) _exit(127);
        if (!getenv_in(r->env, "HOME")) {
            snprintf(home_var, sizeof home_var, "HOME=%s", home);
            r->env[r->envc++] = home_var;
        }
        drop_privileges(&uid, gid, groups, ngroups);
    } else {
        drop_privileges(NULL, 0, NULL, 0);
    }
    char program[4096];
    const char *reason = NULL, *path = getenv_in(r->env, "PATH");
    int code = find_program(r->argv[0], path ? path : DEFAULT_PATH, program, sizeof program,
                            &reason);
    if (!code) {
        execve(program, r->argv, r->env);
        code = errno == ENOENT ? 127 : 126;
        reason = strerror(errno);
    }
    char line[8400];
    int n = snprintf(line, sizeof line, "sandbox: cannot run '%s': %s\n", r->argv[0], reason);
    write_all(2, line, (size_t)n);
    _exit(code);
}

static void reset_signals(void) {
    sigset_t none;
    sigemptyset(&none);
    for (int sig = 1; sig < NSIG; sig++) signal(sig, SIG_DFL);
    sigprocmask(SIG_SETMASK, &none, NULL);
}

/* The runner's socket to the holder, out of the way of every other fd. */
#define RUNNER_SOCKET 100

/* The request: inline after the header line, or (with "memfd") read from `memfd`, closed. */
static char *request_data, *request_read; /* request_read: what was read from a memfd */
static size_t request_size;

static void load_request(char *message, size_t len, int memfd) {
    free(request_read);
    request_read = request_data = NULL;
    char *body = memchr(message, '\n', len);
    if (memfd < 0) {
        if (body) {
            request_data = body + 1;
            request_size = (size_t)(message + len - request_data);
        }
        return;
    }
    struct stat st;
    if (fstat(memfd, &st) == 0 && st.st_size > 0 && st.st_size <= MAX_FIELDS_BYTES &&
        (request_read = malloc((size_t)st.st_size)) &&
        pread(memfd, request_read, (size_t)st.st_size, 0) == st.st_size) {
        request_data = request_read;
        request_size = (size_t)st.st_size;
    }
    close(memfd);
}

/* Whether an "exec" message's header line (up to its newline) holds the word `word`. */
static int header_says(const char *message, size_t len, const char *word) {
    const char *end = memchr(message, '\n', len);
    size_t header = end ? (size_t)(end - message) : len, n = strlen(word);
    for (size_t i = 0; i + n <= header; i++)
        if (message[i] == ' ' && i + 1 + n <= header && !memcmp(message + i + 1, word, n) &&
            (i + 1 + n == header || message[i + 1 + n] == ' '))
            return 1;
    return 0;
}

/* How many fds an "exec" message carries: its info pipe, and those its header names (see the
 * top). */
static int exec_fds(const char *message, size_t len) {
    return 1 + header_says(message, len, "stdin") + header_says(message, len, "report") +
           header_says(message, len, "memfd");
}

/* A message (NUL-terminated after its `*len` bytes) and its fds: how many, or -1 at end of
 * file. */
static int receive(int sock, char *msg, size_t size, int *fds, size_t *len) {
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(8 * sizeof(int))];
    } control;
    struct iovec iov = {msg, size - 1};
    struct msghdr hdr = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf,
                         .msg_controllen = sizeof control.buf};
    ssize_t n;
    do n = recvmsg(sock, &hdr, MSG_CMSG_CLOEXEC);
    while (n < 0 && errno == EINTR);
    if (n <= 0) return n == 0 ? -1 : -2;
    msg[n] = 0;
    *len = (size_t)n;
    int nfds = 0;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&hdr); c; c = CMSG_NXTHDR(&hdr, c))
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
            int count = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
            for (int i = 0; i < count && nfds < 8; i++)
                memcpy(&fds[nfds++], CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        }
    return nfds;
}

/* The exec this runner runs, and its command once forked: "kill JOB" reaches the runner as
 * SIGUSR1 queued with JOB (a stale one, for the exec before, names another and is ignored).
 * The holder may send it before this runner has taken JOB's request (a client that gave up
 * as soon as it asked): the job it named is kept, and take_request honours it. */
static volatile long current_job = -1;
static volatile long kill_named = -1;
static volatile pid_t running_command;
static volatile sig_atomic_t kill_asked;

static void kill_command(void) {
    pid_t command = running_command;
    if (command > 0) {
        kill(-command, SIGKILL); /* its group: what it started there (see the top) */
        kill(command, SIGKILL);
    }
}

/* A killed command's group is gone before its status is told: the next exec must not find
 * its processes still holding the workspace's pids. They are the init's children, not ours,
 * so they are polled (a millisecond apart, at most a few seconds: a process in
 * uninterruptible sleep outlasts any kill). */
static void await_group(pid_t group) {
    struct timespec ms = {0, 1000000};
    for (int i = 0; i < 5000 && kill(-group, SIGKILL) == 0; i++) nanosleep(&ms, NULL);
}

static void on_kill(int sig, siginfo_t *info, void *context) {
    (void)sig;
    (void)context;
    if (info->si_code != SI_QUEUE) return;
    kill_named = info->si_value.sival_int;
    if (kill_named != (int)current_job) return;
    kill_asked = 1;
    kill_command();
}

/* --- the runner's pipes: relayed, and sunk ---------------------------------------------- */
/* The exec's fds beside its info pipe (info_fd), in its runner: the read end of the stdin its
 * caller gave, and its report channel (-1: none). Every fd a runner holds is close-on-exec. */
static int given_stdin = -1, given_report = -1;
static int sigchld_fd = -1; /* SIGCHLD, blocked in the runner: its command exited */
static char frame[FRAME_HEADER + FRAME_CHUNK]; /* a chunk read, with room for its header */

/* Pipes that a process a command left running still holds (`server &` keeps the command's
 * stdout): read and dropped until they close, beside the runner's next requests and execs,
 * so that process never dies of a broken pipe and never blocks on a full one (docs: lasting
 * processes). A runner the holder retires lives on until its sinks are gone. */
static int *sinks;
static size_t nsinks, sinks_size;
static struct pollfd *polled;
static size_t polled_size;

static void add_sink(int fd) {
    if (nsinks == sinks_size) {
        sinks_size = sinks_size ? sinks_size * 2 : 8;
        if (!(sinks = realloc(sinks, sinks_size * sizeof *sinks))) _exit(1);
    }
    sinks[nsinks++] = fd;
}

/* `polled` with room for `first` entries, then one per sink (filled in). */
static struct pollfd *poll_with_sinks(size_t first) {
    if (first + nsinks > polled_size) {
        polled_size = (first + nsinks) * 2;
        if (!(polled = realloc(polled, polled_size * sizeof *polled))) _exit(1);
    }
    for (size_t i = 0; i < nsinks; i++) polled[first + i] = (struct pollfd){sinks[i], POLLIN, 0};
    return polled;
}

/* What the sinks polled in `p` (one entry per sink, in order) got, dropped; ended ones go. */
static void serve_sinks(const struct pollfd *p) {
    size_t kept = 0;
    for (size_t i = 0; i < nsinks; i++) {
        if (p[i].revents) {
            ssize_t n = read(sinks[i], frame, sizeof frame);
            if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) {
                close(sinks[i]);
                continue;
            }
        }
        sinks[kept++] = sinks[i];
    }
    nsinks = kept;
}

/* Serves the sinks until `sock` has a message (at once without sinks), or, with `sock` -1,
 * until no sink is left. */
static void await_message(int sock) {
    while (nsinks) {
        struct pollfd *p = poll_with_sinks(1);
        p[0] = (struct pollfd){sock, POLLIN, 0};
        if (poll(p, 1 + nsinks, -1) < 0) {
            if (errno == EINTR) continue;
            _exit(1);
        }
        serve_sinks(p + 1);
        if (p[0].revents) return;
    }
}

/* One chunk of the command's stream `*fd` as a frame of `kind`: what its pipe holds (at most
 * FRAME_CHUNK), spliced into the info pipe behind the frame's header, so the bytes are
 * handed over as pages, never copied through the runner (the runner is the pipe's only
 * reader: what it holds stays there until moved). At its end (`revents` without POLLIN, or
 * nothing held) the read below says so: the stream is closed, -1. */
static void relay_chunk(int *fd, char kind, short revents) {
    int held = 0;
    if ((revents & POLLIN) && ioctl(*fd, FIONREAD, &held) == 0 && held > 0) {
        size_t left = held > FRAME_CHUNK ? FRAME_CHUNK : (size_t)held;
        char header[FRAME_HEADER];
        frame_header(header, kind, left);
        write_all(info_fd, header, FRAME_HEADER);
        while (left) {
            ssize_t moved = splice(*fd, NULL, info_fd, NULL, left, SPLICE_F_NONBLOCK);
            if (moved > 0) {
                left -= (size_t)moved;
            } else if (moved < 0 && errno == EAGAIN) { /* the info pipe is full */
                struct pollfd out = {info_fd, POLLOUT, 0};
                poll(&out, 1, -1);
            } else if (!(moved < 0 && errno == EINTR)) {
                _exit(1); /* a frame cut short: the supervisor must not read on (no status) */
            }
        }
        return;
    }
    ssize_t n = read(*fd, frame + FRAME_HEADER, FRAME_CHUNK);
    if (n > 0) {
        send_frame(info_fd, frame, kind, (size_t)n);
        return;
    }
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
    close(*fd);
    *fd = -1;
}

/* A runner's wait for its next request (the holder passes the exec's fds on): takes them. */
static char request_message[EXEC_MESSAGE_MAX];
static int take_request(int sock) {
    int fds[8];
    long job = -1;
    size_t len = 0;
    await_message(sock);
    int nfds = receive(sock, request_message, sizeof request_message, fds, &len);
    if (nfds < 1 || nfds != exec_fds(request_message, len) ||
        sscanf(request_message, "exec %ld", &job) != 1) {
        /* the holder is gone, or retired this runner: it goes once its sinks are gone */
        for (int i = 0; i < nfds; i++) close(fds[i]);
        await_message(-1);
        return -1;
    }
    kill_asked = 0;
    current_job = job;
    /* After current_job is set, a kill for it is on_kill's; before, it left its job here. */
    if (kill_named == (int)job) kill_asked = 1;
    int at = 0;
    info_fd = fds[at++];
    given_stdin = header_says(request_message, len, "stdin") ? fds[at++] : -1;
    given_report = header_says(request_message, len, "report") ? fds[at++] : -1;
    load_request(request_message, len, at < nfds ? fds[at] : -1);
    return 0;
}

/* Until `command` exits: its stdout and stderr (`streams`) as frames on the info pipe, and
 * the sinks served; then what its pipes hold already (AFTER_EXIT_CHUNKS reads each at most:
 * more is a process it left running, writing); the pipes such a process still holds become
 * sinks. Returns its wait status. */
static int relay(pid_t command, int *streams) {
    static const char kinds[2] = {'o', 'e'};
    int status = 0;
    for (int exited = 0; !exited;) {
        struct pollfd *p = poll_with_sinks(3);
        p[0] = (struct pollfd){streams[0], POLLIN, 0};
        p[1] = (struct pollfd){streams[1], POLLIN, 0};
        p[2] = (struct pollfd){sigchld_fd, POLLIN, 0};
        if (poll(p, 3 + nsinks, -1) < 0) {
            if (errno == EINTR) continue; /* a kill (on_kill) */
            _exit(1);
        }
        for (int i = 0; i < 2; i++)
            if (p[i].revents) relay_chunk(&streams[i], kinds[i], p[i].revents);
        if (p[2].revents) {
            struct signalfd_siginfo info; /* SIGCHLD is one signal: one read takes it */
            if (read(sigchld_fd, &info, sizeof info) < 0 && errno != EAGAIN) _exit(1);
            pid_t pid = waitpid(command, &status, WNOHANG);
            if (pid < 0 && errno != EINTR) _exit(1);
            exited = pid == command;
        }
        serve_sinks(p + 3);
    }
    running_command = 0;
    for (int i = 0; i < 2; i++) {
        for (int k = 0; streams[i] >= 0 && k < AFTER_EXIT_CHUNKS; k++) {
            struct pollfd ready = {streams[i], POLLIN, 0};
            if (poll(&ready, 1, 0) <= 0) break;
            relay_chunk(&streams[i], kinds[i], ready.revents);
        }
        if (streams[i] >= 0) add_sink(streams[i]);
    }
    return status;
}

/* The exec is over: the runner is free (said to the holder before the status: the
 * supervisor's next exec, sent once it has the status, finds it free); the info pipe ends. */
static void end_exec(int sock, const int *status) {
    current_job = -1;
    write_all(sock, "idle", 4);
    if (status) report_status(*status);
    close(info_fd);
    info_fd = -1;
}

/* One exec on this runner: the command is its child, in the workspace's pid namespace, with
 * stdout and stderr pipes the runner makes and relays (see relay); what it leaves running
 * goes to that namespace's init and keeps running. */
static void run_job(int sock) {
    struct request r;
    if (!request_data) setup_failed("the request");
    if (parse_request(request_data, request_size, &r)) {
        report_error(info_fd, "InvalidInput", "exec: a malformed request");
        _exit(127);
    }
    int out[2], err[2], in[2] = {given_stdin, -1};
    if (pipe2(out, O_CLOEXEC) || pipe2(err, O_CLOEXEC) || (in[0] < 0 && pipe2(in, O_CLOEXEC)))
        setup_failed("the command's pipes");
    if (in[1] >= 0) close(in[1]); /* none given: an empty stdin, its writer gone */
    int stdio[4] = {in[0], out[1], err[1], given_report};
    /* vfork, as posix_spawn does (and the bench's floor with it): the child borrows this
     * process's memory until it execs, instead of a copy it would fault page after page
     * and throw away (about 5% of the machine's CPU per `true` at 64 in flight). The runner
     * waits meanwhile. What the child writes of the runner's memory is its own statics, the
     * request it was given (freed below) and, for a named user, the heap under fopen (freed
     * again before it execs); it never returns from run_command. */
    pid_t command = vfork();
    if (command == 0) {
        close(sock);
        run_command(&r, stdio);
    }
    int fork_error = errno;
    free(r.argv);
    free(r.env);
    for (int i = 0; i < 4; i++) /* the command's ends: its pipes end with it */
        if (stdio[i] >= 0) close(stdio[i]);
    given_stdin = given_report = -1;
    int streams[2] = {out[0], err[0]};
    if (command < 0) { /* the pids limit, or a workspace whose init died */
        report_error(info_fd, "LimitExceeded", "cannot start a process: %s",
                     strerror(fork_error));
        close(out[0]);
        close(err[0]);
        end_exec(sock, NULL);
        return;
    }
    running_command = command;
    if (kill_asked) kill_command(); /* asked while it was being forked */
    int status = relay(command, streams);
    if (kill_asked) await_group(command);
    end_exec(sock, &status);
}

static int init_ns = -1; /* the workspace's pid namespace (its init's pidfd), in the holder */

/* 0-4 held by /dev/null, close-on-exec: every fd the runner gets later is above them, so its
 * child puts the command's stdio there with dup2s none of which is in another's way (see
 * run_command), and a command starts with nothing of the runner's but that. */
static void hold_low_fds(void) {
    int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (null < 0) _exit(1);
    for (int fd = 0; fd <= REPORT_FD; fd++)
        if (fd != null && dup3(null, fd, O_CLOEXEC) < 0) _exit(1);
    if (null > REPORT_FD) close(null);
}

static void runner_main(int sock) {
    reset_signals();
    struct sigaction on_kill_action = {.sa_sigaction = on_kill, .sa_flags = SA_SIGINFO};
    sigaction(SIGUSR1, &on_kill_action, NULL);
    /* Its commands are forked into the workspace's pid namespace; it stays out of it. */
    if (init_ns < 0 || setns(init_ns, CLONE_NEWPID)) ns_error = init_ns < 0 ? ESRCH : errno;
    if (sock != RUNNER_SOCKET) {
        if (dup3(sock, RUNNER_SOCKET, O_CLOEXEC) < 0) _exit(1);
        close(sock);
        sock = RUNNER_SOCKET;
    }
    syscall(SYS_close_range, 3, RUNNER_SOCKET - 1, 0);
    syscall(SYS_close_range, RUNNER_SOCKET + 1, ~0u, 0);
    hold_low_fds();
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    sigprocmask(SIG_BLOCK, &chld, NULL); /* its command's exit is read from sigchld_fd */
    sigchld_fd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
    if (sigchld_fd < 0) _exit(1);
    /* The holder's death ends it (and if the holder died before this, its end of the socket
     * is closed: take_request sees the end of file). */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0)) _exit(1);
    /* Root with every capability, forking commands that have a few: not dumpable, so none
     * could open its fds (the info pipe) or ptrace it, even one that found it. */
    if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)) _exit(1);
    preparing_socket = sock;
    enter_view();
    confine_runner();
    preparing_socket = -1;
    for (;;) {
        if (take_request(sock) < 0) _exit(0);
        run_job(sock);
    }
}

/* --- the workspace's init ----------------------------------------------------------------- */
/* Pid 1 of the workspace's pid namespace: mounts its /proc in the view (in the holder's mount
 * namespace, which every runner shares), then waits for the holder's end: `lifeline` is the
 * read end of a pipe whose write end only the holder keeps (from a new pid namespace there
 * is no parent to check for, so PR_SET_PDEATHSIG would leave a race). Ignoring SIGCHLD makes
 * the kernel reap every orphan that comes back to it; as pid 1 it gets no signal from its
 * namespace that it does not handle, SIGKILL included. It needs nothing more: no capability,
 * the filter. Its first byte says the holder holds the namespace: until then it stays
 * dumpable, which opening /proc/PID/ns/pid needs where we lack CAP_SYS_PTRACE (docker). */
static void init_main(int lifeline) {
    reset_signals();
    if (dup2(lifeline, 3) < 0) _exit(1);
    syscall(SYS_close_range, 4, ~0u, 0);
    char byte;
    while (read(3, &byte, 1) < 0 && errno == EINTR) {
    }
    if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)) _exit(1);
    mount_proc(); /* a failure ends it: execs then report it (they cannot be forked) */
    if (chroot(root) || chdir("/")) _exit(1);
    struct __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct none[2] = {{0, 0, 0}, {0, 0, 0}};
    if (syscall(SYS_capset, &header, none)) _exit(1);
    confine_runner();
    signal(SIGCHLD, SIG_IGN);
    while (read(3, &byte, 1) < 0 && errno == EINTR) {
    }
    _exit(0); /* the holder is gone: so is the workspace */
}

static pid_t init_pid = -1;
static int init_lifeline = -1; /* the write end of the init's lifeline */

/* A new workspace pid namespace and its init; init_ns refers to it (-1 if that failed: the
 * execs say so). Its processes, if an old one had any, died with the old init. */
static void make_init(void) {
    int lifeline[2];
    if (pipe2(lifeline, O_CLOEXEC)) return;
    pid_t pid = (pid_t)syscall(SYS_clone, CLONE_NEWPID | SIGCHLD, 0, 0, 0, 0);
    if (pid == 0) init_main(lifeline[0]);
    close(lifeline[0]);
    if (pid < 0) {
        close(lifeline[1]);
        return;
    }
    init_lifeline = lifeline[1];
    init_pid = pid;
    /* Not a pidfd: setns(2) through one checks ptrace access to the init each time. */
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/ns/pid", pid);
    init_ns = open(path, O_RDONLY | O_CLOEXEC);
    write_all(init_lifeline, "", 1); /* see init_main */
}

/* Kills the init (the kernel kills every process of its namespace) and waits for it. */
static void end_init(void) {
    if (init_pid > 0) {
        kill(init_pid, SIGKILL);
        while (waitpid(init_pid, NULL, 0) < 0 && errno == EINTR) {
        }
    }
    if (init_ns >= 0) close(init_ns);
    if (init_lifeline >= 0) close(init_lifeline);
    init_pid = init_ns = init_lifeline = -1;
}

/* --- the holder -------------------------------------------------------------------------- */
/* An exec's runner, outside the workspace's pid namespace with the view its root. Making one
 * is part of an exec's own cost, so a runner serves exec after exec: one is made ahead when the holder
 * starts (and while commands overlap, whenever none is free), and a runner whose exec ended
 * is free again. A free runner goes after SPARE_IDLE_MS without a command (an idle workspace
 * keeps no second process, pid and mount namespace, or /proc; its "idle" is read at the next
 * message or within SPARE_IDLE_MS, so it goes 2-4 s after its exec), and when the view changes (a
 * checkpoint or restore remounts it: a runner holds the view of its generation). At most
 * MAX_FREE wait. */
#define SPARE_IDLE_MS 2000
#define MAX_FREE 64
struct runner {
    pid_t pid;
    int sock;         /* to it: the request's fds go there; -1 once it is retired or killed */
    long job;         /* the exec it runs, or -1 when free */
    unsigned view;    /* the view generation it was made in */
    long long free_ms; /* when it became free */
};
/* On main's stack (pages an idle holder touches anyway) until a workspace runs more than
 * INLINE_RUNNERS commands at once: on the heap, or in pages of their own, they cost every
 * idle workspace a page or two (10,000 of them: 40-80 MiB). */
#define INLINE_RUNNERS 8
static struct runner *inline_runners, *runners;
static size_t nrunners, runners_size;

/* `*table` (now `*size` items of `item` bytes, at first `inline_table`) with room for twice
 * `needed`, moved to the heap. */
static void *grown(void *table, size_t *size, size_t needed, size_t item, void *inline_table) {
    size_t bigger = needed * 2;
    void *moved = table == inline_table ? malloc(bigger * item) : realloc(table, bigger * item);
    if (!moved) _exit(1);
    if (table == inline_table) memcpy(moved, inline_table, *size * item);
    *size = bigger;
    return moved;
}
static unsigned view_generation;

static long long now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static int is_free(const struct runner *r) { return r->sock >= 0 && r->job < 0; }

static size_t busy_runners(void) {
    size_t n = 0;
    for (size_t i = 0; i < nrunners; i++) n += runners[i].sock >= 0 && runners[i].job >= 0;
    return n;
}

static size_t free_runners(void) {
    size_t n = 0;
    for (size_t i = 0; i < nrunners; i++) n += is_free(&runners[i]);
    return n;
}

/* A new free runner: its index, or -1 (the pids limit, say: the exec reports it). */
static long make_runner(void) {
    int pair[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair)) return -1;
    pid_t pid = fork();
    if (pid == 0) {
        close(pair[0]);
        runner_main(pair[1]);
    }
    close(pair[1]);
    if (pid < 0) {
        close(pair[0]);
        return -1;
    }
    if (nrunners == runners_size)
        runners = grown(runners, &runners_size, nrunners + 1, sizeof *runners, inline_runners);
    runners[nrunners] = (struct runner){pid, pair[0], -1, view_generation, now_ms()};
    return (long)nrunners++;
}

static void prepare_spare(void) {
    if (free_runners() == 0) make_runner();
}

/* Ends a runner: closed, it exits at its next wait for a request; killed, at once. */
static void retire(struct runner *r, int kill_it) {
    if (kill_it) kill(r->pid, SIGKILL);
    if (r->sock >= 0) close(r->sock);
    r->sock = -1;
    r->job = -1;
}

/* Every runner not running a command (free, or retired and not yet gone) is gone once this
 * returns, with its root in the old view: nothing of them holds it. */
static void drop_idle_runners(void) {
    for (size_t i = 0; i < nrunners; i++)
        if (runners[i].job < 0) {
            retire(&runners[i], 1);
            while (waitpid(runners[i].pid, NULL, 0) < 0 && errno == EINTR) {
            }
            runners[i].pid = -1; /* reaped: dropped from the table below */
        }
    size_t kept = 0;
    for (size_t i = 0; i < nrunners; i++)
        if (runners[i].pid > 0) runners[kept++] = runners[i];
    nrunners = kept;
}

/* Hands the exec to a free runner (the one freed last), or a new one. */
static void handle_exec(long job, const char *message, size_t n, int *fds, int nfds) {
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(8 * sizeof(int))];
    } control;
    memset(&control, 0, sizeof control);
    struct iovec iov = {(void *)message, n}; /* as it came: the runner reads the request */
    struct msghdr hdr = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf,
                         .msg_controllen = CMSG_SPACE(nfds * sizeof(int))};
    struct cmsghdr *c = CMSG_FIRSTHDR(&hdr);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(nfds * sizeof(int));
    memcpy(CMSG_DATA(c), fds, nfds * sizeof(int));
    long chosen = -1;
    for (;;) {
        long pick = -1;
        for (size_t i = 0; i < nrunners; i++)
            if (is_free(&runners[i]) && (pick < 0 || runners[i].free_ms >= runners[pick].free_ms))
                pick = (long)i;
        int made = pick < 0;
        if (made && (pick = make_runner()) < 0) break;
        if (sendmsg(runners[pick].sock, &hdr, MSG_NOSIGNAL) == (ssize_t)n) {
            chosen = pick;
            break;
        }
        retire(&runners[pick], 1); /* it died: the next one, or a new one */
        if (made) break;
    }
    if (chosen < 0) /* typically the workspace's pids limit */
        report_error(fds[0], "LimitExceeded", "cannot start a process: %s", strerror(errno));
    else
        runners[chosen].job = job;
    for (int i = 0; i < nfds; i++) close(fds[i]); /* the info pipe too: the runner reports */
}

/* A busy runner's word: "idle" once its exec ended; end of file if it died. */
static void runner_said(struct runner *r) {
    char msg[16];
    ssize_t n = recv(r->sock, msg, sizeof msg, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    if (n == 4 && !memcmp(msg, "idle", 4) && r->view == view_generation &&
        free_runners() < MAX_FREE) {
        r->job = -1;
        r->free_ms = now_ms();
        return;
    }
    retire(r, n != 4);
}

static void reap(void) {
    pid_t pid;
    while ((pid = waitpid(-1, NULL, WNOHANG)) > 0) {
        if (pid == init_pid) { /* it should never die while we live: the next exec fails */
            init_pid = -1;
            continue;
        }
        for (size_t i = 0; i < nrunners; i++)
            if (runners[i].pid == pid) {
                if (runners[i].sock >= 0) close(runners[i].sock);
                runners[i] = runners[--nrunners];
                break;
            }
    }
}

/* The settings (see the top): returns the control socket's fd, or -1. */
static int read_settings(int fd) {
    struct stat st;
    if (fstat(fd, &st) || st.st_size <= 0 || st.st_size > 1 << 20) return -1;
    char *data = malloc((size_t)st.st_size), *at = data, *end = data + st.st_size, *f[5];
    if (!data || pread(fd, data, (size_t)st.st_size, 0) != st.st_size) return -1;
    close(fd);
    for (int i = 0; i < 5; i++)
        if (!(f[i] = next_field(&at, end))) return -1;
    root = f[1];
    mask_file = f[2];
    mask_dir = f[3];
    KEPT_CAPS = strtoull(f[4], NULL, 10);
    seccomp_program = (unsigned char *)at;
    seccomp_len = (size_t)(end - at);
    return atoi(f[0]);
}

int main(int argc, char **argv) {
    int ctl = argc == 2 ? read_settings(atoi(argv[1])) : -1;
    if (ctl < 0) {
        fprintf(stderr, "usage: holder SETTINGS_FD (see holder.c)\n");
        return 2;
    }
    /* Only what an exec may ever gain back; our own effective set stays (execs mount /proc). */
    drop_bounding_set();
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    sigprocmask(SIG_BLOCK, &chld, NULL);
    int sigfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
    if (sigfd < 0) return 1;
    fcntl(ctl, F_SETFD, FD_CLOEXEC);
    struct runner first_runners[INLINE_RUNNERS];
    runners = inline_runners = first_runners;
    runners_size = INLINE_RUNNERS;
    make_init();
    prepare_spare();
    for (;;) {
        /* A free runner's idle time runs out; a busy one's "idle" is read within
         * SPARE_IDLE_MS of its exec's end, if no message woke the holder before. */
        int wait_ms = -1;
        long long now = now_ms();
        for (size_t i = 0; i < nrunners; i++)
            if (runners[i].sock >= 0) {
                long long left = runners[i].job >= 0 ? SPARE_IDLE_MS
                                                     : runners[i].free_ms + SPARE_IDLE_MS - now;
                if (wait_ms < 0 || left < wait_ms) wait_ms = left > 0 ? (int)left : 0;
            }
        /* The control socket and SIGCHLD. Not the runners' sockets: a runner's "idle" woke
         * the holder once more per exec, for nothing the exec waits on. */
        struct pollfd polled[2] = {{ctl, POLLIN, 0}, {sigfd, POLLIN, 0}};
        if (poll(polled, 2, wait_ms) < 0) {
            if (errno == EINTR) continue;
            return 1;
        }
        /* What busy runners said, first: one freed before the exec that follows it (it says
         * "idle" before the status the supervisor waits for) is free for that exec. */
        for (size_t i = 0; i < nrunners; i++)
            if (runners[i].sock >= 0 && runners[i].job >= 0) runner_said(&runners[i]);
        now = now_ms();
        for (size_t i = 0; i < nrunners; i++) /* idle: they go */
            if (is_free(&runners[i]) && now - runners[i].free_ms >= SPARE_IDLE_MS)
                retire(&runners[i], 0);
        if (polled[1].revents) {
            struct signalfd_siginfo info;
            while (read(sigfd, &info, sizeof info) > 0) {
            }
            reap();
        }
        if (!polled[0].revents) continue;
        /* Static: only the pages a message reaches are ever touched (an inline request of
         * a few hundred bytes: one). */
        static char msg[EXEC_MESSAGE_MAX];
        int fds[8];
        size_t len = 0;
        int nfds = receive(ctl, msg, sizeof msg, fds, &len);
        if (nfds == -1) return 0; /* the supervisor closed us: the workspace is gone */
        if (nfds < 0) continue;
        long job;
        if (sscanf(msg, "exec %ld", &job) == 1 && job >= 0 && nfds == exec_fds(msg, len)) {
            handle_exec(job, msg, len, fds, nfds);
            /* Commands overlap here: one more ready for the next. One at a time, the runner
             * that ran the last is free for the next, and an idle workspace keeps one. */
            if (busy_runners() > 1) prepare_spare();
            continue;
        }
        for (int i = 0; i < nfds; i++) close(fds[i]);
        if (sscanf(msg, "kill %ld", &job) == 1 && job >= 0)
            for (size_t i = 0; i < nrunners; i++)
                if (runners[i].job == job) {
                    union sigval which = {.sival_int = (int)job};
                    sigqueue(runners[i].pid, SIGUSR1, which); /* see on_kill */
                }
        /* Around a remount of the view (checkpoints.py's remount_in_holder): the free runners'
         * copies of the old view must be gone before the old upper becomes a lower, and a
         * busy one (there should be none) is not kept once its exec ends. The init and the
         * processes of the workspace go too: they run in the old view (a restore's meaning).
         * A new init, with a /proc in the new view, comes with "respare". */
        if (!strcmp(msg, "drop spare")) {
            view_generation++;
            for (size_t i = 0; i < nrunners; i++) /* an "idle" not yet read: free, so it goes */
                if (runners[i].sock >= 0 && runners[i].job >= 0) runner_said(&runners[i]);
            drop_idle_runners();
            end_init();
            write_all(ctl, "dropped", 7);
        }
        if (!strcmp(msg, "respare")) {
            if (init_pid < 0) make_init();
            prepare_spare();
        }
    }
}
