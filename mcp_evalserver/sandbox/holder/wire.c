/* mcp-evalserver's compiled holder (see holder.c's top): what it speaks. Frames on an exec's
 * info pipe (exec_init.py's FRAME), and the messages of the control socket and of a runner's
 * socket (SOCK_SEQPACKET, with fds). */
#include "holder.h"

/* --- the info pipe: frames ---------------------------------------------------------------- */
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
void write_all(int fd, const char *data, size_t len) {
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
void frame_header(char *at, char kind, size_t len) {
    at[0] = kind;
    for (int i = 0; i < 4; i++) at[1 + i] = (char)(len >> (24 - 8 * i) & 0xff);
}

/* `frame` holds FRAME_HEADER bytes of room, then `len` bytes: sent as a frame of `kind`. */
void send_frame(int fd, char *frame, char kind, size_t len) {
    frame_header(frame, kind, len);
    write_all(fd, frame, FRAME_HEADER + len);
}

/* {"error": MESSAGE[, "kind": KIND]} on the info pipe `fd`. */
void report_error(int fd, const char *kind, const char *fmt, ...) {
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

/* --- the control socket's messages -------------------------------------------------------- */
char *next_field(char **at, char *end) {
    char *field = *at;
    char *nul = memchr(field, 0, (size_t)(end - field));
    if (!nul) return NULL;
    *at = nul + 1;
    return field;
}

/* Whether an "exec" message's header line (up to its newline) holds the word `word`. */
int header_says(const char *message, size_t len, const char *word) {
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
int exec_fds(const char *message, size_t len) {
    return 1 + header_says(message, len, "stdin") + header_says(message, len, "report") +
           header_says(message, len, "memfd");
}

/* A message (NUL-terminated after its `*len` bytes) and its fds: how many, or -1 at end of
 * file. */
int receive(int sock, char *msg, size_t size, int *fds, size_t *len) {
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
