/*
 * serve_app.c — a program outside the moe8 tree that embeds the HTTP server:
 * the installed moe8.h and moe8_server.h, linked through pkg-config
 * moe8-server (tests/test_install.sh builds it). It loads the model folder
 * argv[1] (a tiny synthetic one the test makes) and its tokenizer, calls
 * moe8_serve on 127.0.0.1 with a port the OS picks, and once the server says
 * it listens, a thread asks GET /health over a plain socket and then sets the
 * stop flag. Prints "health <status line>" and "serve <status>"; exit 0 when
 * the answer was 200 and moe8_serve returned MOE8_OK.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <moe8.h>
#include <moe8_server.h>

static volatile int g_stop;
static int g_port;
static char g_status[128];

static void *ask_health(void *arg) {
    struct sockaddr_in a;
    char buf[512];
    ssize_t k;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    const char req[] = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    (void)arg;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)g_port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && !connect(fd, (struct sockaddr *)&a, sizeof a) && write(fd, req, sizeof req - 1) > 0 &&
        (k = read(fd, buf, sizeof buf - 1)) > 0) {
        buf[k] = '\0';
        buf[strcspn(buf, "\r\n")] = '\0';
        snprintf(g_status, sizeof g_status, "%.100s", buf);
    }
    if (fd >= 0) close(fd);
    g_stop = 1;
    return NULL;
}

static void on_ready(void *user, const char *line) {
    const char *colon = strrchr(line, ':');
    pthread_t t;
    (void)user;
    printf("ready %s\n", line);
    g_port = colon ? atoi(colon + 1) : 0;
    if (g_port <= 0 || pthread_create(&t, NULL, ask_health, NULL)) {
        g_stop = 1;
        return;
    }
    pthread_detach(t);
}

int main(int argc, char **argv) {
    moe8_model_params mp = moe8_model_params_default();
    moe8_serve_params sp = moe8_serve_params_default();
    moe8_model *m = NULL;
    moe8_tokenizer *tok = NULL;
    moe8_error err;
    moe8_status st;
    if (argc != 2) {
        fprintf(stderr, "usage: serve_app MODEL_DIR\n");
        return 2;
    }
    if (moe8_model_load(argv[1], &mp, &m, &err) != MOE8_OK ||
        moe8_tokenizer_load(argv[1], &tok, &err) != MOE8_OK) {
        printf("load error: %s\n", err.message);
        moe8_model_free(m);
        return 1;
    }
    sp.port = 0;
    sp.model_dir = argv[1];
    sp.on_ready = on_ready;
    st = moe8_serve(m, tok, &sp, &g_stop, &err);
    printf("health %s\n", g_status);
    printf("serve %d\n", (int)st);
    if (st != MOE8_OK) printf("serve error: %s\n", err.message);
    moe8_tokenizer_free(tok);
    moe8_model_free(m);
    return st == MOE8_OK && !strncmp(g_status, "HTTP/1.1 200", 12) ? 0 : 1;
}
