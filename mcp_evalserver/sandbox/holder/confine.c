/* mcp-evalserver's compiled holder (see holder.c's top): what confines a command, as
 * exec_init.py's sandbox_init does (and the workspace's init: its /proc, the filter): its
 * user, its privileges, the runner's no_new_privs and seccomp filter, /proc's masks, its
 * limits, the program it runs. */
#include "holder.h"

/* The same lists as supervisor/view.py (PROC_MASKED, PROC_READONLY). */
static const char *const PROC_MASKED[] = {"kcore", "keys", "timer_list", "sched_debug",
                                          "latency_stats", "acpi", "scsi"};
static const char *const PROC_READONLY[] = {"sys", "sysrq-trigger", "irq", "bus", "fs"};

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
int lookup_user(const char *user, uid_t *uid, gid_t *gid, gid_t *groups, int *ngroups,
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

void drop_bounding_set(void) {
    if (prctl(PR_CAPBSET_READ, CAP_SYS_ADMIN, 0, 0, 0) == 0) return; /* already done */
    for (int cap = 0; cap <= 63; cap++) {
        if (is_kept(cap)) continue;
        if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL)
            setup_failed("drop the bounding set");
    }
}

void drop_privileges(const uid_t *uid, gid_t gid, const gid_t *groups, int ngroups) {
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
void confine_runner(void) {
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)) setup_failed("no_new_privs");
    if (seccomp_len) {
        struct sock_fprog prog = {(unsigned short)(seccomp_len / 8),
                                  (struct sock_filter *)seccomp_program};
        if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0)) setup_failed("seccomp");
    }
}

/* --- the view's /proc, a command's limits and program ------------------------------------ */
static void bind_readonly(const char *path) {
    if (mount(path, path, NULL, MS_BIND | MS_REC, NULL) ||
        mount("none", path, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY, NULL))
        setup_failed(path);
}

void mount_proc(void) {
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

void set_limit(int resource, long long n) {
    struct rlimit limit = {(rlim_t)n, (rlim_t)n};
    if (setrlimit(resource, &limit)) setup_failed("setrlimit");
}

/* execvp's search (exec_init.py's find_program): the program, or 126/127 with a reason. */
int find_program(const char *name, const char *path, char *out, size_t size,
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
