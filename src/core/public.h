/*
 * public.h — internal: every public header, for the library's own files (it
 * implements every level: include/moe8.h for inference and the headers of
 * the other levels). A program includes only the headers it uses.
 */
#ifndef MOE8_PUBLIC_H
#define MOE8_PUBLIC_H

#include "moe8.h"
#include "moe8_bench.h"
#include "moe8_dist.h"
#include "moe8_moe.h"
#include "moe8_safetensors.h"
#include "moe8_server.h"
#include "moe8_tools.h"

#endif
