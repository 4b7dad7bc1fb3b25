/*
 * cli_open.c — the start-up every command that runs a model shares (cli.h):
 * the process group of --tp N, the model folder checked, the tokenizer and the
 * model loaded (with the packed-cache options), and the one failure policy
 * that goes with them; cli_close ends it.
 *
 * Order: the group (MPI starts only with N > 1; pack, offline, makes rank R
 * of N here without MPI, or no group at all with N = 1) -> this rank's checks (the folder, then the command's
 * own) -> every rank agrees to go on -> the tokenizer loads (and the command's
 * tokenizer step runs) on a second thread while the model loads and, for
 * generate, prepares on this one (the model load's collectives stay on the
 * calling thread) -> every rank agrees on the tokenizer's outcome.
 *
 * The failure policy. A failed step prints "moe8 <cmd>: <message>" once: a
 * local step (a check, the tokenizer) on the rank it failed on, a collective
 * one (the model load, agreed by every rank inside the library) on rank 0.
 * Every rank then learns of it (cli_agree; rank 0 names a failed peer) and
 * returns 1, so the group ends together and MPI finalises; a group that is
 * broken (a rank stopped answering) is ended by cli_close with
 * moe8_dist_abort, so no rank is left waiting. Ranks never abort for an
 * ordinary failure: an abort from one rank may kill rank 0 before it prints.
 *
 * It does not parse flags, print results or time anything but the load.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

cli_open_params cli_open_params_of(const char *dir, int tp, int expert_parallel, int n_threads) {
    cli_open_params p;
    memset(&p, 0, sizeof p);
    p.dir = dir;
    p.tp = tp;
    p.expert_parallel = expert_parallel;
    p.n_threads = n_threads;
    p.offline_rank = -1;
    p.timeout = -1;
    return p;
}

int cli_agree(const char *cmd, moe8_dist *d, int failed) {
    moe8_error err;
    moe8_status st;
    if (moe8_dist_size(d) == 1) return failed;
    snprintf(err.message, sizeof err.message, "failed (its message is above)");
    st = moe8_dist_agree(d, failed ? MOE8_ERR_INVALID_ARG : MOE8_OK, &err);
    if (st && !failed && moe8_dist_rank(d) == 0) cli_fail(cmd, &err);
    return st != MOE8_OK;
}

/* The tokenizer's part of the start-up, run on a second thread. */
typedef struct {
    const char *cmd;
    const cli_open_params *p;
    cli_session *s;
    int bad;
} tok_job;

/* The tokenizer as p->tokenizer asks; 0, or -1 after its message. */
static int load_tokenizer(const char *cmd, const cli_open_params *p, moe8_tokenizer **tok) {
    char path[4096];
    moe8_error err;
    if (p->tokenizer == CLI_TOK_NONE) return 0;
    if (p->tokenizer == CLI_TOK_IF_PRESENT || p->tok_hint) {
        if (snprintf(path, sizeof path, "%s/tokenizer.json", p->dir) >= (int)sizeof path) {
            cli_err(cmd, "model folder path too long");
            return -1;
        }
        if (access(path, F_OK) != 0) {
            if (p->tokenizer == CLI_TOK_IF_PRESENT) return 0;
            cli_err(cmd, "'%s' not found: %s", path, p->tok_hint);
            return -1;
        }
    }
    if (moe8_tokenizer_load(p->dir, tok, &err) != MOE8_OK) {
        cli_fail(cmd, &err);
        return -1;
    }
    return 0;
}

static void *tok_job_run(void *arg) {
    tok_job *j = arg;
    j->bad = load_tokenizer(j->cmd, j->p, &j->s->tok) != 0 ||
             (j->p->with_tok && j->p->with_tok(j->p->user, j->s) != 0);
    return NULL;
}

/* This rank's checks before anything loads: the folder, then the command's. */
static int check_local(const char *cmd, const cli_open_params *p, cli_session *s) {
    struct stat sb;
    if (stat(p->dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return cli_err(cmd, "model folder '%s' not found (-m)", p->dir);
    return p->check ? p->check(p->user, s) != 0 : 0;
}

/* The model, loaded and (p->prepare) prepared; every step agreed by every rank. */
static int load_model(const char *cmd, const cli_open_params *p, cli_session *s) {
    moe8_model_params mp = moe8_model_params_default();
    moe8_error err;
    cli_model_opts(&mp);
    mp.n_threads = p->n_threads;
    mp.dist = s->dist;
    moe8_status st = moe8_model_load(p->dir, &mp, &s->model, &err);
    if (st == MOE8_OK && p->prepare)
        st = moe8_model_prepare(s->model, p->float_experts, p->n_threads, &err);
    if (st != MOE8_OK && s->rank0) cli_fail(cmd, &err);
    return st != MOE8_OK;
}

int cli_open(const char *cmd, const cli_open_params *p, cli_session *s) {
    moe8_error err;
    moe8_status st;
    memset(s, 0, sizeof *s);
    if (p->offline_rank >= 0 && p->tp == 1)
        st = MOE8_OK; /* no group at all: any launcher around this process is ignored */
    else if (p->offline_rank >= 0)
        st = moe8_dist_create_offline(p->tp, p->offline_rank, p->expert_parallel, &s->dist, &err);
    else
        st = moe8_dist_create(p->tp, p->expert_parallel, &s->dist, &err);
    if (st != MOE8_OK) return cli_fail(cmd, &err);
    if (p->timeout >= 0) moe8_dist_set_timeout(s->dist, p->timeout);
    s->rank0 = p->offline_rank >= 0 || moe8_dist_rank(s->dist) == 0;
    /* an offline rank has no peers to agree with */
    moe8_dist *peers = p->offline_rank >= 0 ? NULL : s->dist;
    if (cli_agree(cmd, peers, check_local(cmd, p, s))) return 1; /* every rank loads, or none */
    if (s->rank0) cli_log_warnings(cmd); /* the library's warnings (e.g. MXFP4 converted at load) */
    s->t_load = moe8_time_s();
    tok_job tj = {cmd, p, s, 0};
    pthread_t th;
    const int threaded = p->tokenizer != CLI_TOK_NONE && pthread_create(&th, NULL, tok_job_run, &tj) == 0;
    if (!threaded) tok_job_run(&tj);
    const int bad_model = load_model(cmd, p, s);
    if (threaded) pthread_join(th, NULL);
    if (bad_model) return 1; /* every rank knows: the load is agreed */
    return cli_agree(cmd, peers, tj.bad);
}

void cli_close(const char *cmd, cli_session *s) {
    moe8_error err;
    if (moe8_dist_failure(s->dist, &err)) { /* a rank stopped answering: nothing can finish */
        if (moe8_dist_rank(s->dist) != 0) cli_fail(cmd, &err); /* rank 0 printed it where it failed */
        moe8_dist_abort(s->dist, 1);
    }
    moe8_tokenizer_free(s->tok);
    moe8_model_free(s->model);
    moe8_dist_free(s->dist);
    memset(s, 0, sizeof *s);
}
