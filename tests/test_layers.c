/*
 * test_layers.c — the layer order of docs/ARCHITECTURE.md, read off the
 * includes of every file under src/ and tools/:
 *
 *   core → io → jinja → tokenizer → arch → kernels → dist → moe → load →
 *   model → convert → grammar → sample → sched → server → tools
 *
 * A file may include its own layer's headers, those of layers before it, and
 * the public headers (include/); never a later layer's. Beside the order:
 * tools/ include only public headers (and their own cli.h), except a bench
 * command timing an internal part (cmd_bench_*.c); <mpi.h> only in
 * src/dist/comm_mpi.c; the math of kernels/, moe/ and the model's forward
 * (forward.c, mla.c, attention.c, linear.c) never sees cJSON, directly or
 * through any header (the include closure is followed).
 *
 * And the sizes a reader can hold: no file under src/ or tools/ over 900
 * lines, no function over 120 (a definition starts with a line at column 0
 * that begins a name and ends neither in ';' nor holds '=', and ends at the
 * next '}' in column 0).
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "test.h"

static const char *const ORDER[] = {"core",    "io",      "jinja",  "tokenizer", "arch",
                                    "kernels", "dist",    "moe",    "load",      "model",
                                    "convert", "grammar", "sample", "sched",     "server",
                                    "tools"};
enum { N_LAYERS = sizeof ORDER / sizeof ORDER[0], MAX_FILES = 512, MAX_INC = 64 };
enum { MAX_FILE_LINES = 900, MAX_FUNC_LINES = 120 };

typedef struct {
    char path[512]; /* relative to the source root: src/model/forward.c */
    int layer;      /* index in ORDER */
    int n_inc;
    char inc[MAX_INC][128]; /* "..." includes as written */
    int sys_cjson, sys_mpi; /* includes <cjson/cJSON.h>, <mpi.h> */
    int n_lines;
    int fn_lines, fn_line;  /* the longest function: its lines, its first line */
    char fn_name[96];       /* ... and that line's start */
} src_file;

/* Does this line (at column 0) start a function definition? */
static int starts_definition(const char *line) {
    static const char *const not_fn[] = {"typedef ", "struct ", "enum ", "union ", "static const ",
                                         "const "};
    if (!((line[0] >= 'a' && line[0] <= 'z') || (line[0] >= 'A' && line[0] <= 'Z') || line[0] == '_'))
        return 0;
    if (strchr(line, '=')) return 0;
    size_t n = strlen(line);
    while (n && (line[n - 1] == '\n' || line[n - 1] == ' ' || line[n - 1] == '\t')) n--;
    if (n && line[n - 1] == ';') return 0;
    for (size_t i = 0; i < sizeof not_fn / sizeof not_fn[0]; i++)
        if (!strncmp(line, not_fn[i], strlen(not_fn[i])) && strchr(line, '{') && !strchr(line, '('))
            return 0;
    return strchr(line, '(') != NULL;
}

static src_file g_files[MAX_FILES];
static int g_n;

static int layer_of(const char *name) {
    for (int i = 0; i < N_LAYERS; i++)
        if (!strcmp(ORDER[i], name)) return i;
    return -1;
}

static void read_file(const char *root, const char *rel, int layer) {
    char full[1024], line[1024];
    snprintf(full, sizeof full, "%s/%s", root, rel);
    FILE *f = fopen(full, "r");
    CHECKF(f != NULL, "cannot read %s", full);
    CHECKF(g_n < MAX_FILES, "more than %d source files", MAX_FILES);
    if (!f || g_n >= MAX_FILES) {
        if (f) fclose(f);
        return;
    }
    src_file *s = &g_files[g_n++];
    memset(s, 0, sizeof *s);
    snprintf(s->path, sizeof s->path, "%s", rel);
    s->layer = layer;
    int fn_start = 0;
    char fn_name[96] = "";
    while (fgets(line, sizeof line, f)) {
        const char *p = line;
        s->n_lines++;
        if (!fn_start && starts_definition(line)) {
            fn_start = s->n_lines;
            snprintf(fn_name, sizeof fn_name, "%.*s", (int)strcspn(line, "\n"), line);
        } else if (fn_start && line[0] == '}') {
            const int n = s->n_lines - fn_start + 1;
            if (n > s->fn_lines) {
                s->fn_lines = n, s->fn_line = fn_start;
                snprintf(s->fn_name, sizeof s->fn_name, "%s", fn_name);
            }
            fn_start = 0;
        }
        while (*p == ' ' || *p == '\t') p++;
        if (*p != '#') continue;
        p++;
        while (*p == ' ' || *p == '\t') p++;
        if (strncmp(p, "include", 7)) continue;
        p += 7;
        while (*p == ' ' || *p == '\t') p++;
        if (*p == '<') {
            s->sys_cjson |= !strncmp(p, "<cjson/cJSON.h>", 15);
            s->sys_mpi |= !strncmp(p, "<mpi.h>", 7);
        } else if (*p == '"') {
            const char *e = strchr(p + 1, '"');
            CHECKF(e && s->n_inc < MAX_INC, "%s: unreadable include %s", rel, p);
            if (e && s->n_inc < MAX_INC)
                snprintf(s->inc[s->n_inc++], sizeof s->inc[0], "%.*s", (int)(e - p - 1), p + 1);
        }
    }
    fclose(f);
}

/* Every .c and .h under root/dir (recursively), each in the layer `layer` or,
 * with layer -1, in the layer named by its first folder under src/. */
