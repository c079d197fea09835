/* The node's client API from C (docs/api.md): build with
 *   cc example.c $(pkg-config --cflags --libs nacre) -lpthread -o example
 * and run as  ./example MOUNTPOINT DIR  (DIR: a new directory in the mount).
 * Four threads write 16 MiB striped over two OSTs through one handle, then it is read back
 * and checked, listed, renamed, linked and removed. Prints "ok" and exits 0 on success. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <nacre.h>

#define CHUNK (1 << 20)
#define THREADS 4
#define CHUNKS_PER_THREAD 4
#define TOTAL ((uint64_t)CHUNK * THREADS * CHUNKS_PER_THREAD)

static unsigned char byte_at(uint64_t i) { return (unsigned char)((i * 7 + i / 4096) & 0xff); }

#define CHECK(what, expr)                                                              \
    do {                                                                               \
        long long rc_ = (long long)(expr);                                             \
        if (rc_ < 0) {                                                                 \
            fprintf(stderr, "%s failed: %s\n", what, strerror((int)-rc_));              \
            exit(1);                                                                   \
        }                                                                              \
    } while (0)

struct job { struct nacre_file *f; int t; };

static void *writer(void *arg) {
    struct job *j = arg;
    unsigned char *buf = malloc(CHUNK);
    for (int c = 0; c < CHUNKS_PER_THREAD; c++) {
        uint64_t off = ((uint64_t)c * THREADS + j->t) * CHUNK;
        for (uint64_t i = 0; i < CHUNK; i++) buf[i] = byte_at(off + i);
        int64_t n = nacre_pwrite(j->f, buf, CHUNK, off);
        if (n != CHUNK) {
            fprintf(stderr, "pwrite at %llu: %lld\n", (unsigned long long)off, (long long)n);
            exit(1);
        }
    }
    free(buf);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s MOUNTPOINT DIR\n", argv[0]);
        return 2;
    }
    char path[4096], other[4096];
    struct nacre_fs *fs;
    CHECK("connect", nacre_connect(argv[1], &fs));
    printf("api version %u (header %d)\n", nacre_version(), NACRE_API_VERSION);
    CHECK("mkdir", nacre_mkdir(fs, argv[2], 0755));

    snprintf(path, sizeof path, "%s/data", argv[2]);
    CHECK("setstripe", nacre_setstripe(fs, path, 2, 1 << 20, NULL, 0644));
    struct nacre_stripe *layout = malloc(sizeof *layout);
    CHECK("getstripe", nacre_getstripe(fs, path, layout));
    printf("stripes %u size %llu osts %u,%u\n", layout->count,
           (unsigned long long)layout->size, layout->osts[0], layout->osts[1]);
    if (layout->count != 2 || layout->osts[0] == layout->osts[1]) {
        fprintf(stderr, "unexpected layout\n");
        return 1;
    }
    free(layout);

    struct nacre_file *f;
    CHECK("open for writing", nacre_open(fs, path, O_WRONLY, 0, &f));
    pthread_t th[THREADS];
    struct job jobs[THREADS];
    for (int t = 0; t < THREADS; t++) {
        jobs[t].f = f;
        jobs[t].t = t;
        pthread_create(&th[t], NULL, writer, &jobs[t]);
    }
    for (int t = 0; t < THREADS; t++) pthread_join(th[t], NULL);
    CHECK("fsync", nacre_fsync(f));
    CHECK("close", nacre_close(f));

    CHECK("open for reading", nacre_open(fs, path, O_RDONLY, 0, &f));
    struct nacre_stat st;
    CHECK("fstat", nacre_fstat(f, &st));
    if (st.size != TOTAL || !S_ISREG(st.mode)) {
        fprintf(stderr, "size %llu, want %llu\n", (unsigned long long)st.size,
                (unsigned long long)TOTAL);
        return 1;
    }
    unsigned char *a = malloc(CHUNK), *b = malloc(CHUNK + 100);
    for (uint64_t off = 0; off < TOTAL; off += 2 * CHUNK) {
        struct iovec iov[2] = {{a, CHUNK}, {b, CHUNK + 100}};
        int64_t n = nacre_preadv(f, iov, 2, off);
        uint64_t want = TOTAL - off < 2 * CHUNK + 100 ? TOTAL - off : 2 * CHUNK + 100;
        if (n != (int64_t)want) {
            fprintf(stderr, "preadv at %llu: %lld, want %llu\n", (unsigned long long)off,
                    (long long)n, (unsigned long long)want);
            return 1;
        }
        for (uint64_t i = 0; i < (uint64_t)n; i++) {
            unsigned char got = i < CHUNK ? a[i] : b[i - CHUNK];
            if (got != byte_at(off + i)) {
                fprintf(stderr, "byte %llu differs\n", (unsigned long long)(off + i));
                return 1;
            }
        }
    }
    /* The file's own position: read, lseek, read. */
    unsigned char head[16];
    if (nacre_read(f, head, 16) != 16 || head[3] != byte_at(3)) return 1;
    CHECK("lseek", nacre_lseek(f, -16, SEEK_END));
    if (nacre_read(f, head, 100) != 16 || head[0] != byte_at(TOTAL - 16)) return 1;
    CHECK("close", nacre_close(f));
    free(a);
    free(b);

    /* The namespace. */
    snprintf(other, sizeof other, "%s/renamed", argv[2]);
    CHECK("rename", nacre_rename(fs, path, other));
    snprintf(path, sizeof path, "%s/hard", argv[2]);
    CHECK("link", nacre_link(fs, other, path));
    snprintf(path, sizeof path, "%s/sym", argv[2]);
    CHECK("symlink", nacre_symlink(fs, "renamed", path));
    char target[64];
    int64_t tl = nacre_readlink(fs, path, target, sizeof target);
    if (tl != 7 || memcmp(target, "renamed", 7) != 0) return 1;
    CHECK("stat", nacre_stat(fs, path, &st));
    if (st.nlink != 2 || st.size != TOTAL) return 1;
    struct nacre_dir *d;
    CHECK("opendir", nacre_opendir(fs, argv[2], &d));
    struct nacre_dirent e;
    int entries = 0;
    while (nacre_readdir(d, &e) == 1) {
        printf("entry %s\n", e.name);
        entries++;
    }
    CHECK("closedir", nacre_closedir(d));
    if (entries != 3) return 1;
    if (nacre_rmdir(fs, argv[2]) != -ENOTEMPTY) return 1;
    struct nacre_file *none;
    snprintf(path, sizeof path, "%s/none", argv[2]);
    if (nacre_open(fs, path, O_RDONLY, 0, &none) != -ENOENT) return 1;
    snprintf(path, sizeof path, "%s/sym", argv[2]);
    CHECK("unlink", nacre_unlink(fs, path));
    snprintf(path, sizeof path, "%s/hard", argv[2]);
    CHECK("unlink", nacre_unlink(fs, path));
    CHECK("disconnect", nacre_disconnect(fs));
    printf("ok\n");
    return 0;
}
