/* Rings from C (docs/api.md): each thread keeps QD requests of BS bytes in flight on a
 * ring of its own, for SECONDS, on one file — a fio-like driver of the node API's fast
 * path, used by bench/api.sh. Build:
 *   cc ringbench.c $(pkg-config --cflags --libs nacre) -lpthread -o ringbench
 * Run:
 *   ringbench MOUNT PATH read|write|randread|randwrite BS QD THREADS SIZE_MIB SECONDS
 * PATH (in the mount) is SIZE_MIB long for reads (written first by a write run); writes
 * create it. Prints one JSON line: ops/s and MiB/s. Exits 1 on any error. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <nacre.h>

static struct nacre_fs *fs;
static const char *path;
static int writing, random_io;
static uint64_t bs, size;
static uint32_t qd;
static int threads;
static double seconds;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static uint64_t rnd(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

struct result { uint64_t ops; int failed; };

static void *run(void *arg) {
    long t = (long)arg;
    struct result *r = calloc(1, sizeof *r);
    struct nacre_file *f;
    int rc = nacre_open(fs, path, writing ? O_RDWR | O_CREAT : O_RDONLY, 0644, &f);
    if (rc < 0) {
        fprintf(stderr, "open %s: %s\n", path, strerror(-rc));
        r->failed = 1;
        return r;
    }
    uint32_t entries = 1;
    while (entries < qd) entries <<= 1;
    struct nacre_ring *ring;
    rc = nacre_ring_create(fs, entries, (uint64_t)qd * bs, &ring);
    if (rc < 0) {
        fprintf(stderr, "ring: %s\n", strerror(-rc));
        r->failed = 1;
        return r;
    }
    unsigned char *buf = nacre_ring_buffers(ring);
    for (uint64_t i = 0; i < (uint64_t)qd * bs; i++) buf[i] = (unsigned char)(i * 31 + t);
    uint64_t blocks = size / bs, per = blocks / threads, first = per * t, next = 0;
    uint64_t seed = 0x9e3779b97f4a7c15ULL ^ (uint64_t)(t + 1);
    uint32_t in_flight = 0, *free_slots = malloc(qd * sizeof *free_slots), nfree = qd;
    for (uint32_t i = 0; i < qd; i++) free_slots[i] = i;
    struct nacre_cqe *cqes = malloc(qd * sizeof *cqes);
    double end = now() + seconds;
    int stopping = 0;
    while (!stopping || in_flight > 0) {
        if (now() >= end) stopping = 1;
        while (!stopping && nfree > 0) {
            uint64_t block = random_io ? rnd(&seed) % blocks : first + (next++ % per);
            uint32_t slot = free_slots[--nfree];
            rc = writing ? nacre_ring_prep_write(ring, f, block * bs, (uint64_t)slot * bs, bs, slot)
                         : nacre_ring_prep_read(ring, f, block * bs, (uint64_t)slot * bs, bs, slot);
            if (rc < 0) {
                fprintf(stderr, "prep: %s\n", strerror(-rc));
                r->failed = 1;
                return r;
            }
            in_flight++;
        }
        nacre_ring_submit(ring);
        int n = nacre_ring_wait(ring, 1, cqes, qd, 1000);
        if (n < 0) {
            fprintf(stderr, "wait: %s\n", strerror(-n));
            r->failed = 1;
            return r;
        }
        for (int i = 0; i < n; i++) {
            if (cqes[i].result != (int64_t)bs) {
                fprintf(stderr, "request: %lld\n", (long long)cqes[i].result);
                r->failed = 1;
            }
            free_slots[nfree++] = (uint32_t)cqes[i].user_data;
            in_flight--;
            r->ops++;
        }
    }
    nacre_ring_destroy(ring);
    if (writing) nacre_fsync(f);
    nacre_close(f);
    free(free_slots);
    free(cqes);
    return r;
}

int main(int argc, char **argv) {
    if (argc != 9) {
        fprintf(stderr,
                "usage: %s MOUNT PATH read|write|randread|randwrite BS QD THREADS SIZE_MIB SECONDS\n",
                argv[0]);
        return 2;
    }
    path = argv[2];
    writing = strstr(argv[3], "write") != NULL;
    random_io = strncmp(argv[3], "rand", 4) == 0;
    bs = strtoull(argv[4], NULL, 10);
    qd = (uint32_t)strtoul(argv[5], NULL, 10);
    threads = atoi(argv[6]);
    size = strtoull(argv[7], NULL, 10) << 20;
    seconds = atof(argv[8]);
    if (bs == 0 || qd == 0 || threads <= 0 || size / bs < (uint64_t)threads) {
        fprintf(stderr, "bad arguments\n");
        return 2;
    }
    int rc = nacre_connect(argv[1], &fs);
    if (rc < 0) {
        fprintf(stderr, "connect %s: %s\n", argv[1], strerror(-rc));
        return 1;
    }
    pthread_t th[64];
    if (threads > 64) threads = 64;
    double start = now();
    for (long t = 0; t < threads; t++) pthread_create(&th[t], NULL, run, (void *)t);
    uint64_t ops = 0;
    int failed = 0;
    for (int t = 0; t < threads; t++) {
        struct result *r;
        pthread_join(th[t], (void **)&r);
        ops += r->ops;
        failed |= r->failed;
        free(r);
    }
    double took = now() - start;
    printf("{\"op\":\"%s\",\"bs\":%llu,\"qd\":%u,\"threads\":%d,\"ops_s\":%.0f,\"mib_s\":%.1f}\n",
           argv[3], (unsigned long long)bs, qd, threads, ops / took,
           ops * (double)bs / took / (1 << 20));
    nacre_disconnect(fs);
    return failed;
}