static void walk(const char *root, const char *dir, int layer) {
    char full[1024];
    snprintf(full, sizeof full, "%s/%s", root, dir);
    DIR *d = opendir(full);
    CHECKF(d != NULL, "cannot list %s", full);
    if (!d) return;
    for (struct dirent *e; (e = readdir(d));) {
        char rel[512];
        struct stat sb;
        if (e->d_name[0] == '.') continue;
        snprintf(rel, sizeof rel, "%s/%s", dir, e->d_name);
        snprintf(full, sizeof full, "%s/%s", root, rel);
        if (stat(full, &sb)) continue;
        if (S_ISDIR(sb.st_mode)) {
            int l = layer;
            if (l < 0) {
                l = layer_of(e->d_name);
                CHECKF(l >= 0, "src/%s: a folder in no layer of the order", e->d_name);
                if (l < 0) continue;
            }
            walk(root, rel, l);
            continue;
        }
        const size_t n = strlen(e->d_name);
        if (n > 2 && e->d_name[n - 2] == '.' && (e->d_name[n - 1] == 'c' || e->d_name[n - 1] == 'h')) {
            CHECKF(layer >= 0, "%s: a file directly under src/, in no layer", rel);
            if (layer >= 0) read_file(root, rel, layer);
        }
    }
    closedir(d);
}

static const src_file *find(const char *path) {
    for (int i = 0; i < g_n; i++)
        if (!strcmp(g_files[i].path, path)) return &g_files[i];
    return NULL;
}

/* The file an include names, as the build resolves it: src/<inc>, then the
 * includer's folder, then include/ (public; NULL then, with *pub set). */
static const src_file *resolve(const char *root, const src_file *from, const char *inc, int *pub) {
    char p[512], full[1024];
    struct stat sb;
    *pub = 0;
    snprintf(p, sizeof p, "src/%s", inc);
    if (find(p)) return find(p);
    const char *slash = strrchr(from->path, '/');
    snprintf(p, sizeof p, "%.*s/%s", (int)(slash - from->path), from->path, inc);
    if (find(p)) return find(p);
    snprintf(full, sizeof full, "%s/include/%s", root, inc);
    *pub = stat(full, &sb) == 0;
    return NULL;
}

/* Does f, or anything it includes (transitively), include <cjson/cJSON.h>?
 * seen[] marks the files visited. */
static int sees_cjson(const char *root, const src_file *f, unsigned char *seen, char *via, size_t cap) {
    const int i = (int)(f - g_files);
    if (seen[i]) return 0;
    seen[i] = 1;
    if (f->sys_cjson) {
        snprintf(via, cap, "%s", f->path);
        return 1;
    }
    for (int k = 0; k < f->n_inc; k++) {
        int pub;
        const src_file *t = resolve(root, f, f->inc[k], &pub);
        if (t && sees_cjson(root, t, seen, via, cap)) return 1;
    }
    return 0;
}

int main(void) {
    const char *root = MOE8_SOURCE_DIR;
    walk(root, "src", -1);
    walk(root, "tools", layer_of("tools"));
    CHECKF(g_n > 100, "%d source files found under %s", g_n, root);
    int n_edges = 0, n_up = 0;
    for (int i = 0; i < g_n; i++) {
        const src_file *f = &g_files[i];
        const int is_tool = f->layer == layer_of("tools");
        for (int k = 0; k < f->n_inc; k++) {
            int pub;
            const src_file *t = resolve(root, f, f->inc[k], &pub);
            CHECKF(t || pub, "%s: includes \"%s\", which is neither under src/ nor public", f->path,
                   f->inc[k]);
            if (!t) continue;
            n_edges++;
            if (t->layer > f->layer) n_up++;
            CHECKF(t->layer <= f->layer, "%s (layer %s) includes %s of the later layer %s",
                   f->path, ORDER[f->layer], t->path, ORDER[t->layer]);
            if (is_tool && t->layer != f->layer)
                CHECKF(!strncmp(f->path, "tools/cmd_bench_", 16), "%s: a command includes the "
                       "internal header %s (commands use the public headers)", f->path, t->path);
        }
        CHECKF(!f->sys_mpi || !strcmp(f->path, "src/dist/comm_mpi.c"),
               "%s includes <mpi.h> (only src/dist/comm_mpi.c may)", f->path);
        const int math = !strncmp(f->path, "src/kernels/", 12) || !strncmp(f->path, "src/moe/", 8) ||
                         !strcmp(f->path, "src/model/forward.c") ||
                         !strcmp(f->path, "src/model/mla.c") ||
                         !strcmp(f->path, "src/model/attention.c") ||
                         !strcmp(f->path, "src/model/linear.c");
        if (math) {
            unsigned char seen[MAX_FILES] = {0};
            char via[512] = "";
            CHECKF(!sees_cjson(root, f, seen, via, sizeof via), "%s sees cJSON (through %s)",
                   f->path, via);
        }
    }
    CHECK(n_edges > 200);
    int longest_file = 0, longest_fn = 0;
    for (int i = 0; i < g_n; i++) {
        const src_file *f = &g_files[i];
        CHECKF(f->n_lines <= MAX_FILE_LINES, "%s: %d lines (at most %d)", f->path, f->n_lines,
               MAX_FILE_LINES);
        CHECKF(f->fn_lines <= MAX_FUNC_LINES, "%s:%d: a function of %d lines (at most %d): %s", f->path,
               f->fn_line, f->fn_lines, MAX_FUNC_LINES, f->fn_name);
        if (f->n_lines > longest_file) longest_file = f->n_lines;
        if (f->fn_lines > longest_fn) longest_fn = f->fn_lines;
    }
    CHECK(longest_fn > 50); /* the scan found functions at all */
    printf("longest file %d lines, longest function %d lines\n", longest_file, longest_fn);
    printf("%d files, %d includes between them, %d of them upward; order:", g_n, n_edges, n_up);
    for (int i = 0; i < N_LAYERS; i++) printf(" %s", ORDER[i]);
    printf("\n");
    return test_summary();
}
