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
 * running writes to its pipes after that, the runner reads and drops (see runner.c's sinks).
 * A runner serves one exec at a time, and exec after exec (see struct runner). "kill JOB" kills
 * the command's process group: the command, and what it started that stayed in its group
 * (`cmd &`, pipelines; not setsid's or setpgid's).
 *
 * Its files, one job each (native.py compiles them together):
 *     holder.c   this: the settings, the control socket's loop, the runners table, the init
 *     runner.c   an exec's runner: its request, the command it forks, the relay, the sinks
 *     confine.c  what confines a command: its user, privileges, filter, /proc, limits, program
 *     wire.c     frames on the info pipe, messages on the sockets
 *     holder.h   what they share
 */
#include "holder.h"

/* What a command keeps, as a mask of capability numbers (isolation.py's KEPT_CAPS, from the
 * settings): none, or Docker's default set for a container. */
unsigned long long KEPT_CAPS;

const char *root, *mask_file, *mask_dir;
unsigned char *seccomp_program;
size_t seccomp_len;

int init_ns = -1; /* the workspace's pid namespace (see make_init), in the holder */

/* --- the workspace's init ----------------------------------------------------------------- */
/* Pid 1 of the workspace's pid namespace: mounts its /proc in the view (in the holder's mount
 * namespace, which every runner shares), says so (a byte back: the holder serves no exec
 * before, or a workspace's first command could find no /proc), then waits for the holder's
 * end: `lifeline` is one end of a socket pair whose other end only the holder keeps (from a
 * new pid namespace there is no parent to check for, so PR_SET_PDEATHSIG would leave a
 * race). Ignoring SIGCHLD makes
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
    write_all(3, "", 1);
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
static int init_lifeline = -1; /* the holder's end of the init's lifeline */

/* A new workspace pid namespace and its init; init_ns refers to it (-1 if that failed: the
 * execs say so). Its processes, if an old one had any, died with the old init. */
static void make_init(void) {
    int lifeline[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, lifeline)) return;
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
    char mounted; /* its /proc, before any exec (end of file: it died, and execs say so) */
    while (read(init_lifeline, &mounted, 1) < 0 && errno == EINTR) {
    }
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
                    sigqueue(runners[i].pid, SIGUSR1, which); /* runner.c's on_kill */
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
