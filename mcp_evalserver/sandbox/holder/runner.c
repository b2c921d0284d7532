/* mcp-evalserver's compiled holder (see holder.c's top): an exec's runner. It takes its
 * requests from the holder, forks each command into the workspace's pid namespace and
 * confines it (confine.c), relays its output and status on the exec's info pipe, and sinks
 * what a process it left running still writes. */
#include "holder.h"

#define REPORT_FD 4
#define DEFAULT_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#define MAX_FIELDS_BYTES (64 << 20)
#define AFTER_EXIT_CHUNKS 16 /* exec_init.py's: what is read of a stream once its command exited */
int info_fd = -1; /* the exec's info pipe, in its runner (close-on-exec) */

static void report_status(int status) {
    char frame[FRAME_HEADER + 64];
    int n = snprintf(frame + FRAME_HEADER, 64, "{\"status\": %d}\n", status);
    send_frame(info_fd, frame, 'j', (size_t)n);
}

static int preparing_socket = -1; /* in a runner being prepared: where its request comes */
static int take_request(int sock);

/* Set-up failed: say what, with errno, and end the exec (exec_init.py: "sandbox setup").
 * A runner that fails while it prepares says so to the first request it is given. */
void setup_failed(const char *what) {
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

/* --- the exec's runner ------------------------------------------------------------------- */
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

void reset_signals(void) {
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

void runner_main(int sock) {
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
