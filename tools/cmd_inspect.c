/*
 * cmd_inspect.c — `moe8 inspect -m DIR`: load a model folder (every tensor
 * checked) and describe it on stdout: architecture (the family, its attention
 * kind, routing and shared expert), per-layer quant types
 * with runs of identical layers collapsed, tensor bytes by dtype, and the
 * estimated memory at a context length (default 4096) and KV cache type
 * (default f16, as contexts).
 * Uses only the public headers. Does not run the model.
 * lm_head gets a line of its own: quant type, dtype and bytes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#define SYNOPSIS "moe8 inspect -m DIR [-c N] [--kv-type T]"

/* A value only some families have (moe8.h moe8_config_get_int / _num). */
static int64_t fam_i(const moe8_config *c, const char *name) {
    return moe8_config_get_int(c, name, NULL);
}
static double fam_d(const moe8_config *c, const char *name) {
    return moe8_config_get_num(c, name, NULL);
}

static double mib(uint64_t b) { return (double)b / (1024.0 * 1024.0); }

/* The family's parts: attention kind, routing, shared expert. */
static void print_family(const moe8_config *c, const moe8_arch_info *ai) {
    printf("architecture: %s (%s)\n", ai->model_type, ai->hf_class);
    if (ai->mla) {
        if (fam_i(c, "q_lora_rank"))
            printf("attention: multi-head latent (q_lora_rank %lld",
                   (long long)fam_i(c, "q_lora_rank"));
        else printf("attention: multi-head latent (q_proj");
        printf(", kv_lora_rank %lld, q/k nope %lld + rope %lld, v %lld; cache %lld values per "
               "position and layer)\n",
               (long long)fam_i(c, "kv_lora_rank"), (long long)fam_i(c, "qk_nope_head_dim"),
               (long long)fam_i(c, "qk_rope_head_dim"), (long long)fam_i(c, "v_head_dim"),
               (long long)(fam_i(c, "kv_lora_rank") + fam_i(c, "qk_rope_head_dim")));
        if (fam_d(c, "yarn_factor") > 0)
            printf("rope_scaling: yarn, factor %g, original_max_position_embeddings %lld, beta "
                   "%g/%g, mscale %g, mscale_all_dim %g\n",
                   fam_d(c, "yarn_factor"),
                   (long long)fam_i(c, "yarn_original_max_position_embeddings"),
                   fam_d(c, "yarn_beta_fast"), fam_d(c, "yarn_beta_slow"), fam_d(c, "yarn_mscale"),
                   fam_d(c, "yarn_mscale_all_dim"));
    } else {
        const int qk_norm = ai->qk_norm || (ai->qk_norm_config && fam_i(c, "qk_norm"));
        const double partial = fam_d(c, "partial_rotary_factor");
        printf("attention: %s%s",
               ai->qk_norm_whole ? "q/k RMSNorm over the whole projection before RoPE"
               : qk_norm         ? "q/k RMSNorm per head before RoPE"
                                 : "no q/k norm",
               fam_i(c, "qkv_bias") ? ", q/k/v bias" : ", no biases");
        if (fam_i(c, "rotary_dim") > 0) /* minimax_m2 */
            printf(", rotary on %lld of %lld dims (rotary_dim)", (long long)fam_i(c, "rotary_dim"),
                   (long long)c->head_dim);
        else if (partial > 0) /* glm4_moe */
            printf(", rotary on %lld of %lld dims (partial_rotary_factor %g)",
                   (long long)((double)c->head_dim * partial), (long long)c->head_dim, partial);
        if (fam_i(c, "attn_output_gate")) printf(", sigmoid output gate");
        if (ai->sinks) /* gpt_oss */
            printf("%s, attention sinks, sliding window %lld on the layers layer_types names",
                   fam_i(c, "qkv_bias") ? ", o bias" : "", (long long)fam_i(c, "sliding_window"));
        printf("\n");
        if (ai->sinks && fam_d(c, "yarn_factor") > 0)
            printf("rope_scaling: yarn, factor %g, original_max_position_embeddings %lld, beta "
                   "%g/%g\n", fam_d(c, "yarn_factor"),
                   (long long)fam_i(c, "yarn_original_max_position_embeddings"),
                   fam_d(c, "yarn_beta_fast"), fam_d(c, "yarn_beta_slow"));
    }
    if (fam_i(c, "linear_num_value_heads") > 0) /* hybrids: the Gated DeltaNet layers */
        printf("linear attention: Gated DeltaNet, %lld key / %lld value heads of %lld / %lld, "
               "conv %lld; full attention every %lld layers (or as layer_types says)\n",
               (long long)fam_i(c, "linear_num_key_heads"),
               (long long)fam_i(c, "linear_num_value_heads"),
               (long long)fam_i(c, "linear_key_head_dim"),
               (long long)fam_i(c, "linear_value_head_dim"),
               (long long)fam_i(c, "linear_conv_kernel_dim"),
               (long long)fam_i(c, "full_attention_interval"));
    printf("routing: %s top-%lld of %lld", fam_i(c, "scoring_sigmoid") ? "sigmoid" : "softmax",
           (long long)c->num_experts_per_tok, (long long)c->num_experts);
    if (fam_i(c, "topk_grouped"))
        printf(", %lld groups keep %lld (ranked by %s)", (long long)fam_i(c, "n_group"),
               (long long)fam_i(c, "topk_group"),
               fam_i(c, "group_top2") ? "the sum of their two best" : "their best");
    if (fam_i(c, "e_score_bias")) printf(", e_score_correction_bias for selection");
    if (ai->router_bias) printf(", router bias");
    printf(", %s", ai->always_renorm ? "always renormalized"
                   : c->norm_topk_prob ? "renormalized (norm_topk_prob)"
                                       : "not renormalized (norm_topk_prob false)");
    if (fam_d(c, "routed_scaling_factor") != 1.0)
        printf(", x %g (routed_scaling_factor)", fam_d(c, "routed_scaling_factor"));
    printf("\n");
    if (ai->swiglu_clamped) /* gpt_oss */
        printf("experts: clamped SwiGLU (limit %g, alpha %g), gate/up/down biases\n",
               fam_d(c, "swiglu_limit"), fam_d(c, "swiglu_alpha"));
    if (ai->shared_expert && fam_i(c, "shared_expert_intermediate_size") > 0)
        printf("shared expert: intermediate %lld, %s\n",
               (long long)fam_i(c, "shared_expert_intermediate_size"),
               ai->shared_gate ? "sigmoid gate" : "ungated");
}

