/*
 * fixture_hybrid.h — the hybrid linear-attention families of fixture_model.h
 * (included by it; not on its own): Qwen3-Next (FX_QWEN3_NEXT,
 * Qwen3NextForCausalLM) and Qwen3.5/3.6-MoE (FX_QWEN3_5_MOE, the text model
 * of Qwen3_5MoeForConditionalGeneration), written from transformers'
 * modeling/configuration_qwen3_next.py and _qwen3_5_moe.py, vLLM's
 * qwen3_next.py / qwen3_5.py and llama.cpp's converter (tensor layouts),
 * independently of src/.
 *
 * Layers: layer l is full attention iff (l + 1) % full_interval == 0 (else
 * Gated DeltaNet); config.json says so by full_attention_interval, the
 * layer_types list or both (o.layer_types 0 / 1 / 2). Names under P =
 * "model." (qwen3_next) or "model.language_model." (qwen3_5_moe):
 *   P embed_tokens.weight [V][H], P norm.weight [H], lm_head.weight [V][H]
 *   P layers.l.input_layernorm.weight, post_attention_layernorm.weight [H]
 *     (zero-centred: the norm multiplies by 1 + w; values N(0, 0.1²))
 *   linear layers, P layers.l.linear_attn.*, with NK key heads of dk, NV value
 *   heads of dv, r = NV / NK, C = 2 NK dk + NV dv:
 *     qwen3_next: in_proj_qkvz.weight [2 NK dk + 2 NV dv][H], grouped by key
 *       head: for g < NK the rows [q_g (dk), k_g (dk), v (r dv), z (r dv)];
 *       in_proj_ba.weight [2 NV][H] grouped: for g < NK [b (r), a (r)]
 *     qwen3_5_moe: in_proj_qkv.weight [C][H] flat [q (NK dk), k (NK dk),
 *       v (NV dv)]; in_proj_z.weight [NV dv][H]; in_proj_b / in_proj_a [NV][H]
 *     conv1d.weight [C][1][K] (channels in the order q, k, v flat), A_log [NV]
 *     F32 (float_dtype with o.a_log_float_dtype; log A, A in [0.05, 1)),
 *     dt_bias [NV], norm.weight [dv] (plain
 *     weight, N(1, 0.1²)), out_proj.weight [H][NV dv]
 *   full layers, P layers.l.self_attn.*: q_proj.weight [NH 2D][H] (per head
 *     [query D, gate D]), k_proj / v_proj [NKV D][H], o_proj [H][NH D],
 *     q_norm / k_norm [D] (zero-centred)
 *   MoE (every layer; qwen3_next's dense_layer: mlp.{gate,up,down}_proj of
 *     inter): P layers.l.mlp.gate.weight [E][H], experts
 *     mlp.experts.e.{gate,up,down}_proj.weight, or (qwen3_5_moe float unless
 *     o.split_experts) the fused mlp.experts.gate_up_proj [E][2I][H] (rows
 *     0..I-1 gate, I..2I-1 up) and mlp.experts.down_proj [E][H][I], the same
 *     values either way; mlp.shared_expert.{gate,up,down}_proj of
 *     shared_inter, mlp.shared_expert_gate.weight [1][H]
 *   MTP (n_mtp > 0, never read): mtp.fc.weight [H][2H],
 *     mtp.pre_fc_norm_embedding / pre_fc_norm_hidden / norm.weight [H],
 *     mtp.layers.0.* a full-attention MoE layer (per-expert names)
 *   qwen3_5_moe's vision tower (unless o.no_vision, never read):
 *     model.visual.blocks.0.attn.qkv.weight [48][16] and .bias [48],
 *     model.visual.merger.linear_fc2.weight [H][16]
 * quant 1 follows msModelSlim's W8A8 recipe for these models (o.w4a8_layers:
 * the routed experts of those decoder layers W4A8_DYNAMIC instead, as
 * fixture_model.h writes them): W8A8_DYNAMIC
 * (weight I8, weight_scale / weight_offset as fx_add_linear writes them) for
 * the full-attention q/k/v_proj, the routed experts (per-expert names) and,
 * qwen3_next, in_proj_qkvz; everything else FLOAT (in_proj_ba / qkv / z / b /
 * a, conv1d, A_log, dt_bias, norms, o_proj, out_proj, router, shared expert
 * and its gate, lm_head); o.down_float keeps the experts' down_proj FLOAT.
 */
