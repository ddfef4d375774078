/* A stand-in for a process that shares the machine: it sleeps, wakes, and touches random cache
 * lines of a large heap, forever. docs/performance.md ("One worker thread per replica, as
 * deployed") ran two of these beside one kmeta replica to see what sharing two cores with two
 * other wake-often processes costs it, without sharding:
 *
 *     cc -O2 -o /tmp/antagonist tests/benches/scale/antagonist.c
 *     /tmp/antagonist 100 1000 16000 &   # 100 MiB, wake every 1 ms, 16 000 lines: ~32% of a core
 *
 * Not built by cargo; a measuring aid only. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s <heap MiB> <sleep µs> <lines touched per wake>\n", argv[0]);
        return 2;
    }
    size_t size = (size_t)atoi(argv[1]) << 20, n = size / 64;
    long us = atol(argv[2]);
    int lines = atoi(argv[3]);
    volatile char *heap = malloc(size);
    if (heap == NULL || n == 0) {
        fprintf(stderr, "%s: cannot allocate %s MiB\n", argv[0], argv[1]);
        return 1;
    }
    memset((char *)heap, 1, size);
    uint64_t x = 88172645463325252ULL ^ (uint64_t)getpid();
    for (;;) {
        struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
        nanosleep(&ts, NULL);
        for (int i = 0; i < lines; i++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17; /* xorshift64: a cheap random line */
            heap[(x % n) * 64]++;
        }
    }
}
