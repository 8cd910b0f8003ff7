/* The cp floor (bench/suites/cp.py): copies a tree with nothing but the syscalls every copier
 * keeping modes and mtimes must make, so `barge cp` time / this time is what barge's checks,
 * containment and generality cost over the bare work.
 *
 *     floor-cp [-j THREADS] SRC DEST     DEST must not exist; it becomes the copy of SRC
 *
 * Directories are opened relative to their parent's fd and listed with getdents64 (d_type
 * tells the kind); everything below the roots is relative to a directory fd with a
 * single-component name and never follows a symlink. Per entry:
 *   file:      openat(src, O_RDONLY|O_NOFOLLOW) + fstat (mode, size, mtime)
 *              + openat(dest, O_WRONLY|O_CREAT|O_EXCL|O_NOFOLLOW, mode)
 *              + copy_file_range (until size bytes; none for an empty file)
 *              + futimens (mtime; atime left as it is) + close x2: 7 calls
 *   directory: openat(src, O_DIRECTORY|O_NOFOLLOW) + fstat + mkdirat(mode)
 *              + openat(dest, O_DIRECTORY|O_NOFOLLOW) + getdents64 (at least twice)
 *              + close(src) once listed, and futimens + close(dest) once everything below
 *              it is copied
 *   symlink:   fstatat(AT_SYMLINK_NOFOLLOW) + readlinkat + symlinkat + utimensat
 *   other:     fstatat + mknodat + utimensat
 * The umask is set to 0 so that modes land as they are. With -j N (default 1) N threads
 * (the main one included) take directories from one shared stack, each listing a whole
 * directory and pushing its subdirectories (opened, both sides) for any thread to take; a
 * directory's mtime is set when the last of its subdirectories is done (a count per
 * directory). The helper threads get private credentials, as barge's do (see unpack.c); the
 * fd table stays shared, since directory fds move between threads.
 *
 * It keeps no owners, xattrs or hard links (a linked file is copied once per name), sets no
 * mode it cannot create with (a directory without owner write must be written as root),
 * validates nothing, has no --update, no containment beyond the fd-relative calls, no limits
 * and no error messages beyond perror and an exit code. */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define LISTING (32u << 10)
#define MAXTHREADS 64

/* A directory being copied. */
struct dir {
    int src, dst; /* src is closed once listed, dst once its mtime is set */
    struct timespec mtime;
    struct dir *parent;
    atomic_int pending; /* 1 until listed, plus 1 per subdirectory not yet done */
    struct dir *next;   /* in the stack */
};

static struct dir *stack;
static int finished;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;

static void die(const char *what) {
    perror(what);
    exit(1);
}

static void push(struct dir *d) {
    pthread_mutex_lock(&mu);
    d->next = stack;
    stack = d;
    pthread_cond_signal(&cv);
    pthread_mutex_unlock(&mu);
}

/* The next directory to list, or NULL once the root is done. */
static struct dir *pop(void) {
    pthread_mutex_lock(&mu);
    while (!stack && !finished)
        pthread_cond_wait(&cv, &mu);
    struct dir *d = stack;
    if (d)
        stack = d->next;
    pthread_mutex_unlock(&mu);
    return d;
}

/* One piece of `d` is done: when it was the last, sets its mtime and tells its parent. */
static void done(struct dir *d) {
    while (d && atomic_fetch_sub(&d->pending, 1) == 1) {
        struct timespec ts[2] = {{.tv_nsec = UTIME_OMIT}, d->mtime};
        if (futimens(d->dst, ts))
            die("futimens dir");
        close(d->dst);
        struct dir *parent = d->parent;
        free(d);
        if (!parent) {
            pthread_mutex_lock(&mu);
            finished = 1;
            pthread_cond_broadcast(&cv);
            pthread_mutex_unlock(&mu);
        }
        d = parent;
    }
}

/* Opens `name` in `sparent` as a directory and creates its copy as `dname` in `dparent`;
 * `parent` is the struct dir of both (NULL for the roots, whose names are paths). */