#ifndef MOE8_FIXTURE_HYBRID_H
#define MOE8_FIXTURE_HYBRID_H

/* Hybrid defaults: H 64, 4 layers (3 linear, 1 full), 4/2 heads of 16
 * (rotary 4), linear 2 key heads of 8 / 4 value heads of 12, conv 4,
 * E 8 top-2 of 32, shared expert 48, eps 1e-6, theta 1e7, one MTP layer. */
static inline fx_opts fx_hybrid_opts(int arch) {
    fx_opts o = fx_default_opts();
    o.arch = arch;
    o.n_layers = 4;
    o.n_experts = 8;
    o.top_k = 2;
    o.moe_inter = 32;
    o.shared_inter = 48;
    o.inter = 96;
    o.partial_rotary = 0.25;
    o.layer_types = arch == FX_QWEN3_5_MOE ? 2 : 0;
    return o;
}

static inline int64_t fx_lin_conv_dim(const fx_opts *o) {
    return 2 * o->lin_k_heads * o->lin_k_dim + o->lin_v_heads * o->lin_v_dim;
}

/* 1 if hybrid layer l is a full-attention layer. */
static inline int fx_full_attn(const fx_opts *o, int64_t l) {
    const int64_t it = o->full_interval > 0 ? o->full_interval : 4;
    return (l + 1) % it == 0;
}

static inline const char *fx_hy_prefix(const fx_opts *o) {
    return o->arch == FX_QWEN3_5_MOE ? "model.language_model." : "model.";
}

/* A float tensor of 3 dims [d0][d1][d2], N(0, scale²). */
static inline void fx_add_float3(fx_list *L, const char *name, int64_t d0, int64_t d1, int64_t d2,
                                 double scale) {
    fx_tensor *t = fx_add(L, name, L->o->float_dtype, 1, d0 * d1 * d2, 0, "FLOAT");
    t->n_dims = 3;
    t->shape[0] = d0, t->shape[1] = d1, t->shape[2] = d2;
    for (int64_t i = 0; i < d0 * d1 * d2; i++) fx_set(t, i, test_rng_normal(&L->rng) * scale);
}

/* The Gated DeltaNet tensors of the linear layer whose names start with p. */
static inline void fx_hy_linear_attn(fx_list *L, const char *p) {
    const fx_opts *o = L->o;
    const int64_t H = o->hidden, NK = o->lin_k_heads, NV = o->lin_v_heads;
    const int64_t dk = o->lin_k_dim, dv = o->lin_v_dim, C = fx_lin_conv_dim(o);
    char n[160];
    fx_tensor *t;
    if (o->arch == FX_QWEN3_NEXT) {
        snprintf(n, sizeof n, "%s.linear_attn.in_proj_qkvz", p);
        fx_add_linear(L, n, o->quant ? "W8A8_DYNAMIC" : "FLOAT", 2 * NK * dk + 2 * NV * dv, H, 0, 0);
        snprintf(n, sizeof n, "%s.linear_attn.in_proj_ba", p);
        fx_add_linear(L, n, "FLOAT", 2 * NV, H, 0, 0);
    } else {
        snprintf(n, sizeof n, "%s.linear_attn.in_proj_qkv", p);
        fx_add_linear(L, n, "FLOAT", C, H, 0, 0);
        snprintf(n, sizeof n, "%s.linear_attn.in_proj_z", p);
        fx_add_linear(L, n, "FLOAT", NV * dv, H, 0, 0);
        snprintf(n, sizeof n, "%s.linear_attn.in_proj_b", p);
        fx_add_linear(L, n, "FLOAT", NV, H, 0, 0);
        snprintf(n, sizeof n, "%s.linear_attn.in_proj_a", p);
        fx_add_linear(L, n, "FLOAT", NV, H, 0, 0);
    }
    snprintf(n, sizeof n, "%s.linear_attn.conv1d.weight", p);
    fx_add_float3(L, n, C, 1, o->conv_kernel, 1.0 / sqrt((double)o->conv_kernel));
    snprintf(n, sizeof n, "%s.linear_attn.dt_bias", p);
    fx_add_float(L, n, 1, NV, 0, 0.5, 0.0);
    snprintf(n, sizeof n, "%s.linear_attn.A_log", p);
    t = fx_add(L, n, o->a_log_float_dtype ? o->float_dtype : MOE8_DT_F32, 1, NV, 0, "FLOAT");
    for (int64_t i = 0; i < NV; i++) fx_set(t, i, log(0.05 + 0.95 * test_rng_uniform(&L->rng)));
    snprintf(n, sizeof n, "%s.linear_attn.norm.weight", p);
    fx_add_float(L, n, 1, dv, 0, 0.1, 1.0);
    snprintf(n, sizeof n, "%s.linear_attn.out_proj", p);
    fx_add_linear(L, n, "FLOAT", H, NV * dv, 0, 0);
}