static void print_arch(const char *dir, const moe8_config *c) {
    moe8_arch_info ai;
    printf("model: %s\n", dir);
    printf("model_type: %s\n", c->model_type);
    printf("kernels: %s (this build has: %s)\n", moe8_kernel_isa(), moe8_kernel_tables());
    if (moe8_arch_get_info(c->arch, &ai) == 0) print_family(c, &ai);
    printf("hidden: %lld, layers: %lld, vocab: %lld, tie_word_embeddings: %s\n",
           (long long)c->hidden_size, (long long)c->num_hidden_layers, (long long)c->vocab_size,
           c->tie_word_embeddings ? "yes" : "no");
    printf("heads: %lld q, %lld kv, head_dim %lld\n", (long long)c->num_attention_heads,
           (long long)c->num_key_value_heads, (long long)c->head_dim);
    printf("experts: %lld, top-%lld, intermediate %lld, norm_topk_prob %s\n",
           (long long)c->num_experts, (long long)c->num_experts_per_tok,
           (long long)c->moe_intermediate_size, c->norm_topk_prob ? "yes" : "no");
    if (moe8_arch_get_info(c->arch, &ai) == 0 && ai.sparse_step)
        printf("dense mlp: intermediate %lld, decoder_sparse_step %lld, mlp_only_layers %d\n",
               (long long)c->intermediate_size, (long long)c->decoder_sparse_step,
               c->n_mlp_only_layers);
    else if (moe8_arch_get_info(c->arch, &ai) == 0 && ai.first_k_dense)
        printf("dense mlp: intermediate %lld, first_k_dense_replace %lld, moe_layer_freq %lld\n",
               (long long)c->intermediate_size, (long long)fam_i(c, "first_k_dense_replace"),
               (long long)fam_i(c, "moe_layer_freq"));
    else
        printf("dense mlp: none (every layer is MoE)\n");
    printf("rope_theta: %g, rms_norm_eps: %g, max_position_embeddings: %lld\n", c->rope_theta,
           c->rms_norm_eps, (long long)c->max_position_embeddings);
    printf("bos id: %lld, stop ids:", (long long)c->bos_token_id);
    for (int i = 0; i < c->n_eos_ids; i++) printf(" %lld", (long long)c->eos_token_ids[i]);
    printf("%s\n", c->n_eos_ids ? "" : " (none)");
}