static struct dir *open_dir(struct dir *parent, int sparent, const char *name, int dparent, const char *dname) {
    struct dir *d = malloc(sizeof *d);
    struct stat st;
    if (!d)
        die("malloc");
    d->src = openat(sparent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (d->src < 0 || fstat(d->src, &st))
        die(name);
    if (mkdirat(dparent, dname, st.st_mode & 07777))
        die(dname);
    d->dst = openat(dparent, dname, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (d->dst < 0)
        die("openat dest dir");
    d->mtime = st.st_mtim;
    d->parent = parent;
    atomic_init(&d->pending, 1);
    return d;
}

static void copy_file(struct dir *d, const char *name) {
    struct stat st;
    int s = openat(d->src, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (s < 0 || fstat(s, &st))
        die(name);
    int t = openat(d->dst, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, st.st_mode & 07777);
    if (t < 0)
        die("openat dest file");
    for (off_t left = st.st_size; left > 0;) {
        ssize_t n = copy_file_range(s, NULL, t, NULL, left, 0);
        if (n <= 0)
            die("copy_file_range");
        left -= n;
    }
    struct timespec ts[2] = {{.tv_nsec = UTIME_OMIT}, st.st_mtim};
    if (futimens(t, ts))
        die("futimens");
    close(s);
    close(t);
}

static void copy_other(struct dir *d, const char *name) {
    struct stat st;
    if (fstatat(d->src, name, &st, AT_SYMLINK_NOFOLLOW))
        die(name);
    if (S_ISLNK(st.st_mode)) {
        char target[4097];
        ssize_t n = readlinkat(d->src, name, target, sizeof target - 1);
        if (n < 0)
            die("readlinkat");
        target[n] = 0;
        if (symlinkat(target, d->dst, name))
            die("symlinkat");
    } else if (mknodat(d->dst, name, st.st_mode, st.st_rdev)) {
        die("mknodat");
    }
    struct timespec ts[2] = {{.tv_nsec = UTIME_OMIT}, st.st_mtim};
    if (utimensat(d->dst, name, ts, AT_SYMLINK_NOFOLLOW))
        die("utimensat");
}

static void list(struct dir *d, char *buf) {
    for (;;) {
        long n = syscall(SYS_getdents64, d->src, buf, LISTING);
        if (n < 0)
            die("getdents64");
        if (n == 0)
            break;
        for (long at = 0; at < n;) {
            struct dirent *e = (struct dirent *)(buf + at);
            at += e->d_reclen;
            const char *name = e->d_name;
            if (name[0] == '.' && (!name[1] || (name[1] == '.' && !name[2])))
                continue;
            unsigned char type = e->d_type;
            if (type == DT_UNKNOWN) {
                struct stat st;
                if (fstatat(d->src, name, &st, AT_SYMLINK_NOFOLLOW))
                    die(name);
                type = S_ISDIR(st.st_mode) ? DT_DIR : S_ISREG(st.st_mode) ? DT_REG : DT_LNK;
            }
            if (type == DT_DIR) {
                atomic_fetch_add(&d->pending, 1);
                push(open_dir(d, d->src, name, d->dst, name));
            } else if (type == DT_REG) {
                copy_file(d, name);
            } else {
                copy_other(d, name);
            }
        }
    }
    close(d->src);
}

static void *work(void *helper) {
    if (helper) /* a private copy of the credentials (see unpack.c) */
        prctl(PR_SET_KEEPCAPS, prctl(PR_GET_KEEPCAPS, 0, 0, 0, 0), 0, 0, 0);
    char *buf = malloc(LISTING);
    if (!buf)
        die("malloc");
    for (struct dir *d; (d = pop());) {
        list(d, buf);
        done(d);
    }
    free(buf);
    return NULL;
}

int main(int argc, char **argv) {
    int threads = 1;
    if (argc == 5 && !strcmp(argv[1], "-j")) {
        threads = atoi(argv[2]);
        argv += 2;
        argc -= 2;
    }
    if (argc != 3 || threads < 1 || threads > MAXTHREADS) {
        fprintf(stderr, "usage: floor-cp [-j THREADS] SRC DEST\n");
        return 2;
    }
    /* Every queued directory holds two fds. */
    struct rlimit rl;
    if (!getrlimit(RLIMIT_NOFILE, &rl)) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    umask(0);
    push(open_dir(NULL, AT_FDCWD, argv[1], AT_FDCWD, argv[2]));
    pthread_t t[MAXTHREADS];
    for (int i = 1; i < threads; i++)
        if (pthread_create(&t[i], NULL, work, (void *)1))
            die("pthread_create");
    work(NULL);
    for (int i = 1; i < threads; i++)
        pthread_join(t[i], NULL);
    return 0;
}
