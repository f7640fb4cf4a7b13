/*
 * The MPI side of udrma's conformance test (host/tests/mpi_conformance.rs).
 *
 * Reads cases from standard input, one a line, and answers each on one
 * line of standard output, computed by the MPI library it is linked with:
 *
 *   T count buflen origin TYPE
 *       Builds TYPE (grammar below) with MPI's constructors and prints
 *       "T size lb extent PACKED UNPACKED": the packed bytes of `count`
 *       elements at `origin` in a buffer of `buflen` bytes whose byte i is
 *       (i * 7 + 3) mod 256, and the whole buffer after unpacking those
 *       bytes into one filled with 0xA5 (hex; "-" for none). A struct is
 *       resized to the least and greatest bounds of its fields, which
 *       sets MPI's alignment padding aside (udrma adds none). "T RANGE"
 *       when the type's true extent does not fit the buffer.
 *
 *   R op type n A... B...
 *       MPI_Reduce_local with inbuf A and inoutbuf B (so the result is
 *       A op B, A first), n elements given as hex bits, then for MINLOC
 *       and MAXLOC n locations each. Prints "R" and the result the same
 *       way.
 *
 * TYPE, in prefix form:
 *   p N                      a basic type of N bytes (1 byte, 2 short,
 *                            4 int, 8 double)
 *   c COUNT T                contiguous
 *   v COUNT BL STRIDE T      vector (stride in extents)
 *   hv COUNT BL STRIDE T     hvector (stride in bytes)
 *   i N {BL D}*N T           indexed (displacements in extents)
 *   hi N {BL D}*N T          hindexed (bytes)
 *   ib N BL {D}*N T          indexed block (extents)
 *   s N {BL D T}*N           struct (bytes)
 *   sa ND c|f {SIZE}*ND {SUB}*ND {START}*ND T   subarray
 *   r LB EXTENT T            resized
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_N 64
#define LINE (1 << 20)

static char *cursor;

/* The derived types one case built, freed when it is answered. */
static MPI_Datatype made[4096];
static int n_made;

static MPI_Datatype keep(MPI_Datatype t)
{
    if (n_made < 4096)
        made[n_made++] = t;
    return t;
}

static void free_made(void)
{
    for (int k = 0; k < n_made; k++)
        MPI_Type_free(&made[k]);
    n_made = 0;
}

static char *word(void)
{
    while (*cursor == ' ')
        cursor++;
    if (*cursor == 0 || *cursor == '\n') {
        fprintf(stderr, "conformance: the line ended early\n");
        exit(2);
    }
    char *w = cursor;
    while (*cursor && *cursor != ' ' && *cursor != '\n')
        cursor++;
    if (*cursor)
        *cursor++ = 0;
    return w;
}

static long num(void)
{
    return strtol(word(), NULL, 10);
}

static unsigned long long hexnum(void)
{
    return strtoull(word(), NULL, 16);
}

static void check(int rc, const char *what)
{
    if (rc != MPI_SUCCESS) {
        fprintf(stderr, "conformance: %s failed (%d)\n", what, rc);
        exit(2);
    }
}

static MPI_Datatype build(void);

static MPI_Datatype basic(long n)
{
    switch (n) {
    case 1:
        return MPI_BYTE;
    case 2:
        return MPI_SHORT;
    case 4:
        return MPI_INT;
    case 8:
        return MPI_DOUBLE;
    }
    fprintf(stderr, "conformance: no basic type of %ld bytes\n", n);
    exit(2);
}

static MPI_Datatype structure(void)
{
    int n = (int) num();
    int bl[MAX_N];
    MPI_Aint d[MAX_N];
    MPI_Datatype t[MAX_N];
    for (int k = 0; k < n; k++) {
        bl[k] = (int) num();
        d[k] = num();
        t[k] = build();
    }
    MPI_Datatype s;
    check(MPI_Type_create_struct(n, bl, d, t, &s), "MPI_Type_create_struct");
    /* The fields' own bounds, without MPI's alignment padding. */
    MPI_Aint lo = 0, hi = 0;
    int any = 0;
    for (int k = 0; k < n; k++) {
        MPI_Aint lb, ext;
        int size;
        check(MPI_Type_get_extent(t[k], &lb, &ext), "MPI_Type_get_extent");
        check(MPI_Type_size(t[k], &size), "MPI_Type_size");
        if (bl[k] == 0 || size == 0)
            continue;
        MPI_Aint l = d[k] + lb, u = d[k] + (bl[k] - 1) * ext + lb + ext;
        if (!any || l < lo)
            lo = l;
        if (!any || u > hi)
            hi = u;
        any = 1;
    }
    keep(s);
    if (!any)
        return s;
    MPI_Datatype r;
    check(MPI_Type_create_resized(s, lo, hi - lo, &r), "MPI_Type_create_resized");
    return keep(r);
}