/* The gated full attention of the layer whose names start with p. */
static inline void fx_hy_full_attn(fx_list *L, const char *p) {
    const fx_opts *o = L->o;
    const int64_t H = o->hidden, NH = o->n_heads, NKV = o->n_kv_heads, D = o->head_dim;
    const char *q = o->quant ? "W8A8_DYNAMIC" : "FLOAT";
    char n[160];
    snprintf(n, sizeof n, "%s.self_attn.q_proj", p);
    fx_add_linear(L, n, q, NH * 2 * D, H, 0, 0);
    snprintf(n, sizeof n, "%s.self_attn.k_proj", p);
    fx_add_linear(L, n, q, NKV * D, H, 0, 0);
    snprintf(n, sizeof n, "%s.self_attn.v_proj", p);
    fx_add_linear(L, n, q, NKV * D, H, 0, 0);
    snprintf(n, sizeof n, "%s.self_attn.o_proj", p);
    fx_add_linear(L, n, "FLOAT", H, NH * D, 0, 0);
    snprintf(n, sizeof n, "%s.self_attn.q_norm.weight", p);
    fx_add_float(L, n, 1, D, 0, 0.1, 0.0);
    snprintf(n, sizeof n, "%s.self_attn.k_norm.weight", p);
    fx_add_float(L, n, 1, D, 0, 0.1, 0.0);
}

/* The fused experts of Qwen3.5's checkpoints: gate_up_proj [E][2I][H] and
 * down_proj [E][H][I], each expert's values those its per-expert tensors
 * would have (generated under their names, then dropped). */
static inline void fx_hy_fused_experts(fx_list *L, const char *p) {
    const fx_opts *o = L->o;
    const int64_t E = o->n_experts, I = o->moe_inter, H = o->hidden;
    static const char *const proj[3] = {"gate_proj", "up_proj", "down_proj"};
    double *gu = malloc(sizeof(double) * (size_t)(E * 2 * I * H));
    double *dn = malloc(sizeof(double) * (size_t)(E * H * I));
    char n[160];
    fx_tensor *t;
    for (int64_t e = 0; e < E; e++)
        for (int i = 0; i < 3; i++) {
            snprintf(n, sizeof n, "%s.mlp.experts.%lld.%s.weight", p, (long long)e, proj[i]);
            fx_add_float(L, n, 2, i < 2 ? I : H, i < 2 ? H : I, 1.0 / sqrt((double)(i < 2 ? H : I)), 0);
            t = &L->t[L->n - 1];
            for (int64_t j = 0; j < I * H; j++) {
                if (i < 2) gu[(e * 2 + i) * I * H + j] = fx_get(t, j);
                else dn[e * H * I + j] = fx_get(t, j);
            }
            free(t->data);
            L->n--;
        }
    snprintf(n, sizeof n, "%s.mlp.experts.gate_up_proj", p);
    fx_add_float3(L, n, E, 2 * I, H, 0);
    t = &L->t[L->n - 1];
    for (int64_t j = 0; j < E * 2 * I * H; j++) fx_set(t, j, gu[j]);
    snprintf(n, sizeof n, "%s.mlp.experts.down_proj", p);
    fx_add_float3(L, n, E, H, I, 0);
    t = &L->t[L->n - 1];
    for (int64_t j = 0; j < E * H * I; j++) fx_set(t, j, dn[j]);
    free(gu);
    free(dn);
}

/* The MLP of the layer whose names start with p: dense (dense != 0) or the
 * MoE with its gated shared expert. */
