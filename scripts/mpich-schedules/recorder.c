/*
 * LD_PRELOAD interposer for MPICH ch4:ucx.
 *
 * Wraps the UCP tag-matching entry points that MPICH's UCX netmod calls
 * (ucp_tag_send_nbx, ucp_tag_send_sync_nbx, ucp_tag_recv_nbx,
 * ucp_tag_msg_recv_nbx) and logs every call made while a recording window
 * is open.  The test program opens and closes windows through
 * rec_begin()/rec_end(), found with dlsym at run time.
 *
 * UCX tag layout used by MPICH 4.0.2 ch4:ucx (default 16 rank bits):
 *   bits 63..48 context id, bits 47..32 source rank in the communicator,
 *   bits 31..0 MPI tag (top bits of which MPICH uses as error flags).
 * A receive's tag therefore names its source; a send's tag names the
 * sender, so send endpoints are mapped to destination ranks by a warm-up
 * exchange whose MPI tag is WARMUP_TAG_BASE + destination rank.
 *
 * Output: one file per rank, $REC_DIR/rank<N>.log, one line per message:
 *   label  idx  dir  peer  bytes  got  ctx  mpitag  anysrc
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucp/api/ucp.h>

#define WARMUP_TAG_BASE 7700000u
#define MAX_EPS 256
#define MAX_DTS 1024
#define MAX_RECS 65536

#define TAG_BITS 32
#define RANK_BITS 16
#define TAG_MASK ((1ull << TAG_BITS) - 1)
#define RANK_MASK (((1ull << RANK_BITS) - 1) << TAG_BITS)

typedef ucs_status_ptr_t (*send_fn) (ucp_ep_h, const void *, size_t, ucp_tag_t,
                                     const ucp_request_param_t *);
typedef ucs_status_ptr_t (*recv_fn) (ucp_worker_h, void *, size_t, ucp_tag_t, ucp_tag_t,
                                     const ucp_request_param_t *);
typedef ucs_status_ptr_t (*mrecv_fn) (ucp_worker_h, void *, size_t, ucp_tag_message_h,
                                      const ucp_request_param_t *);
typedef ucs_status_t (*dtgen_fn) (const ucp_generic_dt_ops_t *, void *, ucp_datatype_t *);
typedef ucs_status_ptr_t (*am_fn) (ucp_ep_h, uint16_t, const void *, size_t, ucp_datatype_t,
                                   ucp_send_callback_t, unsigned);

struct rec {
    int label;
    char dir;                   /* 's' or 'r' */
    int peer;
    long bytes;
    long got;
    unsigned ctx;
    unsigned mpitag;
    int anysrc;
};

struct wrap {
    ucp_tag_recv_nbx_callback_t cb;
    void *user_data;
    int idx;
};

static struct {
    ucp_ep_h ep;
    int rank;
} eps[MAX_EPS];
static int n_eps;

static struct {
    ucp_datatype_t dt;
    ucp_generic_dt_ops_t ops;
    void *context;
} dts[MAX_DTS];
static int n_dts;

static struct rec *recs;
static int n_recs;
static int recording;
static int cur_label;
static char labels[4096][160];
static int n_labels;
static long n_am_in_window;
static long n_unmapped;

static send_fn real_send, real_send_sync;
static recv_fn real_recv;
static mrecv_fn real_mrecv;
static dtgen_fn real_dtgen;
static am_fn real_am;

static void resolve(void)
{
    if (!real_send) {
        real_send = (send_fn) dlsym(RTLD_NEXT, "ucp_tag_send_nbx");
        real_send_sync = (send_fn) dlsym(RTLD_NEXT, "ucp_tag_send_sync_nbx");
        real_recv = (recv_fn) dlsym(RTLD_NEXT, "ucp_tag_recv_nbx");
        real_mrecv = (mrecv_fn) dlsym(RTLD_NEXT, "ucp_tag_msg_recv_nbx");
        real_dtgen = (dtgen_fn) dlsym(RTLD_NEXT, "ucp_dt_create_generic");
        real_am = (am_fn) dlsym(RTLD_NEXT, "ucp_am_send_nb");
    }
}

static int ep_rank(ucp_ep_h ep)
{
    for (int i = 0; i < n_eps; i++)
        if (eps[i].ep == ep)
            return eps[i].rank;
    return -1;
}

static void ep_learn(ucp_ep_h ep, int rank)
{
    for (int i = 0; i < n_eps; i++)
        if (eps[i].ep == ep) {
            eps[i].rank = rank;
            return;
        }
    if (n_eps < MAX_EPS) {
        eps[n_eps].ep = ep;
        eps[n_eps].rank = rank;
        n_eps++;
    }
}