static MPI_Datatype build(void)
{
    char *w = word();
    MPI_Datatype out, t;
    if (!strcmp(w, "p"))
        return basic(num());
    if (!strcmp(w, "c")) {
        int count = (int) num();
        t = build();
        check(MPI_Type_contiguous(count, t, &out), "MPI_Type_contiguous");
    } else if (!strcmp(w, "v") || !strcmp(w, "hv")) {
        int count = (int) num(), bl = (int) num();
        long stride = num();
        t = build();
        if (w[0] == 'v')
            check(MPI_Type_vector(count, bl, (int) stride, t, &out), "MPI_Type_vector");
        else
            check(MPI_Type_create_hvector(count, bl, stride, t, &out), "MPI_Type_create_hvector");
    } else if (!strcmp(w, "i") || !strcmp(w, "hi")) {
        int n = (int) num();
        int bl[MAX_N], di[MAX_N];
        MPI_Aint dh[MAX_N];
        for (int k = 0; k < n; k++) {
            bl[k] = (int) num();
            dh[k] = num();
            di[k] = (int) dh[k];
        }
        t = build();
        if (w[0] == 'i')
            check(MPI_Type_indexed(n, bl, di, t, &out), "MPI_Type_indexed");
        else
            check(MPI_Type_create_hindexed(n, bl, dh, t, &out), "MPI_Type_create_hindexed");
    } else if (!strcmp(w, "ib")) {
        int n = (int) num(), bl = (int) num();
        int d[MAX_N];
        for (int k = 0; k < n; k++)
            d[k] = (int) num();
        t = build();
        check(MPI_Type_create_indexed_block(n, bl, d, t, &out), "MPI_Type_create_indexed_block");
    } else if (!strcmp(w, "s")) {
        return structure();
    } else if (!strcmp(w, "sa")) {
        int nd = (int) num();
        int c = word()[0] == 'c';
        int sizes[MAX_N], subs[MAX_N], starts[MAX_N];
        for (int k = 0; k < nd; k++)
            sizes[k] = (int) num();
        for (int k = 0; k < nd; k++)
            subs[k] = (int) num();
        for (int k = 0; k < nd; k++)
            starts[k] = (int) num();
        t = build();
        check(MPI_Type_create_subarray(nd, sizes, subs, starts,
                                       c ? MPI_ORDER_C : MPI_ORDER_FORTRAN, t, &out),
              "MPI_Type_create_subarray");
    } else if (!strcmp(w, "r")) {
        long lb = num(), ext = num();
        t = build();
        check(MPI_Type_create_resized(t, lb, ext, &out), "MPI_Type_create_resized");
    } else {
        fprintf(stderr, "conformance: unknown constructor '%s'\n", w);
        exit(2);
    }
    return keep(out);
}

static void hex(const unsigned char *b, long n)
{
    putchar(' ');
    if (n == 0)
        putchar('-');
    for (long i = 0; i < n; i++)
        printf("%02x", b[i]);
}

static void type_case(void)
{
    int count = (int) num();
    long buflen = num(), origin = num();
    MPI_Datatype t = build();
    check(MPI_Type_commit(&t), "MPI_Type_commit");
    /* Every derived type is freed once the case is answered: MPICH 4.0.2,
     * keeping some hundreds, failed an assertion in MPI_Unpack. */
    int size;
    MPI_Aint lb, ext, tlb, text;
    check(MPI_Type_size(t, &size), "MPI_Type_size");
    check(MPI_Type_get_extent(t, &lb, &ext), "MPI_Type_get_extent");
    check(MPI_Type_get_true_extent(t, &tlb, &text), "MPI_Type_get_true_extent");
    if (size > 0 && count > 0) {
        MPI_Aint first = origin + tlb + (ext < 0 ? (count - 1) * ext : 0);
        MPI_Aint last = origin + tlb + text + (ext > 0 ? (count - 1) * ext : 0);
        if (first < 0 || last > buflen) {
            printf("T RANGE\n");
            free_made();
            return;
        }
    }
    unsigned char *buf = malloc(buflen + 1), *back = malloc(buflen + 1);
    for (long i = 0; i < buflen; i++) {
        buf[i] = (unsigned char) (i * 7 + 3);
        back[i] = 0xA5;
    }
    int cap;
    check(MPI_Pack_size(count, t, MPI_COMM_SELF, &cap), "MPI_Pack_size");
    unsigned char *packed = malloc(cap + 1);
    int pos = 0, upos = 0;
    check(MPI_Pack(buf + origin, count, t, packed, cap, &pos, MPI_COMM_SELF), "MPI_Pack");
    check(MPI_Unpack(packed, pos, &upos, back + origin, count, t, MPI_COMM_SELF), "MPI_Unpack");
    printf("T %d %ld %ld", size, (long) lb, (long) ext);
    hex(packed, pos);
    hex(back, buflen);
    putchar('\n');
    free(buf);
    free(back);
    free(packed);
    free_made();
}