static inline void fx_hy_mlp(fx_list *L, const char *p, int dense, int fused) {
    const fx_opts *o = L->o;
    const int64_t H = o->hidden;
    const char *ex = o->quant ? "W8A8_DYNAMIC" : "FLOAT";
    const char *exd = o->quant && !o->down_float ? "W8A8_DYNAMIC" : "FLOAT";
    static const char *const proj[3] = {"gate_proj", "up_proj", "down_proj"};
    const char *lp = strncmp(p, "mtp.", 4) ? strstr(p, "layers.") : NULL;
    const long l = lp ? strtol(lp + 7, NULL, 10) : -1;
    char n[160];
    if (o->quant && l >= 0 && l < 32 && (o->w4a8_layers >> l & 1)) ex = exd = "W4A8_DYNAMIC";
    if (dense) {
        for (int i = 0; i < 3; i++) {
            snprintf(n, sizeof n, "%s.mlp.%s", p, proj[i]);
            fx_add_linear(L, n, "FLOAT", i < 2 ? o->inter : H, i < 2 ? H : o->inter, 0, 0);
        }
        return;
    }
    snprintf(n, sizeof n, "%s.mlp.gate.weight", p);
    fx_add_float(L, n, 2, o->n_experts, H, 1.0 / sqrt((double)H), 0.0);
    if (fused) {
        fx_hy_fused_experts(L, p);
    } else {
        for (int64_t e = 0; e < o->n_experts; e++)
            for (int i = 0; i < 3; i++) {
                snprintf(n, sizeof n, "%s.mlp.experts.%lld.%s", p, (long long)e, proj[i]);
                fx_add_linear(L, n, i < 2 ? ex : exd, i < 2 ? o->moe_inter : H, i < 2 ? H : o->moe_inter, 0, 0);
            }
    }
    for (int i = 0; i < 3; i++) {
        snprintf(n, sizeof n, "%s.mlp.shared_expert.%s", p, proj[i]);
        fx_add_linear(L, n, "FLOAT", i < 2 ? o->shared_inter : H, i < 2 ? H : o->shared_inter, 0, 0);
    }
    snprintf(n, sizeof n, "%s.mlp.shared_expert_gate.weight", p);
    fx_add_float(L, n, 2, 1, H, 1.0 / sqrt((double)H), 0.0);
}

/* One decoder layer under prefix p. */
static inline void fx_hy_layer(fx_list *L, const char *p, int full, int dense, int fused) {
    const int64_t H = L->o->hidden;
    char n[160];
    snprintf(n, sizeof n, "%s.input_layernorm.weight", p);
    fx_add_float(L, n, 1, H, 0, 0.1, 0.0);
    snprintf(n, sizeof n, "%s.post_attention_layernorm.weight", p);
    fx_add_float(L, n, 1, H, 0, 0.1, 0.0);
    if (full) fx_hy_full_attn(L, p);
    else fx_hy_linear_attn(L, p);
    fx_hy_mlp(L, p, dense, fused);
}

static inline void fx_build_hybrid(fx_list *L) {
    const fx_opts *o = L->o;
    const int64_t H = o->hidden;
    const char *P = fx_hy_prefix(o);
    const int fused = o->arch == FX_QWEN3_5_MOE && !o->quant && !o->split_experts;
    char n[160], p[100];
    snprintf(n, sizeof n, "%sembed_tokens.weight", P);
    fx_add_float(L, n, 2, o->vocab, H, 1.0, 0.0);
    for (int64_t l = 0; l < o->n_layers; l++) {
        snprintf(p, sizeof p, "%slayers.%lld", P, (long long)l);
        fx_hy_layer(L, p, fx_full_attn(o, l), o->arch == FX_QWEN3_NEXT && l == o->dense_layer, fused);
    }
    snprintf(n, sizeof n, "%snorm.weight", P);
    fx_add_float(L, n, 1, H, 0, 0.1, 0.0);
    if (!o->tie) fx_add_float(L, "lm_head.weight", 2, o->vocab, H, 1.0 / sqrt((double)H), 0);
    for (int64_t i = 0; i < o->n_mtp; i++) {
        snprintf(p, sizeof p, "mtp.layers.%lld", (long long)i);
        fx_hy_layer(L, p, 1, 0, 0);
    }
    if (o->n_mtp > 0) {
        fx_add_float(L, "mtp.fc.weight", 2, H, 2 * H, 1.0 / sqrt(2.0 * (double)H), 0.0);
        fx_add_float(L, "mtp.pre_fc_norm_embedding.weight", 1, H, 0, 0.1, 0.0);
        fx_add_float(L, "mtp.pre_fc_norm_hidden.weight", 1, H, 0, 0.1, 0.0);
        fx_add_float(L, "mtp.norm.weight", 1, H, 0, 0.1, 0.0);
    }
    if (o->arch == FX_QWEN3_5_MOE && !o->no_vision) {
        fx_add_float(L, "model.visual.blocks.0.attn.qkv.weight", 2, 48, 16, 0.25, 0.0);
        fx_add_float(L, "model.visual.blocks.0.attn.qkv.bias", 1, 48, 0, 0.1, 0.0);
        fx_add_float(L, "model.visual.merger.linear_fc2.weight", 2, H, 16, 0.25, 0.0);
    }
}