/* Bytes described by (count, datatype).  Contiguous data (no datatype in
 * param) is passed to UCX as a byte count.  Non-contiguous MPI datatypes are
 * UCX generic datatypes created by MPICH; their size is asked of MPICH's own
 * packed_size callback.  MPICH's finish callback also drops a datatype
 * reference, so the pack state is released with free() instead. */
static long param_bytes(size_t count, const void *buf, const ucp_request_param_t *param,
                        int for_recv)
{
    if (!param || !(param->op_attr_mask & UCP_OP_ATTR_FIELD_DATATYPE))
        return (long) count;
    ucp_datatype_t dt = param->datatype;
    if ((dt & UCP_DATATYPE_CLASS_MASK) == UCP_DATATYPE_CONTIG)
        return (long) (count * (dt >> UCP_DATATYPE_SHIFT));
    for (int i = 0; i < n_dts; i++) {
        if (dts[i].dt == dt) {
            void *state = for_recv ?
                dts[i].ops.start_unpack(dts[i].context, (void *) buf, count) :
                dts[i].ops.start_pack(dts[i].context, buf, count);
            long sz = (long) dts[i].ops.packed_size(state);
            free(state);
            return sz;
        }
    }
    return -1000000 - (long) count;
}

static int new_rec(char dir)
{
    if (!recs)
        recs = calloc(MAX_RECS, sizeof(struct rec));
    if (n_recs >= MAX_RECS)
        return -1;
    struct rec *r = &recs[n_recs];
    memset(r, 0, sizeof(*r));
    r->label = cur_label;
    r->dir = dir;
    r->got = -1;
    return n_recs++;
}

static ucs_status_ptr_t do_send(send_fn fn, ucp_ep_h ep, const void *buffer, size_t count,
                                ucp_tag_t tag, const ucp_request_param_t *param)
{
    unsigned mpitag = (unsigned) (tag & TAG_MASK);
    unsigned low = mpitag & 0x1fffffffu;
    if (!recording && low >= WARMUP_TAG_BASE && low < WARMUP_TAG_BASE + 65536u)
        ep_learn(ep, (int) (low - WARMUP_TAG_BASE));
    if (recording) {
        int i = new_rec('s');
        if (i >= 0) {
            recs[i].peer = ep_rank(ep);
            if (recs[i].peer < 0)
                n_unmapped++;
            recs[i].bytes = param_bytes(count, buffer, param, 0);
            recs[i].got = recs[i].bytes;
            recs[i].ctx = (unsigned) (tag >> (TAG_BITS + RANK_BITS));
            recs[i].mpitag = mpitag;
        }
    }
    return fn(ep, buffer, count, tag, param);
}

ucs_status_ptr_t ucp_tag_send_nbx(ucp_ep_h ep, const void *buffer, size_t count,
                                  ucp_tag_t tag, const ucp_request_param_t *param)
{
    resolve();
    return do_send(real_send, ep, buffer, count, tag, param);
}

ucs_status_ptr_t ucp_tag_send_sync_nbx(ucp_ep_h ep, const void *buffer, size_t count,
                                       ucp_tag_t tag, const ucp_request_param_t *param)
{
    resolve();
    return do_send(real_send_sync, ep, buffer, count, tag, param);
}

static void recv_cb(void *request, ucs_status_t status, const ucp_tag_recv_info_t *info,
                    void *user_data)
{
    struct wrap *w = user_data;
    if (w->idx >= 0 && info && (status == UCS_OK || status == UCS_ERR_MESSAGE_TRUNCATED)) {
        recs[w->idx].got = (long) info->length;
        if (recs[w->idx].anysrc)
            recs[w->idx].peer = (int) ((info->sender_tag & RANK_MASK) >> TAG_BITS);
    }
    ucp_tag_recv_nbx_callback_t cb = w->cb;
    void *ud = w->user_data;
    free(w);
    if (cb)
        cb(request, status, info, ud);
}

