/* The pack floor (bench/suites/pack.py): reads every file of a tree and writes one stream of
 * the same volume as its barge archive, with nothing but the syscalls any packer must make,
 * so `barge pack` time / this time is what barge's ordering, checks and format cost.
 *
 *     floor-pack DIR OUT
 *
 * The main thread walks DIR depth-first in getdents64 order (openat relative to the parent's
 * fd, O_DIRECTORY for directories, d_type to tell them from files) and reads each file into
 * a ring of 8 buffers of 256 KiB; a second thread, on the other CPU, writes each full buffer to
 * OUT with one write. A read that returns less than asked is taken as the end of the file (true
 * of tmpfs, not in general), so a small file costs openat + read + close. Each file's data is
 * followed by a barge-like FILE header (tag, name, NUL, u32 size), each directory is framed by
 * DIR and POP, and the stream has barge's 8-byte header and 9-byte END: the same bytes as the
 * barge archive except that there are no PERM messages and the order is getdents', and the
 * headers come after the data, so no stat is needed. The output is not a valid archive. No
 * sorting, no size checks, no symlink or special-file handling (skipped), no errors beyond an
 * exit code. */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#define NBUF 8
#define BUFSZ (256u << 10)

static uint8_t *bufs[NBUF];
static size_t lens[NBUF];
static unsigned filled, written; /* buffers handed to the writer / written, counting up */
static int done;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int out, main_cpu;
static uint8_t *cur;
static size_t used;
static uint64_t count;

static void die(const char *what) {
    perror(what);
    exit(1);
}

static void *writer(void *arg) {
    (void)arg;
    /* As barge's threads: a private fd table and credentials (see unpack.c). */
    unshare(CLONE_FILES);
    prctl(PR_SET_KEEPCAPS, prctl(PR_GET_KEEPCAPS, 0, 0, 0, 0), 0, 0, 0);
    cpu_set_t set;
    sched_getaffinity(0, sizeof set, &set);
    CPU_CLR(main_cpu, &set);
    if (CPU_COUNT(&set))
        sched_setaffinity(0, sizeof set, &set);
    for (;;) {
        pthread_mutex_lock(&mu);
        while (written == filled && !done)
            pthread_cond_wait(&cv, &mu);
        if (written == filled) {
            pthread_mutex_unlock(&mu);
            return NULL;
        }
        pthread_mutex_unlock(&mu);
        unsigned i = written % NBUF;
        for (size_t off = 0; off < lens[i];) {
            ssize_t w = write(out, bufs[i] + off, lens[i] - off);
            if (w <= 0)
                die("write");
            off += w;
        }
        pthread_mutex_lock(&mu);
        written++;
        pthread_cond_signal(&cv);
        pthread_mutex_unlock(&mu);
    }
}

/* Hands the current buffer to the writer and waits for a free one. */
static void submit(void) {
    pthread_mutex_lock(&mu);
    lens[filled % NBUF] = used;
    filled++;
    pthread_cond_signal(&cv);
    while (filled - written == NBUF)
        pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
    cur = bufs[filled % NBUF];
    used = 0;
}

static void emit(const void *p, size_t n) {
    while (n) {
        size_t k = BUFSZ - used < n ? BUFSZ - used : n;
        memcpy(cur + used, p, k);
        used += k;
        p = (const uint8_t *)p + k;
        n -= k;
        if (used == BUFSZ)
            submit();
    }
}

static void header(uint8_t tag, const char *name, size_t len) {
    emit(&tag, 1);
    emit(name, len + 1);
}

static void walk(int dfd) {
    char dents[32768];
    for (;;) {
        long n = getdents64(dfd, (void *)dents, sizeof dents);
        if (n < 0)
            die("getdents64");
        if (n == 0)
            return;
        for (long off = 0; off < n;) {
            struct dirent64 *d = (struct dirent64 *)(dents + off);
            off += d->d_reclen;
            const char *name = d->d_name;
            if (name[0] == '.' && (!name[1] || (name[1] == '.' && !name[2])))
                continue;
            size_t len = strlen(name);
            if (d->d_type == DT_DIR) {
                int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (fd < 0)
                    die("openat dir");
                header(0x02, name, len);
                count++;
                walk(fd);
                close(fd);
                emit("\x03", 1);
            } else if (d->d_type == DT_REG) {
                int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
                if (fd < 0)
                    die("openat file");
                uint32_t size = 0;
                for (;;) {
                    size_t want = BUFSZ - used;
                    ssize_t r = read(fd, cur + used, want);
                    if (r < 0)
                        die("read");
                    used += r;
                    size += r;
                    if ((size_t)r < want)
                        break;
                    submit();
                }
                close(fd);
                header(0x01, name, len);
                emit(&size, 4);
                count++;
            }
        }
    }
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: floor-pack DIR OUT\n");
        return 2;
    }
    int root = open(argv[1], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    out = open(argv[2], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (root < 0 || out < 0)
        die("open");
    for (int i = 0; i < NBUF; i++)
        if (!(bufs[i] = malloc(BUFSZ)))
            die("malloc");
    cur = bufs[0];
    main_cpu = sched_getcpu();
    pthread_t t;
    if (pthread_create(&t, NULL, writer, NULL))
        die("pthread_create");
    sched_yield();
    emit("BARGE\0\1\0", 8);
    walk(root);
    emit("", 1);
    emit(&count, 8);
    submit();
    pthread_mutex_lock(&mu);
    done = 1;
    pthread_cond_signal(&cv);
    pthread_mutex_unlock(&mu);
    pthread_join(t, NULL);
    return 0;
}