static MPI_Op op_of(const char *w)
{
    static const char *names[] = { "sum", "min", "max", "minloc", "maxloc", "land",
        "lor", "lxor", "band", "bor", "bxor" };
    MPI_Op ops[] = { MPI_SUM, MPI_MIN, MPI_MAX, MPI_MINLOC, MPI_MAXLOC, MPI_LAND,
        MPI_LOR, MPI_LXOR, MPI_BAND, MPI_BOR, MPI_BXOR };
    for (int k = 0; k < 11; k++)
        if (!strcmp(w, names[k]))
            return ops[k];
    fprintf(stderr, "conformance: unknown operation '%s'\n", w);
    exit(2);
}

/* One element as its bits; `w` bytes wide. */
static void put_bits(unsigned char *p, unsigned long long v, int w)
{
    if (w == 4) {
        uint32_t x = (uint32_t) v;
        memcpy(p, &x, 4);
    } else {
        memcpy(p, &v, 8);
    }
}

static unsigned long long get_bits(const unsigned char *p, int w)
{
    if (w == 4) {
        uint32_t x;
        memcpy(&x, p, 4);
        return x;
    }
    unsigned long long v;
    memcpy(&v, p, 8);
    return v;
}

static void reduce_case(void)
{
    char *opname = word();
    char ty[8];
    strncpy(ty, word(), sizeof ty - 1);
    ty[sizeof ty - 1] = 0;
    int n = (int) num();
    MPI_Op op = op_of(opname);
    int loc = op == MPI_MINLOC || op == MPI_MAXLOC;
    int w = ty[1] == '3' ? 4 : 8;
    MPI_Datatype t;
    /* Value and location pairs: C's struct layout, which MPI's pair
     * types describe. */
    size_t stride = w, at_loc = 0;
    if (!strcmp(ty, "f32"))
        t = loc ? MPI_FLOAT_INT : MPI_FLOAT;
    else if (!strcmp(ty, "f64"))
        t = loc ? MPI_DOUBLE_INT : MPI_DOUBLE;
    else if (!strcmp(ty, "i32"))
        t = loc ? MPI_2INT : MPI_INT32_T;
    else if (!strcmp(ty, "i64"))
        t = loc ? MPI_LONG_INT : MPI_INT64_T;
    else if (!strcmp(ty, "u32") && !loc)
        t = MPI_UINT32_T;
    else if (!strcmp(ty, "u64") && !loc)
        t = MPI_UINT64_T;
    else {
        fprintf(stderr, "conformance: no MPI type for %s %s\n", opname, ty);
        exit(2);
    }
    if (loc) {
        MPI_Aint lb, ext;
        check(MPI_Type_get_extent(t, &lb, &ext), "MPI_Type_get_extent");
        stride = (size_t) ext;
        at_loc = w == 4 ? 4 : 8;
    }
    unsigned char *a = calloc(n + 1, stride), *b = calloc(n + 1, stride);
    unsigned char *bufs[2] = { a, b };
    for (int s = 0; s < 2; s++) {
        for (int k = 0; k < n; k++)
            put_bits(bufs[s] + k * stride, hexnum(), w);
        if (loc)
            for (int k = 0; k < n; k++) {
                int l = (int) hexnum();
                memcpy(bufs[s] + k * stride + at_loc, &l, 4);
            }
    }
    check(MPI_Reduce_local(a, b, n, t, op), "MPI_Reduce_local");
    printf("R");
    for (int k = 0; k < n; k++)
        printf(" %llx", get_bits(b + k * stride, w));
    if (loc)
        for (int k = 0; k < n; k++) {
            int l;
            memcpy(&l, b + k * stride + at_loc, 4);
            printf(" %x", (unsigned) l);
        }
    putchar('\n');
    free(a);
    free(b);
}

int main(int argc, char **argv)
{
    check(MPI_Init(&argc, &argv), "MPI_Init");
    char *line = malloc(LINE);
    while (fgets(line, LINE, stdin)) {
        cursor = line;
        char *w = word();
        if (!strcmp(w, "T"))
            type_case();
        else if (!strcmp(w, "R"))
            reduce_case();
        else {
            fprintf(stderr, "conformance: unknown case '%s'\n", w);
            return 2;
        }
        fflush(stdout);
    }
    free(line);
    MPI_Finalize();
    return 0;
}