/* The layer pattern as config.json writes it. */
static inline void fx_hy_layer_keys(cJSON *c, const fx_opts *o) {
    if (o->layer_types != 1)
        cJSON_AddNumberToObject(c, "full_attention_interval", (double)(o->full_interval > 0 ? o->full_interval : 4));
    if (o->layer_types) {
        cJSON *a = cJSON_AddArrayToObject(c, "layer_types");
        for (int64_t l = 0; l < o->n_layers; l++)
            cJSON_AddItemToArray(a, cJSON_CreateString(fx_full_attn(o, l) ? "full_attention" : "linear_attention"));
    }
}

/* The keys both families' (text) configs share. */
static inline void fx_hy_common_keys(cJSON *c, const fx_opts *o) {
    cJSON_AddBoolToObject(c, "attention_bias", 0);
    cJSON_AddNumberToObject(c, "attention_dropout", 0.0);
    cJSON_AddNumberToObject(c, "head_dim", (double)o->head_dim);
    cJSON_AddStringToObject(c, "hidden_act", "silu");
    cJSON_AddNumberToObject(c, "hidden_size", (double)o->hidden);
    fx_hy_layer_keys(c, o);
    cJSON_AddNumberToObject(c, "linear_conv_kernel_dim", (double)o->conv_kernel);
    cJSON_AddNumberToObject(c, "linear_key_head_dim", (double)o->lin_k_dim);
    cJSON_AddNumberToObject(c, "linear_num_key_heads", (double)o->lin_k_heads);
    cJSON_AddNumberToObject(c, "linear_num_value_heads", (double)o->lin_v_heads);
    cJSON_AddNumberToObject(c, "linear_value_head_dim", (double)o->lin_v_dim);
    cJSON_AddNumberToObject(c, "max_position_embeddings", 262144);
    cJSON_AddNumberToObject(c, "moe_intermediate_size", (double)o->moe_inter);
    cJSON_AddNumberToObject(c, "num_attention_heads", (double)o->n_heads);
    cJSON_AddNumberToObject(c, "num_experts", (double)o->n_experts);
    cJSON_AddNumberToObject(c, "num_experts_per_tok", (double)o->top_k);
    cJSON_AddNumberToObject(c, "num_hidden_layers", (double)o->n_layers);
    cJSON_AddNumberToObject(c, "num_key_value_heads", (double)o->n_kv_heads);
    cJSON_AddNumberToObject(c, "rms_norm_eps", fx_eps(o));
    cJSON_AddNumberToObject(c, "router_aux_loss_coef", 0.001);
    cJSON_AddNumberToObject(c, "shared_expert_intermediate_size", (double)o->shared_inter);
    cJSON_AddBoolToObject(c, "tie_word_embeddings", o->tie);
    cJSON_AddNumberToObject(c, "vocab_size", (double)o->vocab);
    cJSON_AddNumberToObject(c, "bos_token_id", 1);
    cJSON_AddNumberToObject(c, "eos_token_id", 2);
}

/* config.json of Qwen3-Next-80B-A3B's layout (top-level keys, rope_theta and
 * partial_rotary_factor at the top, decoder_sparse_step / mlp_only_layers /
 * norm_topk_prob; no MTP key: vLLM defaults num_nextn_predict_layers to 1). */