/* "attn W8A8, experts W8A8_DYNAMIC, router FLOAT" or "attn FLOAT, mlp FLOAT". */
static void describe(const moe8_layer_info *li, char *buf, size_t n) {
    size_t u;
    if (li->mla)
        u = (size_t)snprintf(buf, n, "attn %s%s%s%s%s (kv_b_proj %s)", moe8_quant_type_name(li->qkv),
                             li->o != li->qkv ? ", o_proj " : "",
                             li->o != li->qkv ? moe8_quant_type_name(li->o) : "",
                             li->q_b != li->qkv ? ", q_b_proj " : "",
                             li->q_b != li->qkv ? moe8_quant_type_name(li->q_b) : "",
                             moe8_quant_type_name(li->kv_b));
    else if (li->gdn) /* Gated DeltaNet: in_proj_qkvz / in_proj_qkv and out_proj */
        u = (size_t)snprintf(buf, n, "linear attn in_proj %s out_proj %s",
                             moe8_quant_type_name(li->gdn_in), moe8_quant_type_name(li->gdn_out));
    else if (li->qkv == li->o)
        u = (size_t)snprintf(buf, n, "attn %s", moe8_quant_type_name(li->qkv));
    else
        u = (size_t)snprintf(buf, n, "attn qkv %s o %s", moe8_quant_type_name(li->qkv),
                             moe8_quant_type_name(li->o));
    if (u >= n) return;
    if (li->is_moe) {
        u += (size_t)snprintf(buf + u, n - u, ", experts %s", moe8_quant_type_name(li->experts));
        if (u < n && li->experts_down != li->experts)
            u += (size_t)snprintf(buf + u, n - u, " (down_proj %s)",
                                  moe8_quant_type_name(li->experts_down));
        if (u < n && li->has_shared && li->shared_gate_up == li->shared_down)
            u += (size_t)snprintf(buf + u, n - u, ", shared expert %s",
                                  moe8_quant_type_name(li->shared_gate_up));
        else if (u < n && li->has_shared)
            u += (size_t)snprintf(buf + u, n - u, ", shared expert %s (down_proj %s)",
                                  moe8_quant_type_name(li->shared_gate_up),
                                  moe8_quant_type_name(li->shared_down));
        if (u < n) snprintf(buf + u, n - u, ", router %s", moe8_quant_type_name(li->router));
    }
    else if (li->mlp_gate_up == li->mlp_down)
        snprintf(buf + u, n - u, ", mlp %s", moe8_quant_type_name(li->mlp_down));
    else
        snprintf(buf + u, n - u, ", mlp gate_up %s down %s", moe8_quant_type_name(li->mlp_gate_up),
                 moe8_quant_type_name(li->mlp_down));
}

static void print_quant(const moe8_model *m, int64_t n_layers) {
    char cur[256], next[256];
    int64_t start = 0;
    moe8_layer_info li;
    printf("quant:\n");
    for (int64_t l = 0; l < n_layers; l++) {
        if (moe8_model_layer_info(m, l, &li) != 0) return;
        describe(&li, next, sizeof next);
        if (l == 0) memcpy(cur, next, sizeof cur);
        if (strcmp(cur, next) != 0) {
            if (l - 1 == start) printf("  layer %lld: %s\n", (long long)start, cur);
            else printf("  layers %lld-%lld: %s\n", (long long)start, (long long)(l - 1), cur);
            start = l;
            memcpy(cur, next, sizeof cur);
        }
    }
    if (n_layers - 1 == start) printf("  layer %lld: %s\n", (long long)start, cur);
    else printf("  layers %lld-%lld: %s\n", (long long)start, (long long)(n_layers - 1), cur);
}

