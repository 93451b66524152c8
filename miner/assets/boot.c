/* miner's verifier boot tool: the trusted first step of an exported task's verifier.
 *
 * It arrives with tests/ after the agent stopped and is statically linked without any C library
 * (raw system calls only), so no file of the container runs inside it: not the dynamic loader,
 * not /etc/ld.so.preload, not LD_PRELOAD, not a library. The exporter compiles it
 * (miner/export/trusted.py) and writes the list it checks (tests/runtime.txt) from the healthy
 * image.
 *
 *   boot score --list FILE --reward PATH --python PATH [--deadline SECONDS] [--no-kill]
 *              [--kill-ancestors] [--summary-line] -- SCRIPT ARGS...
 *       0. makes itself undumpable (no process of its uid can attach to it from now on) and refuses
 *          to score when it is traced already; stops its ancestors (the harness's shells, which
 *          read startup files the agent could write) and refuses to score when one is traced or
 *          maps code the healthy image lacks; checks that PID 1 (which no process of the container
 *          can stop or kill) is untraced and runs, in every executable mapping, the bytes of its
 *          file (no code injected);
 *       1. kills every process but PID 1, this tool's ancestors and the container's keep-alive
 *          sleep (a healthy binary, child of PID 1, untraced, nothing foreign mapped executable),
 *          which it stops instead: none of them runs again. A process is a thread group: one
 *          whose leader exited (state Z) while another thread runs is killed too;
 *       2. makes the reward folder a real folder this tool can write (its mode reset), and removes
 *          reward.txt and reward.json, whatever they are (a folder of mode 000 included);
 *       2b. with --restore DIR (a separate verifier's fresh container), carries the agent's changes
 *          in first: PYTHON -I -S -B restore.py DIR (see restore.py);
 *       3. checks every entry of FILE against the healthy image: the interpreter, the dynamic
 *          loader, its cache, configuration and preload file, the libraries and standard-library
 *          modules the verifier loads, the folders Python searches, files that must not exist;
 *       4. runs PYTHON -I -S -B SCRIPT ARGS --verdict-fd 3 --boot SELF --kill, in an environment of
 *          its own (PATH and HOME: nothing the harness's shells exported), and reads the verdict
 *          ("1" or "0") from that pipe, within the deadline;
 *       5. kills every process again and checks that no survivor holds the reward files open;
 *       6. writes the reward file atomically (0 already right after step 1, so that a run cut short
 *          leaves 0): 1 only when 0 and 3 passed and the verdict was 1, and reads it back: a
 *          reward file it could not replace is reported, never trusted;
 *       7. with --kill-ancestors, kills the shells that started it (none of them may write later).
 *   boot script FILE               `score` with the options on FILE's "# boot: score ..." line: test.sh's
 *                                  interpreter (#!/tests/boot script), so no shell runs the verifier
 *   boot sweep --list FILE         step 1 alone (the verifier calls it after the tests)
 *   boot drop -- PROGRAM ARGS...   no new privileges and no capabilities, then exec PROGRAM
 *   boot env0 FILE                 this environment, NUL-separated, into FILE
 *   boot sha256 FILE...            print each file's sha256 (as the list's F entries compare it)
 *   boot listing DIR...            print each folder's listing digest (the list's L entries)
 *   boot ancestors                 print this process's pid and its ancestors' (what score keeps)
 *
 * List lines: "F <sha256> <path>" a regular file with this content (symlinks followed);
 * "K <sha256> <path>" the same, and a program the container may keep running (its sleep);
 * "A - <path>" nothing may exist there; "L <sha256> <dir>" the folder's entry names, sorted by
 * bytes, "__pycache__" left out, each followed by "\n", hashed. Lines starting with # are notes.
 */

#include <fcntl.h>
#include <linux/prctl.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>

#if !defined(__x86_64__) && !defined(__aarch64__)
#error "boot.c supports x86_64 and aarch64"
#endif

/* -- system calls ----------------------------------------------------------------------------- */

#if defined(__x86_64__)
static long sc6(long n, long a, long b, long c, long d, long e, long f) {
    register long r10 __asm__("r10") = d;
    register long r8 __asm__("r8") = e;
    register long r9 __asm__("r9") = f;
    long ret;
    __asm__ volatile("syscall" : "=a"(ret) : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
                     : "rcx", "r11", "memory");
    return ret;
}
__asm__(".text\n.global _start\n_start:\n xor %rbp,%rbp\n mov %rsp,%rdi\n and $-16,%rsp\n call cmain\n hlt\n");
#else
static long sc6(long n, long a, long b, long c, long d, long e, long f) {
    register long x8 __asm__("x8") = n;
    register long x0 __asm__("x0") = a;
    register long x1 __asm__("x1") = b;
    register long x2 __asm__("x2") = c;
    register long x3 __asm__("x3") = d;
    register long x4 __asm__("x4") = e;
    register long x5 __asm__("x5") = f;
    __asm__ volatile("svc 0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4), "r"(x5) : "memory", "cc");
    return x0;
}
__asm__(".text\n.global _start\n_start:\n mov x29, #0\n mov x30, #0\n mov x0, sp\n and sp, x0, #-16\n bl cmain\n");
#endif

#define sc0(n) sc6(n, 0, 0, 0, 0, 0, 0)
#define sc1(n, a) sc6(n, (long)(a), 0, 0, 0, 0, 0)
#define sc2(n, a, b) sc6(n, (long)(a), (long)(b), 0, 0, 0, 0)
#define sc3(n, a, b, c) sc6(n, (long)(a), (long)(b), (long)(c), 0, 0, 0)
#define sc4(n, a, b, c, d) sc6(n, (long)(a), (long)(b), (long)(c), (long)(d), 0, 0)
#define sc5(n, a, b, c, d, e) sc6(n, (long)(a), (long)(b), (long)(c), (long)(d), (long)(e), 0)

#define AT_CWD (-100)
#define ENOENT_ 2
#define ENOTDIR_ 20
#define EEXIST_ 17

static long sys_read(int fd, void *buf, long n) { return sc3(SYS_read, fd, buf, n); }
static long sys_write(int fd, const void *buf, long n) { return sc3(SYS_write, fd, buf, n); }
static int sys_open(const char *path, int flags, int mode) { return (int)sc4(SYS_openat, AT_CWD, path, flags, mode); }
static int sys_close(int fd) { return (int)sc1(SYS_close, fd); }
static int sys_lstat(const char *path, struct stat *st) {
    return (int)sc4(SYS_newfstatat, AT_CWD, path, st, AT_SYMLINK_NOFOLLOW);
}
static int sys_fstat(int fd, struct stat *st) { return (int)sc2(SYS_fstat, fd, st); }
static long sys_getdents(int fd, void *buf, long n) { return sc3(SYS_getdents64, fd, buf, n); }
static long sys_readlink(const char *path, char *buf, long n) { return sc4(SYS_readlinkat, AT_CWD, path, buf, n); }
static int sys_unlink(const char *path, int flags) { return (int)sc3(SYS_unlinkat, AT_CWD, path, flags); }
static int sys_mkdir(const char *path, int mode) { return (int)sc3(SYS_mkdirat, AT_CWD, path, mode); }
static int sys_rename(const char *from, const char *to) { return (int)sc5(SYS_renameat2, AT_CWD, from, AT_CWD, to, 0); }
static int sys_kill(long pid, int sig) { return (int)sc2(SYS_kill, pid, sig); }
static long sys_getpid(void) { return sc0(SYS_getpid); }
static void sys_exit(int code) { for (;;) sc1(SYS_exit_group, code); }
static int sys_prctl(int op, long a) { return (int)sc5(SYS_prctl, op, a, 0, 0, 0); }

/* -- small helpers (no C library) --------------------------------------------------------------- */

void *memset(void *dst, int c, size_t n) {
    unsigned char *d = dst;
    while (n--) *d++ = (unsigned char)c;
    return dst;
}

void *memcpy(void *dst, const void *src, size_t n) {
    unsigned char *d = dst;
    const unsigned char *s = src;
    while (n--) *d++ = *s++;
    return dst;
}

static size_t slen(const char *s) {
    size_t n = 0;
    while (s[n]) n++;
    return n;
}

static int scmp(const char *a, const char *b) {
    while (*a && *a == *b) a++, b++;
    return (unsigned char)*a - (unsigned char)*b;
}

static int starts(const char *s, const char *prefix) {
    while (*prefix)
        if (*s++ != *prefix++) return 0;
    return 1;
}

/* strings built in fixed buffers; too long a result is cut (paths here are short) */
static void cat(char *dst, size_t cap, const char *a, const char *b, const char *c) {
    size_t n = 0;
    const char *parts[3] = {a, b, c};
    for (int i = 0; i < 3; i++)
        for (const char *p = parts[i]; p && *p && n + 1 < cap; p++) dst[n++] = *p;
    dst[n] = 0;
}

static void fmt_long(char *dst, long v) {
    char tmp[24];
    int n = 0, neg = v < 0;
    unsigned long u = neg ? (unsigned long)(-v) : (unsigned long)v;
    do tmp[n++] = (char)('0' + u % 10); while (u /= 10);
    if (neg) *dst++ = '-';
    while (n) *dst++ = tmp[--n];
    *dst = 0;
}

static long parse_long(const char *s) {
    long v = 0;
    while (*s >= '0' && *s <= '9') v = v * 10 + (*s++ - '0');
    return v;
}

static void say(const char *a, const char *b, const char *c) {
    char line[4096];
    cat(line, sizeof line - 1, a, b, c);
    size_t n = slen(line);
    line[n++] = '\n';
    sys_write(1, line, (long)n);
}

static void pause_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    sc2(SYS_nanosleep, &ts, 0);
}

