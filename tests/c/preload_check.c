/* POSIX edge cases of the read and write families on a Nacre file, run with
 * libnacre_preload.so preloaded (tests/preload.rs): each check compares what the calls
 * return and leave (data, position, errno) with what the kernel gives for the same calls.
 * Usage: preload_check DIR   (prints "ok" and exits 0 when every check holds) */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

static int failures;
#define CHECK(cond)                                                             \
    do {                                                                        \
        if (!(cond)) {                                                          \
            fprintf(stderr, "%s:%d: %s (errno %d)\n", __FILE__, __LINE__, #cond, \
                    errno);                                                     \
            failures++;                                                         \
        }                                                                       \
    } while (0)

static void fill(char *b, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) b[i] = (char)((i * 31 + seed) & 0xff);
}

int main(int argc, char **argv) {
    if (argc != 2) return 2;
    char path[4096], path2[4096];
    snprintf(path, sizeof path, "%s/edge.bin", argv[1]);
    snprintf(path2, sizeof path2, "%s/edge2.bin", argv[1]);
    size_t n = 3 * 1024 * 1024 + 777; /* more than a ring chunk, odd */
    char *w = malloc(n), *r = malloc(n + 4096);
    fill(w, n, 7);

    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0);
    /* write moves the position; a short final piece; lseek sees it. */
    CHECK(write(fd, w, n) == (ssize_t)n);
    CHECK(lseek(fd, 0, SEEK_CUR) == (off_t)n);
    /* pread does not move it; reads past the end are short, then 0. */
    CHECK(pread(fd, r, n + 4096, 0) == (ssize_t)n && memcmp(r, w, n) == 0);
    CHECK(lseek(fd, 0, SEEK_CUR) == (off_t)n);
    CHECK(pread(fd, r, 100, n) == 0);
    CHECK(pread(fd, r, 100, n - 10) == 10 && memcmp(r, w + n - 10, 10) == 0);
    /* A negative offset is EINVAL. */
    errno = 0;
    CHECK(pread(fd, r, 10, -1) == -1 && errno == EINVAL);
    /* read from a position set by lseek; readv across iovecs of odd sizes. */
    CHECK(lseek(fd, 1000, SEEK_SET) == 1000);
    char a[3], b[5000], c[1];
    struct iovec iov[3] = {{a, sizeof a}, {b, sizeof b}, {c, sizeof c}};
    CHECK(readv(fd, iov, 3) == 5004);
    CHECK(memcmp(a, w + 1000, 3) == 0 && memcmp(b, w + 1003, 5000) == 0 && c[0] == w[6003]);
    CHECK(lseek(fd, 0, SEEK_CUR) == 6004);
    /* preadv2 at -1 is the current position, and moves it. */
    CHECK(preadv2(fd, iov, 1, -1, 0) == 3 && memcmp(a, w + 6004, 3) == 0);
    CHECK(lseek(fd, 0, SEEK_CUR) == 6007);
    /* pwritev at an offset past the end leaves a hole of zeros. */
    struct iovec wv[2] = {{"hole", 4}, {"end", 3}};
    CHECK(pwritev(fd, wv, 2, n + 100) == 7);
    CHECK(pread(fd, r, 200, n - 50) == 157);
    int zeros = 1;
    for (int i = 50; i < 150; i++) zeros &= r[i] == 0;
    CHECK(zeros && memcmp(r + 150, "holeend", 7) == 0);
    /* dup shares the position; dup2 onto another tracked descriptor replaces it. */
    int d = dup(fd);
    CHECK(d >= 0);
    CHECK(lseek(fd, 10, SEEK_SET) == 10);
    CHECK(read(d, a, 3) == 3 && memcmp(a, w + 10, 3) == 0);
    CHECK(lseek(fd, 0, SEEK_CUR) == 13);
    int other = open(path2, O_RDWR | O_CREAT | O_TRUNC, 0600);
    CHECK(other >= 0);
    CHECK(write(other, "second", 6) == 6);
    CHECK(dup2(fd, other) == other); /* `other` is now edge.bin */
    CHECK(pread(other, a, 3, 0) == 3 && memcmp(a, w, 3) == 0);
    CHECK(close(other) == 0 && close(d) == 0);
    /* fcntl(F_DUPFD) too. */
    int f3 = fcntl(fd, F_DUPFD_CLOEXEC, 100);
    CHECK(f3 >= 100 && pread(f3, a, 3, 3) == 3 && memcmp(a, w + 3, 3) == 0);
    CHECK(close(f3) == 0);
    /* ftruncate through the kernel is seen by the next read. */
    CHECK(ftruncate(fd, 4096) == 0);
    CHECK(pread(fd, r, 10000, 0) == 4096 && memcmp(r, w, 4096) == 0);
    CHECK(fsync(fd) == 0 && fdatasync(fd) == 0);
    CHECK(close(fd) == 0);
    /* A read-only descriptor refuses writes; a write-only one refuses reads: EBADF. */
    fd = open(path, O_RDONLY);
    errno = 0;
    CHECK(write(fd, "x", 1) == -1 && errno == EBADF);
    CHECK(read(fd, a, 3) == 3 && memcmp(a, w, 3) == 0);
    CHECK(close(fd) == 0);
    fd = open(path, O_WRONLY);
    errno = 0;
    CHECK(read(fd, a, 3) == -1 && errno == EBADF);
    CHECK(pwrite(fd, "XYZ", 3, 0) == 3);
    CHECK(close(fd) == 0);
    /* copy_file_range with offsets leaves the positions alone. */
    int in = open(path, O_RDONLY), out = open(path2, O_WRONLY | O_TRUNC);
    loff_t oi = 1, oo = 0;
    CHECK(copy_file_range(in, &oi, out, &oo, 4000, 0) == 4000);
    CHECK(oi == 4001 && oo == 4000 && lseek(in, 0, SEEK_CUR) == 0);
    CHECK(close(in) == 0 && close(out) == 0);
    fd = open(path2, O_RDONLY);
    CHECK(read(fd, r, 8000) == 4000 && memcmp(r, "YZ", 2) == 0 && memcmp(r + 2, w + 3, 3998) == 0);
    /* close_range forgets what it closes: a new descriptor of the same number is right. */
    int keep = fd;
    CHECK(close_range(keep, keep, 0) == 0);
    int again = open(path, O_RDONLY);
    CHECK(again == keep && read(again, a, 3) == 3 && memcmp(a, "XYZ", 3) == 0);
    CHECK(close(again) == 0);
    /* O_APPEND writes land at the end (through the kernel), reads still right. */
    fd = open(path, O_RDWR | O_APPEND);
    CHECK(write(fd, "APPENDED", 8) == 8);
    struct stat st;
    CHECK(fstat(fd, &st) == 0 && st.st_size == 4096 + 8);
    CHECK(pread(fd, r, 8, 4096) == 8 && memcmp(r, "APPENDED", 8) == 0);
    CHECK(close(fd) == 0);
    /* A shared mapping's change, after msync, is read through the library. */
    fd = open(path, O_RDWR);
    char *m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    CHECK(m != MAP_FAILED);
    if (m != MAP_FAILED) {
        memcpy(m + 100, "mapped", 6);
        CHECK(msync(m, 4096, MS_SYNC) == 0);
        CHECK(pread(fd, r, 6, 100) == 6 && memcmp(r, "mapped", 6) == 0);
        CHECK(munmap(m, 4096) == 0);
    }
    CHECK(close(fd) == 0);
    unlink(path2);
    if (failures) {
        fprintf(stderr, "%d checks failed\n", failures);
        return 1;
    }
    printf("ok\n");
    return 0;
}