/* "lm_head: W8A8_DYNAMIC, I8, 144.9 MiB + scales 1.2 MiB" or "lm_head: FLOAT, BF16, ..." */
static void print_lm_head(const moe8_model *m) {
    moe8_lm_head_info li;
    if (moe8_model_lm_head_info(m, &li) != 0) return;
    printf("lm_head: %s, %s, %.1f MiB (%llu bytes)", moe8_quant_type_name(li.quant),
           moe8_dtype_name(li.dtype), mib(li.weight_bytes), (unsigned long long)li.weight_bytes);
    if (li.scale_bytes)
        printf(" + scales %.1f MiB (%llu bytes)", mib(li.scale_bytes),
               (unsigned long long)li.scale_bytes);
    printf("%s\n", li.tied ? ", tied to model.embed_tokens.weight" : "");
}

static void print_tensors(const moe8_model_stats *s) {
    printf("tensors: %lld, %.1f MiB (%llu bytes)\n", (long long)s->n_tensors, mib(s->total_bytes),
           (unsigned long long)s->total_bytes);
    for (int d = 0; d < MOE8_DT_COUNT; d++)
        if (s->tensors_by_dtype[d])
            printf("  %-8s %6lld tensors %10.1f MiB (%llu bytes)\n", moe8_dtype_name((moe8_dtype)d),
                   (long long)s->tensors_by_dtype[d], mib(s->bytes_by_dtype[d]),
                   (unsigned long long)s->bytes_by_dtype[d]);
    printf("safetensors files: %d\n", s->n_files);
}

int cmd_inspect(int argc, char **argv) {
    const char *dir = NULL;
    long long n_ctx = 4096;
    moe8_dtype kv_type = moe8_context_params_default().kv_type;
    moe8_model *m = NULL;
    moe8_model_stats s;
    moe8_memory_estimate me;
    moe8_error err;
    int ctx = 4096;
    const cli_opt opts[] = {
        {"-m", NULL, CLI_STR, &dir, .arg = "DIR", .help = "model folder (config.json, *.safetensors,\n"
         "quant_model_description.json)"},
        {"-c", NULL, CLI_INT, &ctx, 1, 2147483647, .arg = "N",
         .help = "context length for the memory estimate (default 4096)"},
        {"--kv-type", NULL, CLI_KV, &kv_type, .arg = "T",
         .help = "KV cache elements for the estimate: f16 (default), bf16, f32"},
        {0},
    };
    const int rc = cli_parse("inspect", SYNOPSIS, opts, NULL, argc, argv);
    if (rc) return rc < 0 ? 0 : rc;
    n_ctx = ctx;
    if (!dir) {
        cli_usage(stderr, SYNOPSIS, opts, NULL);
        return 2;
    }
    moe8_model_params mp = moe8_model_params_default();
    cli_model_opts(&mp);
    if (moe8_model_load(dir, &mp, &m, &err) != MOE8_OK) return cli_fail("inspect", &err);
    const moe8_config *c = moe8_model_config(m);
    print_arch(dir, c);
    print_quant(m, c->num_hidden_layers);
    print_lm_head(m);
    moe8_model_get_stats(m, &s);
    print_tensors(&s);
    if (moe8_model_memory(m, (int64_t)n_ctx, kv_type, &me, &err) != MOE8_OK) {
        moe8_model_free(m);
        return cli_fail("inspect", &err);
    }
    printf("memory at context %lld: %.1f MiB = weights %.1f + KV cache %.1f (%s) + scratch %.1f\n",
           n_ctx, mib(me.total_bytes), mib(me.weight_bytes), mib(me.kv_bytes),
           cli_kv_type_name(kv_type), mib(me.scratch_bytes));
    moe8_cache_info ci;
    if (mp.no_cache) {
        printf("packed cache: off (--no-cache)\n");
    } else if (moe8_model_cache_check(m, 0, &ci, &err) == MOE8_OK) {
        printf("packed cache (%s, layout %s): %s %s", ci.table, ci.layout,
               ci.valid ? "valid" : ci.exists ? "invalid" : "none yet; would be", ci.path);
        if (ci.exists) printf(" (%.1f MiB)", mib(ci.bytes));
        if (ci.exists && !ci.valid) printf(": %s", ci.why);
        printf("\n");
    }
    moe8_model_free(m);
    return 0;
}
