/*
 * test_comm.c — the one-rank communicator: identities of every collective;
 * abort on one rank (a local dist, or none) returns instead of exiting; a
 * timeout changes nothing and a one-rank broadcast leaves the buffer alone.
 */
#include "test.h"
#include "dist/comm.h"

int main(void) {
    moe8_comm *c;
    moe8_error err;
    float buf[5] = {1.5f, -2.0f, 0.0f, 3.25f, 1e30f}, copy[5];
    int send[3] = {7, 8, 9}, recv[3] = {0};
    CHECK(moe8_comm_create(MOE8_COMM_LOCAL, &c, &err) == MOE8_OK);
    CHECK(moe8_comm_rank(c) == 0 && moe8_comm_size(c) == 1);
    memcpy(copy, buf, sizeof buf);
    CHECK(moe8_comm_allreduce_sum_f32(c, buf, 5, &err) == MOE8_OK);
    CHECK(memcmp(buf, copy, sizeof buf) == 0);
    CHECK(moe8_comm_allgather(c, send, recv, sizeof send, &err) == MOE8_OK);
    CHECK(recv[0] == 7 && recv[1] == 8 && recv[2] == 9);
    CHECK(moe8_comm_bcast(c, buf, sizeof buf, 0, &err) == MOE8_OK);
    CHECK(memcmp(buf, copy, sizeof buf) == 0);
    CHECK(moe8_comm_bcast(c, buf, sizeof buf, 1, &err) == MOE8_ERR_INVALID_ARG);
    CHECK(strstr(err.message, "root 1") != NULL);
    CHECK(moe8_comm_barrier(c, &err) == MOE8_OK);
    moe8_comm_set_timeout(c, 0.001); /* no peer to wait for */
    CHECK(moe8_comm_barrier(c, &err) == MOE8_OK && moe8_comm_failure(c, &err) == MOE8_OK);
    moe8_comm_abort(c, 3); /* one rank: returns, this process goes on */
    CHECK(moe8_comm_size(c) == 1);
    moe8_comm_free(c);

    moe8_dist *d;
    CHECK(moe8_dist_create(1, 0, &d, &err) == MOE8_OK);
    moe8_dist_set_timeout(d, 5);
    send[0] = 42;
    CHECK(moe8_dist_bcast(d, send, sizeof send, &err) == MOE8_OK && send[0] == 42);
    CHECK(moe8_dist_failure(d, &err) == MOE8_OK);
    moe8_dist_abort(d, 3);
    CHECK(moe8_dist_size(d) == 1);
    moe8_dist_free(d);
    moe8_dist_abort(NULL, 3);
    CHECK(1); /* still running */

    if (!moe8_comm_mpi_available()) {
        CHECK(moe8_comm_create(MOE8_COMM_MPI, &c, &err) == MOE8_ERR_UNSUPPORTED);
        CHECK(strstr(err.message, "linked without libmoe8_mpi") != NULL);
    }
    return test_summary();
}
