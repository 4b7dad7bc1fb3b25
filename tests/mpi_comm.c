/*
 * mpi_comm.c — the MPI communicator, run by ctest under mpirun with 2 and 3
 * ranks: all-reduce against sums computed locally, all-gather order,
 * broadcast from every root, large buffers.
 */
#include "test.h"
#include "dist/comm.h"

int main(void) {
    moe8_comm *c;
    moe8_error err;
    int rank, size;
    if (moe8_comm_create(MOE8_COMM_MPI, &c, &err) != MOE8_OK) {
        fprintf(stderr, "%s\n", err.message);
        return 1;
    }
    rank = moe8_comm_rank(c), size = moe8_comm_size(c);
    CHECK(size >= 2 && rank >= 0 && rank < size);

    /* All-reduce: integers and halves are summed exactly in fp32. */
    enum { N = 100003 };
    float *buf = malloc(N * sizeof *buf);
    for (int i = 0; i < N; i++) buf[i] = (float)((i % 97) * (rank + 1)) + 0.5f * rank;
    CHECK(moe8_comm_allreduce_sum_f32(c, buf, N, &err) == MOE8_OK);
    int bad = 0;
    for (int i = 0; i < N; i++) {
        double expect = 0.0;
        for (int r = 0; r < size; r++) expect += (double)((i % 97) * (r + 1)) + 0.5 * r;
        bad += buf[i] != (float)expect;
    }
    CHECKF(bad == 0, "%d all-reduce values differ", bad);
    free(buf);

    /* All-gather in rank order. */
    int send[2] = {rank * 10, rank * 10 + 1}, *recv = calloc((size_t)size * 2, sizeof *recv);
    CHECK(moe8_comm_allgather(c, send, recv, sizeof send, &err) == MOE8_OK);
    for (int r = 0; r < size; r++) CHECK(recv[2 * r] == r * 10 && recv[2 * r + 1] == r * 10 + 1);
    free(recv);

    /* Broadcast from each root. */
    for (int root = 0; root < size; root++) {
        long long v[4] = {rank, rank, rank, rank};
        CHECK(moe8_comm_bcast(c, v, sizeof v, root, &err) == MOE8_OK);
        CHECK(v[0] == root && v[3] == root);
    }
    CHECK(moe8_comm_bcast(c, send, sizeof send, size, &err) == MOE8_ERR_INVALID_ARG);
    CHECK(moe8_comm_barrier(c, &err) == MOE8_OK);
    moe8_comm_free(c);
    if (rank == 0) return test_summary();
    return test_n_fail ? 1 : 0;
}
