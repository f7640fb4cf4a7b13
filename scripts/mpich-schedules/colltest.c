/*
 * Runs MPI collectives once each, inside recording windows of the
 * LD_PRELOAD recorder (recorder.c).
 *
 * usage: colltest SPEC...
 *   SPEC = collective:count:root, e.g. allreduce:16:0 bcast:5:3 barrier:0:0
 *   collectives: allreduce bcast reduce allgather reduce_scatter_block
 *                alltoall barrier iallreduce
 * The algorithm label of each window is read from the matching
 * MPIR_CVAR_<COLL>_INTRA_ALGORITHM environment variable ("auto" if unset).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ctype.h>

#define WARMUP_TAG_BASE 7700000

static void (*rec_begin) (const char *);
static void (*rec_end) (void);
static void (*rec_dump) (void);
static int (*rec_mapped_eps) (void);

static const char *algo_of(const char *coll)
{
    char name[128] = "MPIR_CVAR_";
    size_t n = strlen(name);
    for (const char *c = coll; *c && n < 100; c++)
        name[n++] = (char) toupper((unsigned char) *c);
    name[n] = 0;
    strcat(name, "_INTRA_ALGORITHM");
    const char *v = getenv(name);
    return v ? v : "auto";
}

static int check(const char *what, const int *got, const int *want, int n)
{
    for (int i = 0; i < n; i++) {
        if (got[i] != want[i]) {
            fprintf(stderr, "CHECK FAILED %s at %d: got %d want %d\n", what, i, got[i], want[i]);
            return 1;
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    rec_begin = (void (*)(const char *)) dlsym(RTLD_DEFAULT, "rec_begin");
    rec_end = (void (*)(void)) dlsym(RTLD_DEFAULT, "rec_end");
    rec_dump = (void (*)(void)) dlsym(RTLD_DEFAULT, "rec_dump");
    rec_mapped_eps = (int (*)(void)) dlsym(RTLD_DEFAULT, "rec_mapped_eps");
    if (!rec_begin || !rec_end || !rec_dump) {
        if (rank == 0)
            fprintf(stderr, "colltest: recorder not preloaded\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }

    /* Warm-up: every rank sends every other rank a zero-byte message whose
     * tag names the destination, so the recorder can map UCX endpoints to
     * ranks.  Done twice so every endpoint is also fully wired up. */
    for (int round = 0; round < 2; round++) {
        MPI_Request *rq = malloc(sizeof(MPI_Request) * 2 * size);
        MPI_Status *st = malloc(sizeof(MPI_Status) * 2 * size);
        int nr = 0;
        for (int p = 0; p < size; p++) {
            MPI_Irecv(NULL, 0, MPI_BYTE, p, WARMUP_TAG_BASE + rank, MPI_COMM_WORLD, &rq[nr++]);
            MPI_Isend(NULL, 0, MPI_BYTE, p, WARMUP_TAG_BASE + p, MPI_COMM_WORLD, &rq[nr++]);
        }
        MPI_Waitall(nr, rq, st);
        free(rq);
        free(st);
    }
    if (rec_mapped_eps && rec_mapped_eps() != size) {
        fprintf(stderr, "rank %d: recorder mapped %d endpoints, expected %d\n", rank,
                rec_mapped_eps(), size);
    }
    MPI_Barrier(MPI_COMM_WORLD);

    int failures = 0;
    for (int a = 1; a < argc; a++) {
        char coll[64];
        int count, root;
        if (sscanf(argv[a], "%63[^:]:%d:%d", coll, &count, &root) != 3) {
            fprintf(stderr, "bad spec %s\n", argv[a]);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        if (root >= size)
            continue;
        long total = (long) count * size;
        int *sbuf = malloc(sizeof(int) * (total + 1));
        int *rbuf = malloc(sizeof(int) * (total + 1));
        int *want = malloc(sizeof(int) * (total + 1));
        for (long i = 0; i < total; i++) {
            sbuf[i] = rank * 1000 + (int) i;
            rbuf[i] = -1;
        }

        char label[160];
        snprintf(label, sizeof(label), "%s\t%s\t%d\t%d\t%d", coll, algo_of(coll), size, count,
                 root);

        MPI_Barrier(MPI_COMM_WORLD);
        if (rank == 0) {
            /* lets the driver attribute MPICH's fallback messages (printed
             * by rank 0 when MPIR_CVAR_COLLECTIVE_FALLBACK=print) to a case */
            fprintf(stderr, "@@CASE\t%s\n", label);
            fflush(stderr);
        }
        rec_begin(label);
        if (!strcmp(coll, "allreduce")) {
            MPI_Allreduce(sbuf, rbuf, count, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        } else if (!strcmp(coll, "iallreduce")) {
            MPI_Request rq;
            MPI_Iallreduce(sbuf, rbuf, count, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &rq);
            MPI_Wait(&rq, MPI_STATUS_IGNORE);
        } else if (!strcmp(coll, "bcast")) {
            if (rank == root)
                memcpy(rbuf, sbuf, sizeof(int) * count);
            MPI_Bcast(rbuf, count, MPI_INT, root, MPI_COMM_WORLD);
        } else if (!strcmp(coll, "reduce")) {
            MPI_Reduce(sbuf, rbuf, count, MPI_INT, MPI_SUM, root, MPI_COMM_WORLD);
        } else if (!strcmp(coll, "allgather")) {
            MPI_Allgather(sbuf, count, MPI_INT, rbuf, count, MPI_INT, MPI_COMM_WORLD);
        } else if (!strcmp(coll, "reduce_scatter_block")) {
            MPI_Reduce_scatter_block(sbuf, rbuf, count, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        } else if (!strcmp(coll, "alltoall")) {
            MPI_Alltoall(sbuf, count, MPI_INT, rbuf, count, MPI_INT, MPI_COMM_WORLD);
        } else if (!strcmp(coll, "barrier")) {
            MPI_Barrier(MPI_COMM_WORLD);
        } else {
            fprintf(stderr, "unknown collective %s\n", coll);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        rec_end();
        if (rank == 0) {
            fprintf(stderr, "@@END\n");
            fflush(stderr);
        }

        /* verify the result so a broken run is noticed */
        if (!strcmp(coll, "allreduce") || !strcmp(coll, "iallreduce") ||
            (!strcmp(coll, "reduce") && rank == root)) {
            for (int i = 0; i < count; i++) {
                long s = 0;
                for (int r = 0; r < size; r++)
                    s += r * 1000 + i;
                want[i] = (int) s;
            }
            failures += check(coll, rbuf, want, count);
        } else if (!strcmp(coll, "bcast")) {
            for (int i = 0; i < count; i++)
                want[i] = root * 1000 + i;
            failures += check(coll, rbuf, want, count);
        } else if (!strcmp(coll, "allgather")) {
            for (int r = 0; r < size; r++)
                for (int i = 0; i < count; i++)
                    want[r * count + i] = r * 1000 + i;
            failures += check(coll, rbuf, want, (int) total);
        } else if (!strcmp(coll, "reduce_scatter_block")) {
            for (int i = 0; i < count; i++) {
                long s = 0;
                for (int r = 0; r < size; r++)
                    s += r * 1000 + rank * count + i;
                want[i] = (int) s;
            }
            failures += check(coll, rbuf, want, count);
        } else if (!strcmp(coll, "alltoall")) {
            for (int r = 0; r < size; r++)
                for (int i = 0; i < count; i++)
                    want[r * count + i] = r * 1000 + rank * count + i;
            failures += check(coll, rbuf, want, (int) total);
        }
        free(sbuf);
        free(rbuf);
        free(want);
    }

    MPI_Barrier(MPI_COMM_WORLD);
    rec_dump();
    int all = 0;
    MPI_Reduce(&failures, &all, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0 && all)
        fprintf(stderr, "colltest: %d result checks failed\n", all);
    MPI_Finalize();
    return all ? 1 : 0;
}