ucs_status_ptr_t ucp_tag_recv_nbx(ucp_worker_h worker, void *buffer, size_t count,
                                  ucp_tag_t tag, ucp_tag_t tag_mask,
                                  const ucp_request_param_t *param)
{
    resolve();
    if (!recording || !param || !(param->op_attr_mask & UCP_OP_ATTR_FIELD_CALLBACK))
        return real_recv(worker, buffer, count, tag, tag_mask, param);

    int i = new_rec('r');
    if (i >= 0) {
        recs[i].anysrc = (tag_mask & RANK_MASK) != RANK_MASK;
        recs[i].peer = recs[i].anysrc ? -1 : (int) ((tag & RANK_MASK) >> TAG_BITS);
        recs[i].bytes = param_bytes(count, buffer, param, 1);
        recs[i].ctx = (unsigned) (tag >> (TAG_BITS + RANK_BITS));
        recs[i].mpitag = (unsigned) (tag & TAG_MASK);
    }
    struct wrap *w = malloc(sizeof(*w));
    w->cb = param->cb.recv;
    w->user_data = (param->op_attr_mask & UCP_OP_ATTR_FIELD_USER_DATA) ? param->user_data : NULL;
    w->idx = i;
    ucp_request_param_t p = *param;
    p.op_attr_mask |= UCP_OP_ATTR_FIELD_USER_DATA;
    p.cb.recv = recv_cb;
    p.user_data = w;
    ucs_status_ptr_t ret = real_recv(worker, buffer, count, tag, tag_mask, &p);
    if (UCS_PTR_IS_ERR(ret) || (ret == NULL && (param->op_attr_mask & UCP_OP_ATTR_FLAG_NO_IMM_CMPL) == 0)) {
        /* completed immediately or failed: the callback will not run */
        if (ret == NULL && i >= 0 && (param->op_attr_mask & UCP_OP_ATTR_FIELD_RECV_INFO))
            recs[i].got = (long) param->recv_info.tag_info->length;
        free(w);
    }
    return ret;
}

ucs_status_ptr_t ucp_tag_msg_recv_nbx(ucp_worker_h worker, void *buffer, size_t count,
                                      ucp_tag_message_h message,
                                      const ucp_request_param_t *param)
{
    resolve();
    if (recording) {
        int i = new_rec('r');
        if (i >= 0) {
            recs[i].peer = -2;  /* matched probe: source not known here */
            recs[i].bytes = param_bytes(count, buffer, param, 1);
        }
    }
    return real_mrecv(worker, buffer, count, message, param);
}

ucs_status_t ucp_dt_create_generic(const ucp_generic_dt_ops_t *ops, void *context,
                                   ucp_datatype_t *datatype_p)
{
    resolve();
    ucs_status_t st = real_dtgen(ops, context, datatype_p);
    if (st != UCS_OK)
        return st;
    /* MPICH creates and frees datatypes inside some algorithms, and UCX may
     * hand out the same handle again: the newest registration wins. */
    int i;
    for (i = 0; i < n_dts; i++)
        if (dts[i].dt == *datatype_p)
            break;
    if (i == n_dts) {
        if (n_dts == MAX_DTS)
            return st;
        n_dts++;
    }
    dts[i].dt = *datatype_p;
    dts[i].ops = *ops;
    dts[i].context = context;
    return st;
}

void ucp_dt_destroy(ucp_datatype_t datatype)
{
    static void (*real_destroy) (ucp_datatype_t);
    if (!real_destroy)
        real_destroy = (void (*)(ucp_datatype_t)) dlsym(RTLD_NEXT, "ucp_dt_destroy");
    for (int i = 0; i < n_dts; i++) {
        if (dts[i].dt == datatype) {
            dts[i] = dts[n_dts - 1];
            n_dts--;
            break;
        }
    }
    real_destroy(datatype);
}

ucs_status_ptr_t ucp_am_send_nb(ucp_ep_h ep, uint16_t id, const void *buffer, size_t count,
                                ucp_datatype_t datatype, ucp_send_callback_t cb, unsigned flags)
{
    resolve();
    if (recording)
        n_am_in_window++;
    return real_am(ep, id, buffer, count, datatype, cb, flags);
}

/* ---- window control, called by the test program through dlsym ---- */

void rec_begin(const char *label)
{
    if (n_labels < 4096) {
        snprintf(labels[n_labels], sizeof(labels[0]), "%s", label);
        cur_label = n_labels++;
    }
    recording = 1;
}

void rec_end(void)
{
    recording = 0;
}

int rec_mapped_eps(void)
{
    return n_eps;
}

void rec_dump(void)
{
    const char *dir = getenv("REC_DIR");
    const char *rk = getenv("PMI_RANK");
    if (!dir || !rk)
        return;
    char path[4096];
    snprintf(path, sizeof(path), "%s/rank%s.log", dir, rk);
    FILE *f = fopen(path, "w");
    if (!f)
        return;
    fprintf(f, "#meta\teps=%d\tam_in_window=%ld\tunmapped_sends=%ld\n", n_eps, n_am_in_window,
            n_unmapped);
    for (int i = 0; i < n_recs; i++) {
        struct rec *r = &recs[i];
        fprintf(f, "%s\t%d\t%s\t%d\t%ld\t%ld\t%u\t%u\t%d\n", labels[r->label], i,
                r->dir == 's' ? "send" : "recv", r->peer, r->bytes, r->got, r->ctx,
                r->mpitag, r->anysrc);
    }
    fclose(f);
}