static long now_ms(void) {
    struct timespec ts = {0, 0};
    sc2(SYS_clock_gettime, CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

/* -- sha256 ----------------------------------------------------------------------------------------- */

typedef struct {
    uint32_t h[8];
    uint64_t len;
    unsigned char buf[64];
    size_t used;
} sha256_ctx;

static const uint32_t K256[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

#define ROR(x, n) (((x) >> (n)) | ((x) << (32 - (n))))

static void sha256_block(sha256_ctx *c, const unsigned char *p) {
    uint32_t w[64], a, b, d, e, f, g, h, cc, t1, t2;
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
    for (int i = 16; i < 64; i++) {
        uint32_t s0 = ROR(w[i - 15], 7) ^ ROR(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = ROR(w[i - 2], 17) ^ ROR(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    a = c->h[0], b = c->h[1], cc = c->h[2], d = c->h[3], e = c->h[4], f = c->h[5], g = c->h[6], h = c->h[7];
    for (int i = 0; i < 64; i++) {
        t1 = h + (ROR(e, 6) ^ ROR(e, 11) ^ ROR(e, 25)) + ((e & f) ^ (~e & g)) + K256[i] + w[i];
        t2 = (ROR(a, 2) ^ ROR(a, 13) ^ ROR(a, 22)) + ((a & b) ^ (a & cc) ^ (b & cc));
        h = g, g = f, f = e, e = d + t1, d = cc, cc = b, b = a, a = t1 + t2;
    }
    c->h[0] += a, c->h[1] += b, c->h[2] += cc, c->h[3] += d, c->h[4] += e, c->h[5] += f, c->h[6] += g, c->h[7] += h;
}

static void sha256_init(sha256_ctx *c) {
    static const uint32_t iv[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    for (int i = 0; i < 8; i++) c->h[i] = iv[i];
    c->len = 0, c->used = 0;
}

static void sha256_update(sha256_ctx *c, const void *data, size_t n) {
    const unsigned char *p = data;
    c->len += n;
    while (n) {
        if (c->used == 0 && n >= 64) {
            sha256_block(c, p), p += 64, n -= 64;
            continue;
        }
        size_t take = 64 - c->used < n ? 64 - c->used : n;
        memcpy(c->buf + c->used, p, take);
        c->used += take, p += take, n -= take;
        if (c->used == 64) sha256_block(c, c->buf), c->used = 0;
    }
}

static void sha256_hex(sha256_ctx *c, char hex[65]) {
    uint64_t bits = c->len * 8;
    unsigned char pad = 0x80, zero = 0, lenbuf[8];
    sha256_update(c, &pad, 1);
    while (c->used != 56) sha256_update(c, &zero, 1);
    for (int i = 0; i < 8; i++) lenbuf[i] = (unsigned char)(bits >> (56 - 8 * i));
    sha256_update(c, lenbuf, 8);
    for (int i = 0; i < 32; i++) {
        unsigned char byte = (unsigned char)(c->h[i / 4] >> (24 - 8 * (i % 4)));
        hex[2 * i] = "0123456789abcdef"[byte >> 4];
        hex[2 * i + 1] = "0123456789abcdef"[byte & 15];
    }
    hex[64] = 0;
}

static unsigned char io_buf[1 << 16];

/* 0 and the hex digest of a regular file; -1 when it cannot be opened, -2 when not a regular file */
static int hash_file(const char *path, char hex[65]) {
    int fd = sys_open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct stat st;
    if (sys_fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        sys_close(fd);
        return -2;
    }
    sha256_ctx c;
    sha256_init(&c);
    long n;
    while ((n = sys_read(fd, io_buf, sizeof io_buf)) > 0) sha256_update(&c, io_buf, (size_t)n);
    sys_close(fd);
    if (n < 0) return -1;
    sha256_hex(&c, hex);
    return 0;
}

/* -- folder listings -------------------------------------------------------------------------------- */

struct dirent64_ {
    uint64_t ino;
    int64_t off;
    unsigned short reclen;
    unsigned char type;
    char name[];
};

static char name_pool[1 << 20];
static char *names[32768];
static unsigned char dent_buf[1 << 15];

/* the sorted entry names of a folder (not following a final symlink); count, or -1 */
static int read_names(const char *dir, int skip_pycache) {
    int fd = sys_open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC, 0);
    if (fd < 0) return -1;
    int count = 0;
    size_t used = 0;
    long n;
    while ((n = sys_getdents(fd, dent_buf, sizeof dent_buf)) > 0) {
        for (long off = 0; off < n;) {
            struct dirent64_ *d = (struct dirent64_ *)(dent_buf + off);
            off += d->reclen;
            if (!scmp(d->name, ".") || !scmp(d->name, "..") || (skip_pycache && !scmp(d->name, "__pycache__")))
                continue;
            size_t len = slen(d->name) + 1;
            if (used + len > sizeof name_pool || count >= (int)(sizeof names / sizeof names[0])) {
                sys_close(fd);
                return -1;
            }
            memcpy(name_pool + used, d->name, len);
            names[count++] = name_pool + used;
            used += len;
        }
    }
    sys_close(fd);
    if (n < 0) return -1;
    for (int gap = count / 2; gap > 0; gap /= 2) /* shell sort, by bytes */
        for (int i = gap; i < count; i++)
            for (int j = i; j >= gap && scmp(names[j - gap], names[j]) > 0; j -= gap) {
                char *t = names[j];
                names[j] = names[j - gap], names[j - gap] = t;
            }
    return count;
}

static int listing_digest(const char *dir, char hex[65]) {
    int count = read_names(dir, 1);
    if (count < 0) return -1;
    sha256_ctx c;
    sha256_init(&c);
    for (int i = 0; i < count; i++) {
        sha256_update(&c, names[i], slen(names[i]));
        sha256_update(&c, "\n", 1);
    }
    sha256_hex(&c, hex);
    return 0;
}

/* -- the runtime list ----------------------------------------------------------------------------- */

struct entry {
    char kind;
    const char *hash;
    const char *path;
};

static char list_buf[1 << 21];
static struct entry entries[8192];
static int n_entries;

static int load_list(const char *path) {
    int fd = sys_open(path, O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0) return -1;
    long used = 0, n;
    while ((n = sys_read(fd, list_buf + used, (long)sizeof list_buf - 1 - used)) > 0) used += n;
    sys_close(fd);
    if (n < 0 || used >= (long)sizeof list_buf - 1) return -1;
    list_buf[used] = 0;
    for (char *line = list_buf; *line;) {
        char *end = line;
        while (*end && *end != '\n') end++;
        char *next = *end ? end + 1 : end;
        *end = 0;
        if (*line && *line != '#') {
            /* "K HASH PATH": kind, one space, hash or "-", one space, the path to the end of the line */
            char *hash = line + 2, *space = hash;
            while (*space && *space != ' ') space++;
            if (line[1] != ' ' || !*space || n_entries >= (int)(sizeof entries / sizeof entries[0])) return -1;
            *space = 0;
            entries[n_entries++] = (struct entry){line[0], hash, space + 1};
        }
        line = next;
    }
    return 0;
}

static int is_verified_file(const char *path) {
    for (int i = 0; i < n_entries; i++)
        if ((entries[i].kind == 'F' || entries[i].kind == 'K') && !scmp(entries[i].path, path)) return 1;
    return 0;
}

/* every entry checked; the number that do not hold (each named on stdout) */
static int check_list(void) {
    int bad = 0;
    char hex[65];
    struct stat st;
    for (int i = 0; i < n_entries; i++) {
        struct entry *e = &entries[i];
        const char *why = 0;
        if (e->kind == 'F' || e->kind == 'K') {
            int r = hash_file(e->path, hex);
            if (r == -1) why = " is missing or unreadable";
            else if (r == -2) why = " is not a regular file";
            else if (scmp(hex, e->hash)) why = " differs from the healthy image";
        } else if (e->kind == 'A') {
            if (sys_lstat(e->path, &st) == 0) why = " exists (the healthy image has none)";
        } else if (e->kind == 'L') {
            if (listing_digest(e->path, hex) < 0) why = " is missing or not a folder";
            else if (scmp(hex, e->hash)) why = ": files were added or removed in this folder";
        } else {
            why = ": unknown entry kind in the runtime list";
        }
        if (why) {
            say("verifier: REJECT: runtime file ", e->path, why);
            bad++;
        }
    }
    return bad;
}

/* -- processes ------------------------------------------------------------------------------------- */

static char small[1 << 16];

static long read_small(const char *path) {
    int fd = sys_open(path, O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0) return -1;
    long used = 0, n;
    while ((n = sys_read(fd, small + used, (long)sizeof small - 1 - used)) > 0) used += n;
    sys_close(fd);
    small[used < 0 ? 0 : used] = 0;
    return used;
}

/* parent pid and state letter from a stat file ("pid (comm) S ppid ..."; comm may hold anything) */
static long stat_at(const char *path, char *state) {
    long n = read_small(path);
    if (n <= 0) return -1;
    char *p = small + n;
    while (p > small && *p != ')') p--;
    if (*p != ')' || p[1] != ' ') return -1;
    if (state) *state = p[2];
    return parse_long(p + 4);
}

static void proc_path(char *dst, size_t cap, long pid, const char *leaf) {
    char num[24];
    fmt_long(num, pid);
    cat(dst, cap, "/proc/", num, leaf);
}

static long stat_of(long pid, char *state) {
    char path[64];
    proc_path(path, sizeof path, pid, "/stat");
    return stat_at(path, state);
}

/* a number field of /proc/PID/status ("TracerPid:", "Threads:"), or -1 */
static long status_field(long pid, const char *field) {
    char path[64];
    proc_path(path, sizeof path, pid, "/status");
    if (read_small(path) <= 0) return -1;
    size_t n = slen(field);
    for (char *p = small; *p; p++)
        if ((p == small || p[-1] == '\n') && starts(p, field)) {
            p += n;
            while (*p == ' ' || *p == '\t') p++;
            return parse_long(p);
        }
    return -1;
}

/* Does some thread of PID's thread group still run? A leader that exited shows state Z while the
 * other threads of its group go on: such a process is alive. */
static int group_runs(long pid) {
    char dir[64], tid_dir[128], path[160];
    proc_path(dir, sizeof dir, pid, "/task");
    int count = read_names(dir, 0);
    for (int i = 0; i < count; i++) {
        char state = 0;
        cat(tid_dir, sizeof tid_dir, dir, "/", names[i]);
        cat(path, sizeof path, tid_dir, "/stat", 0);
        if (stat_at(path, &state) >= 0 && state != 'Z' && state != 'X') return 1;
    }
    return 0;
}

static long keep[4096];
static int n_keep;
static long ancestors[256];
static int n_ancestors;

static int kept(long pid) {
    for (int i = 0; i < n_keep; i++)
        if (keep[i] == pid) return 1;
    return 0;
}

static void find_ancestors(void) {
    n_ancestors = 0;
    for (long pid = sys_getpid(); pid > 0 && n_ancestors < 256;) {
        ancestors[n_ancestors++] = pid;
        pid = stat_of(pid, 0);
    }
}

/* One line of /proc/PID/maps: "start-end perms offset dev inode   path". */
struct mapping {
    unsigned long start, end, offset;
    int exec;
    const char *file;
};

static unsigned long parse_hex(const char **s) {
    unsigned long v = 0;
    for (;; (*s)++) {
        char c = **s;
        if (c >= '0' && c <= '9') v = v * 16 + (unsigned long)(c - '0');
        else if (c >= 'a' && c <= 'f') v = v * 16 + (unsigned long)(c - 'a' + 10);
        else return v;
    }
}

static void parse_mapping(char *line, struct mapping *m) {
    const char *p = line;
    m->start = parse_hex(&p);
    if (*p == '-') p++;
    m->end = parse_hex(&p);
    while (*p == ' ') p++;
    m->exec = p[0] && p[1] && p[2] == 'x';
    while (*p && *p != ' ') p++;
    while (*p == ' ') p++;
    m->offset = parse_hex(&p);
    for (int field = 0; field < 2; field++) { /* dev, inode */
        while (*p == ' ') p++;
        while (*p && *p != ' ') p++;
    }
    while (*p == ' ') p++;
    m->file = p;
}

static int is_special_mapping(const char *file) {
    return !scmp(file, "[vdso]") || !scmp(file, "[vsyscall]");
}

static char maps_copy[1 << 16];
static unsigned char mem_buf[1 << 15], file_buf[1 << 15];

/* The bytes of one executable mapping are those of its file at its offset (beyond the file's end:
 * zeros), read through /proc/PID/mem: code written into the process (ptrace, /proc/PID/mem) is
 * found even where the mapping still names the healthy file. */
static int mapping_intact(long pid, int mem, const struct mapping *m, const char *exe) {
    char path[4096];
    if (exe && !scmp(m->file, exe)) {
        proc_path(path, sizeof path, pid, "/exe"); /* the program's own bytes, even when its file was replaced */
    } else { /* a file replaced since it was mapped: its path now (the runtime list verifies that file) */
        cat(path, sizeof path, m->file, 0, 0);
        size_t n = slen(path), tail = slen(" (deleted)");
        if (n > tail && !scmp(path + n - tail, " (deleted)")) path[n - tail] = 0;
    }
    int fd = sys_open(path, O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0) return 0;
    int ok = 1;
    for (unsigned long at = m->start; ok && at < m->end;) {
        long want = (long)(m->end - at) < (long)sizeof mem_buf ? (long)(m->end - at) : (long)sizeof mem_buf;
        long got = sc4(SYS_pread64, mem, mem_buf, want, (long)at);
        if (got <= 0) {
            ok = 0;
            break;
        }
        long have = sc4(SYS_pread64, fd, file_buf, got, (long)(m->offset + (at - m->start)));
        if (have < 0) have = 0;
        for (long i = 0; i < got; i++)
            if (mem_buf[i] != (i < have ? file_buf[i] : 0)) {
                ok = 0;
                break;
            }
        at += (unsigned long)got;
    }
    sys_close(fd);
    return ok;
}

/* -- PID 1 held ------------------------------------------------------------------------------------------
 * No process of the container can stop or kill PID 1, and code injected into it (a writer entered at
 * a return address, or a chain of its own instructions) would outlive every sweep. So a child of this
 * tool attaches to every thread of PID 1 (PTRACE_SEIZE, new threads included) and interrupts it: PID 1
 * stays in a ptrace stop, never resumed, until the container ends. The child is undumpable (inherited);
 * a sweep keeps a tracer of PID 1 only when it is a child of this chain (is_holder). */

#define PTRACE_SEIZE_ 0x4206
#define PTRACE_INTERRUPT_ 0x4207
#define PTRACE_O_TRACECLONE_ 0x8
#define WALL_ 0x40000000
#define EPERM_ 1

/* is `pid` the holder: a child of this tool or of one of its ancestors but PID 1 (the only children
 * those have are this chain's own: no process of the agent's can be one, while an orphan of the
 * agent's becomes a child of PID 1)? */
static int is_holder(long pid) {
    long parent = stat_of(pid, 0);
    if (parent <= 1) return 0;
    if (parent == sys_getpid()) return 1;
    for (int i = 0; i < n_ancestors; i++)
        if (ancestors[i] == parent) return 1;
    return 0;
}

static long init_holder(void) {
    long tracer = status_field(1, "TracerPid:");
    return tracer > 0 && is_holder(tracer) ? tracer : 0;
}

/* seize every thread of PID 1 not held yet: 1 when all are held, 0 when one is traced by another
 * process (retry), -1 when this container does not allow tracing at all */
static int seize_init(void) {
    char names_copy[64][16];
    int count = read_names("/proc/1/task", 0), all = 1;
    if (count > 64) count = 64;
    for (int i = 0; i < count; i++) cat(names_copy[i], sizeof names_copy[i], names[i], 0, 0);
    for (int i = 0; i < count; i++) {
        long tid = parse_long(names_copy[i]);
        long r = sc4(SYS_ptrace, PTRACE_SEIZE_, tid, 0, PTRACE_O_TRACECLONE_);
        if (r == 0 || status_field(tid, "TracerPid:") == sys_getpid()) {
            sc4(SYS_ptrace, PTRACE_INTERRUPT_, tid, 0, 0);
            continue;
        }
        if (r == -EPERM_ && status_field(tid, "TracerPid:") == 0) return -1; /* no ptrace here */
        all = 0;
    }
    return all;
}

static void holder_main(int report) {
    int null = sys_open("/dev/null", O_RDWR | O_CLOEXEC, 0);
    for (int fd = 0; fd < 3 && null >= 0; fd++) sc3(SYS_dup3, null, fd, 0);
    sc0(SYS_setsid);
    int held = 0;
    for (int round = 0; round < 1500 && held == 0; round++) { /* up to 30 s: a tracer of the agent's dies */
        held = seize_init();
        if (held == 0) pause_ms(20);
    }
    sys_write(report, held == 1 ? "H" : held < 0 ? "N" : "F", 1);
    sys_close(report);
    if (held != 1) sys_exit(0);
    int status; /* stops of PID 1 (a signal, a new thread) are waited for and never resumed */
    while (sc4(SYS_wait4, -1, &status, WALL_, 0) >= 0) {
    }
    sys_exit(0); /* nothing left to wait for: PID 1 is gone */
}

static int holder_fd = -1;
static long holder_pid; /* this run's holder, kept by the sweeps before it holds PID 1 */
static int pid1_final; /* set for the last check of the survivors, PID 1 held */

/* start holding PID 1 (once); see holder_state */
static void hold_init(void) {
    if (holder_fd >= 0 || init_holder()) return;
    int fds[2];
    if (sc2(SYS_pipe2, fds, O_CLOEXEC) < 0) return;
    long pid = sc5(SYS_clone, SIGCHLD, 0, 0, 0, 0);
    if (pid == 0) {
        sys_close(fds[0]);
        holder_main(fds[1]);
    }
    sys_close(fds[1]);
    if (pid < 0) {
        sys_close(fds[0]);
        return;
    }
    sc3(SYS_fcntl, fds[0], F_SETFL, O_NONBLOCK);
    holder_fd = fds[0];
    holder_pid = pid;
}

/* 'H' PID 1 held, 'N' tracing not allowed in this container (nothing held: said, not refused),
 * 'F' another process traces it, '?' no answer within `wait_ms` */
static char holder_state(long wait_ms) {
    static char state = '?';
    if (init_holder()) state = 'H';
    for (long start = now_ms(); state == '?' && holder_fd >= 0;) {
        char c;
        if (sys_read(holder_fd, &c, 1) == 1) state = c;
        else if (now_ms() - start >= wait_ms) break;
        else pause_ms(5);
    }
    return state;
}

/* What is wrong with the code PID runs (0 when nothing): traced, an executable mapping of no file or
 * of a file not verified (with `verified_only`), or bytes in memory that its file does not hold. */
static const char *code_fault(long pid, int verified_only, const char *exe_or_null) {
    char path[64], exe_buf[4096];
    const char *exe = exe_or_null;
    if (!exe) {
        proc_path(path, sizeof path, pid, "/exe");
        long len = sys_readlink(path, exe_buf, sizeof exe_buf - 1);
        exe_buf[len > 0 ? len : 0] = 0;
        exe = exe_buf;
    }
    long tracer = status_field(pid, "TracerPid:");
    /* PID 1 traced at the start (a holder a previous run left, or a tracer of the agent's) is not a
       fault yet: the sweep kills that tracer and the final check, PID 1 held, decides */
    if (tracer != 0 && !(pid == 1 && (is_holder(tracer) || !pid1_final))) return "is traced by another process";
    proc_path(path, sizeof path, pid, "/maps");
    long n = read_small(path);
    if (n <= 0) return "has no readable memory map";
    memcpy(maps_copy, small, (size_t)n + 1);
    proc_path(path, sizeof path, pid, "/mem");
    int mem = sys_open(path, O_RDONLY | O_CLOEXEC, 0);
    if (mem < 0) return "has a memory this tool cannot read";
    const char *fault = 0;
    for (char *line = maps_copy; *line && !fault;) {
        char *end = line;
        while (*end && *end != '\n') end++;
        char *next = *end ? end + 1 : end;
        *end = 0;
        struct mapping m;
        parse_mapping(line, &m);
        line = next;
        if (!m.exec || is_special_mapping(m.file)) continue;
        if (m.file[0] != '/') fault = "runs code mapped from no file (injected)";
        else if (verified_only && !is_verified_file(m.file) && scmp(m.file, exe))
            fault = "runs code from a file the healthy image's runtime list does not hold";
        else if (!mapping_intact(pid, mem, &m, exe)) fault = "runs code that differs from its file (injected)";
    }
    sys_close(mem);
    return fault;
}

/* The container's keep-alive program: a child of PID 1 running a K program whose bytes are the
 * healthy ones, with nothing executable mapped but verified files, each intact in memory. */
static int keep_alive(long pid) {
    char path[64], hex[65], exe[4096];
    if (stat_of(pid, 0) != 1) return 0;
    proc_path(path, sizeof path, pid, "/exe");
    if (hash_file(path, hex) != 0) return 0; /* the bytes it runs, even when its file was replaced since */
    int known = 0;
    for (int i = 0; i < n_entries; i++)
        if (entries[i].kind == 'K' && !scmp(entries[i].hash, hex)) known = 1;
    if (!known) return 0;
    long exe_len = sys_readlink(path, exe, sizeof exe - 1);
    exe[exe_len > 0 ? exe_len : 0] = 0;
    return code_fault(pid, 1, exe) == 0;
}

static void keep_ancestors(void) {
    find_ancestors();
    n_keep = 0;
    keep[n_keep++] = 1;
    long holder = init_holder();
    if (holder) keep[n_keep++] = holder;
    if (holder_pid && holder_pid != holder) keep[n_keep++] = holder_pid;
    for (int i = 0; i < n_ancestors; i++) keep[n_keep++] = ancestors[i];
}

/* visit(pid, state) for every process of /proc not kept; the sum of what the visits return, or -1
 * when /proc cannot be read */
static long each_process(long (*visit)(long pid, char state)) {
    int fd = sys_open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
    if (fd < 0) return -1;
    long total = 0, n;
    static unsigned char buf[1 << 15];
    while ((n = sys_getdents(fd, buf, sizeof buf)) > 0) {
        for (long off = 0; off < n;) {
            struct dirent64_ *d = (struct dirent64_ *)(buf + off);
            off += d->reclen;
            if (d->name[0] < '0' || d->name[0] > '9') continue;
            long pid = parse_long(d->name);
            char state = 0;
            if (kept(pid) || stat_of(pid, &state) < 0) continue;
            if ((state == 'Z' || state == 'X') && !group_runs(pid)) continue; /* a corpse, nothing runs */
            total += visit(pid, state);
        }
    }
    sys_close(fd);
    return total;
}

static long stop_one(long pid, char state) {
    if (state == 'T' || state == 't') return 0;
    sys_kill(pid, SIGSTOP);
    return 1;
}

/* SIGSTOP every process but PID 1 and the ancestors until none runs: nothing of the agent's acts
 * while the reward files are cleared and the rest is looked at. */
static void freeze_strays(void) {
    keep_ancestors();
    for (int round = 0; round < 50; round++) {
        if (each_process(stop_one) <= 0) return;
        pause_ms(20);
    }
}

/* a healthy keep-alive (child of PID 1) is stopped and kept; anything else is killed */
static long kill_one(long pid, char state) {
    if (state != 'Z' && n_keep < 4096 && stat_of(pid, 0) == 1) {
        sys_kill(pid, SIGSTOP);
        if (keep_alive(pid)) {
            keep[n_keep++] = pid;
            return 0;
        }
    }
    return sys_kill(pid, SIGKILL) == 0;
}

/* SIGKILL every process of the container but PID 1, the ancestors and healthy keep-alives, which
 * are stopped (SIGSTOP) before they are looked at and never continued: killing the container's
 * keep-alive would end the container, and the reward with it. */
static long kill_strays(void) {
    long killed = 0;
    keep_ancestors();
    for (int round = 0; round < 50; round++) {
        long found = each_process(kill_one);
        if (found <= 0) break;
        killed += found;
        pause_ms(100);
    }
    return killed;
}

/* Step 0: the processes a sweep cannot kill. The ancestors (but this tool and PID 1) are stopped and
 * must be untraced, running verified code intact in memory; PID 1 must be untraced and intact.
 * Each fault is named; the count is returned. */
static int check_survivors(void) {
    int bad = 0;
    char num[24];
    find_ancestors();
    for (int k = 1; k < n_ancestors; k++)
        if (ancestors[k] != 1) sys_kill(ancestors[k], SIGSTOP);
    for (int k = 1; k < n_ancestors; k++) {
        if (ancestors[k] == 1) continue;
        const char *fault = code_fault(ancestors[k], 1, 0);
        if (fault) {
            char who[128];
            fmt_long(num, ancestors[k]);
            cat(who, sizeof who, "a shell that started the verifier (pid ", num, ") ");
            say("verifier: REJECT: ", who, fault);
            bad++;
        }
    }
    const char *fault = code_fault(1, 0, 0);
    if (fault) {
        say("verifier: REJECT: the container's first process (pid 1) ", fault, 0);
        bad++;
    }
    return bad;
}

/* does a surviving process (other than this one) hold one of the reward files open? */
static int reward_held(const char **paths, int n_paths) {
    char dir[64], link[64], target[4096];
    long self = sys_getpid();
    for (int i = 0; i < n_keep; i++) {
        if (keep[i] == self) continue;
        proc_path(dir, sizeof dir, keep[i], "/fd");
        int count = read_names(dir, 0);
        for (int j = 0; j < count; j++) {
            cat(link, sizeof link, dir, "/", names[j]);
            long len = sys_readlink(link, target, sizeof target - 1);
            if (len <= 0) continue;
            target[len] = 0;
            for (int k = 0; k < n_paths; k++)
                if (!scmp(target, paths[k]) || (starts(target, paths[k]) && target[slen(paths[k])] == ' ')) {
                    say("verifier: REJECT: a surviving process holds ", target, " open");
                    return 1;
                }
        }
    }
    return 0;
}

/* -- the reward file -------------------------------------------------------------------------------- */

static int sys_chmod(const char *path, int mode) { return (int)sc4(SYS_fchmodat, AT_CWD, path, mode, 0); }

static long moved_aside;

/* Remove a file or folder tree. A folder is made writable and searchable first (this tool has no
 * CAP_DAC_OVERRIDE: a folder of mode 000 would stop it); what cannot be removed (nested too deep)
 * is renamed aside within its folder, so that its name is free. */
static void remove_tree(const char *path, int depth) {
    struct stat st;
    if (sys_lstat(path, &st) < 0) return;
    if (S_ISDIR(st.st_mode) && depth < 8) {
        static char child[4096];
        sys_chmod(path, 0700);
        int count = read_names(path, 0);
        /* names[] is reused by the recursion: copy this level's names first */
        static char copy[8][1 << 14];
        size_t used = 0;
        char *mine[512];
        int kept_n = 0;
        for (int i = 0; i < count && kept_n < 512; i++) {
            size_t len = slen(names[i]) + 1;
            if (used + len > sizeof copy[depth]) break;
            memcpy(copy[depth] + used, names[i], len);
            mine[kept_n++] = copy[depth] + used;
            used += len;
        }
        for (int i = 0; i < kept_n; i++) {
            cat(child, sizeof child, path, "/", mine[i]);
            remove_tree(child, depth + 1);
        }
        sys_unlink(path, AT_REMOVEDIR);
    } else if (!S_ISDIR(st.st_mode)) {
        sys_unlink(path, 0);
    }
    if (depth == 0 && sys_lstat(path, &st) == 0) {
        char aside[4096], num[24];
        fmt_long(num, sys_getpid() * 1000 + moved_aside++);
        cat(aside, sizeof aside, path, ".refused-", num);
        if (S_ISDIR(st.st_mode)) sys_chmod(path, 0700); /* renaming a folder rewrites its ".." */
        sys_rename(path, aside);
    }
}

static void dirname_of(const char *path, char *dir, size_t cap) {
    cat(dir, cap, path, 0, 0);
    size_t n = slen(dir);
    while (n > 1 && dir[n - 1] != '/') n--;
    dir[n > 1 ? n - 1 : n] = 0;
}

static void owner_may_enter(const char *dir) {
    struct stat st;
    if (sys_lstat(dir, &st) == 0 && S_ISDIR(st.st_mode) && (long)st.st_uid == sc0(SYS_geteuid)
        && (st.st_mode & 0700) != 0700)
        sys_chmod(dir, (int)(st.st_mode & 07777) | 0700);
}

/* the reward folder as a real folder this tool can write: a symlink planted there is removed, and
   the mode of a folder it owns reset (root without CAP_DAC_OVERRIDE cannot write into a folder of
   mode 555, but as its owner it may change the mode) */
static int reward_folder(const char *reward, char *dir, size_t cap) {
    struct stat st;
    dirname_of(reward, dir, cap);
    for (size_t i = 1; dir[i]; i++) /* mkdir -p, each parent made writable by its owner (a locked
                                       parent would keep a symlink planted as the folder) */
        if (dir[i] == '/') {
            dir[i] = 0;
            sys_mkdir(dir, 0755);
            owner_may_enter(dir);
            dir[i] = '/';
        }
    if (sys_lstat(dir, &st) == 0 && !S_ISDIR(st.st_mode)) sys_unlink(dir, 0);
    sys_mkdir(dir, 0755);
    if (sys_lstat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) return -1;
    if ((long)st.st_uid == sc0(SYS_geteuid) && (st.st_mode & 07777) != 0755) sys_chmod(dir, 0755);
    return 0;
}

/* at the start (verdict too: only this run's details may be read) and before the reward is
   written (the verdict the verifier just wrote stays: `miner check` reads its problems) */
static void clear_rewards(const char *reward, int verdict) {
    char dir[4096], path[4096];
    if (reward_folder(reward, dir, sizeof dir) < 0) return;
    remove_tree(reward, 0);
    cat(path, sizeof path, dir, "/reward.json", 0);
    remove_tree(path, 0);
    cat(path, sizeof path, reward, ".tmp", 0);
    remove_tree(path, 0);
    if (!verdict) return;
    cat(path, sizeof path, dir, "/verdict.json", 0);
    remove_tree(path, 0);
}

/* the reward file holds exactly `want` and no reward.json stands beside it */
static int reward_reads(const char *reward, const char *want) {
    char dir[4096], json[4096], got[8] = {0};
    struct stat st;
    dirname_of(reward, dir, sizeof dir);
    cat(json, sizeof json, dir, "/reward.json", 0);
    if (sys_lstat(json, &st) == 0 || sys_lstat(reward, &st) != 0 || !S_ISREG(st.st_mode)) return 0;
    int fd = sys_open(reward, O_RDONLY | O_NOFOLLOW | O_CLOEXEC, 0);
    if (fd < 0) return 0;
    long n = sys_read(fd, got, sizeof got - 1);
    sys_close(fd);
    return n == 2 && got[0] == want[0] && got[1] == '\n';
}

/* Write the reward once, atomically, and read it back; -1 when the file Harbor reads does not say
 * `value` (what was found there is then overwritten with 0 where it can be, never trusted). */
static int write_reward(const char *reward, int value) {
    char dir[4096], tmp[4096];
    const char *text = value ? "1\n" : "0\n";
    clear_rewards(reward, 0);
    if (reward_folder(reward, dir, sizeof dir) < 0) return -1;
    cat(tmp, sizeof tmp, reward, ".tmp", 0);
    int fd = sys_open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd >= 0) {
        sys_write(fd, text, 2);
        sys_close(fd);
        sys_rename(tmp, reward);
    }
    if (reward_reads(reward, text)) return 0;
    fd = sys_open(reward, O_WRONLY | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0);
    if (fd >= 0) {
        sys_write(fd, "0\n", 2);
        sys_close(fd);
    }
    return -1;
}

/* -- exec --------------------------------------------------------------------------------------------- */

static char **environ_;

static const char *env_get(char **envp, const char *name) {
    size_t n = slen(name);
    for (char **e = envp; *e; e++)
        if (starts(*e, name) && (*e)[n] == '=') return *e + n + 1;
    return 0;
}

/* execve, searching PATH when the program has no slash; returns only on failure */
static void exec_program(char **argv, char **envp) {
    const char *prog = argv[0];
    for (const char *p = prog; *p; p++)
        if (*p == '/') {
            sc3(SYS_execve, prog, argv, envp);
            return;
        }
    const char *path = env_get(envp, "PATH");
    char full[4096], part[4096];
    for (const char *p = path ? path : "/usr/local/bin:/usr/bin:/bin"; *p;) {
        size_t n = 0;
        while (p[n] && p[n] != ':') n++;
        if (n && n < sizeof part) {
            memcpy(part, p, n);
            part[n] = 0;
            cat(full, sizeof full, part, "/", prog);
            sc3(SYS_execve, full, argv, envp);
        }
        p += n + (p[n] == ':');
    }
}

static void drop_privileges(void) {
    sys_prctl(PR_SET_NO_NEW_PRIVS, 1);
    for (int cap = 0; cap < 64; cap++) sys_prctl(PR_CAPBSET_DROP, cap);
    sc5(SYS_prctl, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
}

static int cmd_drop(int argc, char **argv) {
    int i = 0;
    while (i < argc && scmp(argv[i], "--")) i++;
    if (i + 1 >= argc) {
        say("boot drop: usage: boot drop -- PROGRAM ARGS...", 0, 0);
        return 2;
    }
    drop_privileges();
    exec_program(argv + i + 1, environ_);
    say("boot drop: cannot run ", argv[i + 1], 0);
    return 127;
}

static int cmd_env0(int argc, char **argv) {
    if (argc < 1) return 2;
    int fd = sys_open(argv[0], O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) return 1;
    for (char **e = environ_; *e; e++) sys_write(fd, *e, (long)slen(*e) + 1);
    sys_close(fd);
    return 0;
}

static int cmd_digests(int argc, char **argv, int listing) {
    char hex[65];
    int bad = 0;
    for (int i = 0; i < argc; i++) {
        int r = listing ? listing_digest(argv[i], hex) : hash_file(argv[i], hex);
        if (r < 0) {
            say("-  ", argv[i], 0);
            bad = 1;
        } else {
            say(hex, "  ", argv[i]);
        }
    }
    return bad;
}

static int cmd_ancestors(void) {
    char num[24];
    find_ancestors();
    for (int i = 0; i < n_ancestors; i++) {
        fmt_long(num, ancestors[i]);
        say(num, 0, 0);
    }
    return 0;
}

/* -- score ---------------------------------------------------------------------------------------------- */

struct options {
    const char *list, *reward, *python, *restore;
    long deadline;
    int kill, kill_ancestors, summary;
    char **script;
    int n_script;
};

static void summary_line(int ok) {
    say("=========================== short test summary info ============================", 0, 0);
    say(ok ? "PASSED" : "FAILED", " tests/verifier.py::test_environment_repaired", 0);
}

/* The environment the boot tool's children start with: nothing of the inherited one (the shells
   before this tool read startup files the agent could write). */
static char *clean_env[] = {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root", 0};

/* --restore DIR (the verifier mode "separate"): PYTHON -I -S -B restore.py DIR, next to the verifier,
   writes what the agent changed over this fresh container before anything is checked; non-zero
   when it could not (it says why). */
static int restore_changes(struct options *o) {
    char script[4096];
    dirname_of(o->script[0], script, sizeof script);
    cat(script, sizeof script, script, "/restore.py", 0);
    char *argv[] = {(char *)o->python, "-I", "-S", "-B", script, (char *)o->restore, 0};
    long pid = sc5(SYS_clone, SIGCHLD, 0, 0, 0, 0);
    if (pid == 0) {
        sc3(SYS_execve, o->python, argv, clean_env);
        say("verifier: cannot run ", o->python, 0);
        sys_exit(127);
    }
    int status = 0;
    if (pid < 0 || sc4(SYS_wait4, pid, &status, 0, 0) != pid) return 1;
    return !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* Run the verifier; its verdict (1 when the pipe says exactly "1\n" and it exited 0), or 0. */
static int run_verifier(struct options *o) {
    static char *argv[256];
    char self[4096], pycache[128], hexr[65], opt_pyc[160];
    long len = sys_readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0) return 0;
    self[len] = 0;
    unsigned char rnd[8];
    sc3(SYS_getrandom, rnd, sizeof rnd, 0);
    sha256_ctx c;
    sha256_init(&c);
    sha256_update(&c, rnd, sizeof rnd);
    sha256_hex(&c, hexr);
    hexr[16] = 0;
    cat(pycache, sizeof pycache, "/tmp/miner-pyc-", hexr, 0);
    if (sys_mkdir(pycache, 0700) < 0) return 0;
    cat(opt_pyc, sizeof opt_pyc, "pycache_prefix=", pycache, 0);
    int a = 0;
    const char *fixed[] = {o->python, "-I", "-S", "-B", "-X", "utf8", "-X", opt_pyc};
    for (unsigned i = 0; i < sizeof fixed / sizeof fixed[0]; i++) argv[a++] = (char *)fixed[i];
    for (int i = 0; i < o->n_script && a < 240; i++) argv[a++] = o->script[i];
    argv[a++] = "--verdict-fd";
    argv[a++] = "3";
    argv[a++] = "--boot";
    argv[a++] = self;
    if (o->kill) argv[a++] = "--kill";
    argv[a] = 0;

    int fds[2];
    if (sc2(SYS_pipe2, fds, 0) < 0) return 0;
    long pid = sc5(SYS_clone, SIGCHLD, 0, 0, 0, 0);
    if (pid == 0) {
        sys_close(fds[0]);
        if (fds[1] != 3) {
            sc3(SYS_dup3, fds[1], 3, 0);
            sys_close(fds[1]);
        }
        sc3(SYS_execve, o->python, argv, clean_env); /* the verifier builds the tests' environment itself */
        say("verifier: cannot run ", o->python, 0);
        sys_exit(127);
    }
    sys_close(fds[1]);
    if (pid < 0) {
        sys_close(fds[0]);
        return 0;
    }
    long start = now_ms(), limit = o->deadline * 1000L;
    int status = 0, done = 0;
    while (!done) {
        long r = sc4(SYS_wait4, pid, &status, WNOHANG, 0);
        if (r == pid) {
            done = 1;
        } else if (r < 0) {
            break;
        } else if (now_ms() - start > limit) {
            char secs[24];
            fmt_long(secs, o->deadline);
            say("verifier: REJECT: the verifier did not finish within ", secs, " s");
            sys_kill(pid, SIGKILL);
            sc4(SYS_wait4, pid, &status, 0, 0);
            status = -1;
            break;
        } else {
            pause_ms(50);
        }
    }
    if (o->kill) kill_strays(); /* whatever the verifier's children left behind */
    char verdict[16] = {0};
    long got = 0, n;
    sc3(SYS_fcntl, fds[0], F_SETFL, O_NONBLOCK);
    while (got < 15 && (n = sys_read(fds[0], verdict + got, 15 - got)) > 0) got += n;
    sys_close(fds[0]);
    sys_unlink(pycache, AT_REMOVEDIR);
    return done && WIFEXITED(status) && WEXITSTATUS(status) == 0 && got == 2 && verdict[0] == '1' &&
           verdict[1] == '\n';
}

static int traced_at_start;

static int cmd_score(int argc, char **argv) {
    struct options o = {0, 0, 0, 0, 3600, 1, 0, 0, 0, 0};
    int i = 0;
    for (; i < argc; i++) {
        if (!scmp(argv[i], "--")) {
            i++;
            break;
        }
        if (!scmp(argv[i], "--no-kill")) o.kill = 0;
        else if (!scmp(argv[i], "--kill-ancestors")) o.kill_ancestors = 1;
        else if (!scmp(argv[i], "--summary-line")) o.summary = 1;
        else if (i + 1 < argc && !scmp(argv[i], "--list")) o.list = argv[++i];
        else if (i + 1 < argc && !scmp(argv[i], "--reward")) o.reward = argv[++i];
        else if (i + 1 < argc && !scmp(argv[i], "--python")) o.python = argv[++i];
        else if (i + 1 < argc && !scmp(argv[i], "--deadline")) o.deadline = parse_long(argv[++i]);
        else if (i + 1 < argc && !scmp(argv[i], "--restore")) o.restore = argv[++i];
        else {
            say("boot score: unknown option ", argv[i], 0);
            return 2;
        }
    }
    if (!o.list || !o.reward || !o.python || i >= argc) {
        say("boot score: usage: boot score --list FILE --reward PATH --python PATH [options] -- SCRIPT ARGS", 0, 0);
        return 2;
    }
    o.script = argv + i;
    o.n_script = argc - i;

    int load_list_failed = load_list(o.list) != 0; /* first: it names the keep-alive program */
    int ok = !load_list_failed && !traced_at_start;
    if (traced_at_start) say("verifier: REJECT: the boot tool is traced by another process", 0, 0);
    if (o.kill) hold_init();
    if (o.kill && holder_state(300) == 'N')
        say("verifier: this container allows no tracing: PID 1 is checked, not held", 0, 0);
    if (o.kill && check_survivors()) ok = 0;
    if (o.kill) freeze_strays();
    /* reward 0 from now on, whatever ends this run early (the container stopped, the deadline) */
    clear_rewards(o.reward, 1);
    if (write_reward(o.reward, 0) < 0) ok = 0;
    if (o.kill) {
        char num[24];
        long killed = kill_strays();
        fmt_long(num, killed);
        if (killed) say("verifier: killed ", num, " process(es) left running in the container");
    }
    if (ok && o.restore && restore_changes(&o)) ok = 0;
    long checked = now_ms();
    if (load_list_failed) say("verifier: REJECT: the runtime list ", o.list, " cannot be read");
    else if (check_list()) ok = 0;
    char ms[24];
    fmt_long(ms, now_ms() - checked);
    say("verifier: runtime list checked in ", ms, " ms");
    if (ok) {
        say("verifier: the runtime the verifier runs on is the healthy one; starting ", o.python, 0);
        ok = run_verifier(&o);
    } else {
        say("verifier: the verifier does not run (the reasons are above)", 0, 0);
    }
    if (o.kill) kill_strays();
    else find_ancestors(), n_keep = 0;
    char hold = o.kill ? holder_state(3000) : 'N';
    if (hold != 'H' && hold != 'N') {
        say("verifier: REJECT: the container's first process (pid 1) could not be held still (another "
            "process traces it): what it runs could write after this tool", 0, 0);
        ok = 0;
    }
    pid1_final = 1;
    if (o.kill && check_survivors()) ok = 0; /* again, PID 1 held: nothing wrote into them meanwhile */
    char dir[4096], json[4096], tmp[4096];
    dirname_of(o.reward, dir, sizeof dir);
    cat(json, sizeof json, dir, "/reward.json", 0);
    cat(tmp, sizeof tmp, o.reward, ".tmp", 0);
    const char *held[] = {o.reward, json, tmp};
    if (o.kill && reward_held(held, 3)) ok = 0;
    if (write_reward(o.reward, ok) < 0) {
        say("verifier: REJECT: the reward file ", o.reward, " could not be replaced: reward 0, whatever it holds");
        ok = 0;
    } else {
        say("verifier: reward written once, by the boot tool: ", ok ? "1" : "0", 0);
    }
    if (o.summary) summary_line(ok);
    for (int k = n_ancestors - 1; o.kill && k >= 1; k--) /* stopped since step 0 */
        if (ancestors[k] != 1) sys_kill(ancestors[k], o.kill_ancestors ? SIGKILL : SIGCONT);
    return 0;
}

/* -- entry ------------------------------------------------------------------------------------------------ */

/* `boot script FILE`: the options of `score` from FILE's "# boot: score ..." line, split at spaces
   (test.sh's interpreter line names this tool: no shell runs before it). */
static int cmd_script(int argc, char **argv) {
    static char text[1 << 16];
    static char *words[256];
    if (argc < 1) {
        say("boot script: usage: boot script FILE", 0, 0);
        return 2;
    }
    int fd = sys_open(argv[argc - 1], O_RDONLY | O_CLOEXEC, 0);
    long n = fd < 0 ? -1 : sys_read(fd, text, sizeof text - 1);
    if (fd >= 0) sys_close(fd);
    if (n <= 0) {
        say("boot script: cannot read ", argv[argc - 1], 0);
        return 2;
    }
    text[n] = 0;
    for (char *line = text; *line;) {
        char *end = line;
        while (*end && *end != '\n') end++;
        char *next = *end ? end + 1 : end;
        *end = 0;
        if (starts(line, "# boot: score ")) {
            int count = 0;
            for (char *p = line + 14; *p && count < 255;) {
                while (*p == ' ') *p++ = 0;
                if (!*p) break;
                words[count++] = p;
                while (*p && *p != ' ') p++;
            }
            return cmd_score(count, words);
        }
        line = next;
    }
    say("boot script: no \"# boot: score\" line in ", argv[argc - 1], 0);
    return 2;
}

/* `boot sweep --list FILE`: step 1 alone (the list names the keep-alive program) */
static int cmd_sweep(int argc, char **argv) {
    char num[24];
    if (argc != 2 || scmp(argv[0], "--list") || load_list(argv[1]) != 0) {
        say("boot sweep: usage: boot sweep --list FILE (a readable runtime list)", 0, 0);
        return 2;
    }
    long killed = kill_strays();
    fmt_long(num, killed);
    if (killed) say("verifier: killed ", num, " process(es) left running in the container");
    return 0;
}

int cmain(long *sp) {
    int argc = (int)sp[0];
    char **argv = (char **)(sp + 1);
    environ_ = argv + argc + 1;
    int code = 2;
    /* From here on no process of this uid can attach to this one (no CAP_SYS_PTRACE is left). */
    sys_prctl(PR_SET_DUMPABLE, 0);
    int scoring = argc >= 2 && (!scmp(argv[1], "score") || !scmp(argv[1], "script"));
    /* a tracer attached before the prctl could make this process do anything: it scores 0 */
    traced_at_start = scoring && status_field(sys_getpid(), "TracerPid:") != 0;
    if (argc >= 2 && !scmp(argv[1], "score")) code = cmd_score(argc - 2, argv + 2);
    else if (argc >= 2 && !scmp(argv[1], "script")) code = cmd_script(argc - 2, argv + 2);
    else if (argc >= 2 && !scmp(argv[1], "sweep")) code = cmd_sweep(argc - 2, argv + 2);
    else if (argc >= 2 && !scmp(argv[1], "drop")) code = cmd_drop(argc - 2, argv + 2);
    else if (argc >= 2 && !scmp(argv[1], "env0")) code = cmd_env0(argc - 2, argv + 2);
    else if (argc >= 2 && !scmp(argv[1], "sha256")) code = cmd_digests(argc - 2, argv + 2, 0);
    else if (argc >= 2 && !scmp(argv[1], "listing")) code = cmd_digests(argc - 2, argv + 2, 1);
    else if (argc >= 2 && !scmp(argv[1], "ancestors")) code = cmd_ancestors();
    else say("usage: boot score|script|sweep|drop|env0|sha256|listing|ancestors ... (see boot.c)", 0, 0);
    sys_exit(code);
    return code;
}