static inline cJSON *fx_config_json_qwen3_next(const fx_opts *o) {
    cJSON *c = cJSON_CreateObject(), *a = cJSON_AddArrayToObject(c, "architectures");
    cJSON_AddItemToArray(a, cJSON_CreateString("Qwen3NextForCausalLM"));
    cJSON_AddStringToObject(c, "model_type", "qwen3_next");
    fx_hy_common_keys(c, o);
    cJSON_AddNumberToObject(c, "decoder_sparse_step", 1);
    cJSON_AddNumberToObject(c, "intermediate_size", (double)o->inter);
    a = cJSON_AddArrayToObject(c, "mlp_only_layers");
    if (o->dense_layer >= 0) cJSON_AddItemToArray(a, cJSON_CreateNumber((double)o->dense_layer));
    cJSON_AddBoolToObject(c, "norm_topk_prob", !o->no_renorm);
    cJSON_AddBoolToObject(c, "output_router_logits", 0);
    cJSON_AddNumberToObject(c, "partial_rotary_factor", o->partial_rotary);
    cJSON_AddNullToObject(c, "rope_scaling");
    cJSON_AddNumberToObject(c, "rope_theta", fx_theta(o));
    cJSON_AddStringToObject(c, "torch_dtype", o->float_dtype == MOE8_DT_F32 ? "float32" : "bfloat16");
    cJSON_AddBoolToObject(c, "use_sliding_window", 0);
    return c;
}

/* config.json of Qwen3.5-35B-A3B's layout: the text model's settings under
 * text_config (model_type qwen3_5_moe_text; rope_parameters with rope_theta,
 * partial_rotary_factor and the interleaved M-RoPE sections, which text-only
 * positions make plain RoPE; mtp_num_hidden_layers), a vision_config. */
static inline cJSON *fx_config_json_qwen3_5(const fx_opts *o) {
    cJSON *c = cJSON_CreateObject(), *a = cJSON_AddArrayToObject(c, "architectures");
    cJSON *t, *r, *v;
    const int64_t half = fx_rot_dim(o) / 2;
    cJSON_AddItemToArray(a, cJSON_CreateString("Qwen3_5MoeForConditionalGeneration"));
    cJSON_AddStringToObject(c, "model_type", "qwen3_5_moe");
    cJSON_AddNumberToObject(c, "image_token_id", 248056);
    cJSON_AddNumberToObject(c, "video_token_id", 248057);
    cJSON_AddNumberToObject(c, "vision_start_token_id", 248053);
    cJSON_AddNumberToObject(c, "vision_end_token_id", 248054);
    cJSON_AddBoolToObject(c, "tie_word_embeddings", o->tie);
    cJSON_AddStringToObject(c, "transformers_version", "5.2.0");
    t = cJSON_AddObjectToObject(c, "text_config");
    cJSON_AddStringToObject(t, "model_type", "qwen3_5_moe_text");
    fx_hy_common_keys(t, o);
    cJSON_AddBoolToObject(t, "attn_output_gate", 1);
    cJSON_AddStringToObject(t, "dtype", o->float_dtype == MOE8_DT_F32 ? "float32" : "bfloat16");
    cJSON_AddNumberToObject(t, "mtp_num_hidden_layers", (double)o->n_mtp);
    cJSON_AddBoolToObject(t, "mtp_use_dedicated_embeddings", 0);
    r = cJSON_AddObjectToObject(t, "rope_parameters");
    cJSON_AddBoolToObject(r, "mrope_interleaved", 1);
    a = cJSON_AddArrayToObject(r, "mrope_section");
    cJSON_AddItemToArray(a, cJSON_CreateNumber((double)((half + 2) / 3)));
    cJSON_AddItemToArray(a, cJSON_CreateNumber((double)((half + 1) / 3)));
    cJSON_AddItemToArray(a, cJSON_CreateNumber((double)(half / 3)));
    cJSON_AddStringToObject(r, "rope_type", "default");
    cJSON_AddNumberToObject(r, "rope_theta", fx_theta(o));
    cJSON_AddNumberToObject(r, "partial_rotary_factor", o->partial_rotary);
    v = cJSON_AddObjectToObject(c, "vision_config");
    cJSON_AddStringToObject(v, "model_type", "qwen3_5_moe");
    cJSON_AddNumberToObject(v, "depth", 1);
    cJSON_AddNumberToObject(v, "hidden_size", 16);
    cJSON_AddNumberToObject(v, "num_heads", 2);
    cJSON_AddNumberToObject(v, "out_hidden_size", (double)o->hidden);
    cJSON_AddNumberToObject(v, "patch_size", 16);
    cJSON_AddNumberToObject(v, "spatial_merge_size", 2);
    return c;
}

#endif
