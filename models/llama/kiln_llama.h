#pragma once
// The Llama package: configuration, model, KV cache, GGUF loading and saving, generation:
// #include <kiln/llama/kiln_llama.h>.
#include "config.h"
#include "f16_attention.h"
#include "generation.h"
#include "gguf_export.h"
#include "ggml_math.h"
#include "gguf_source.h"
#include "kv_cache.h"
#include "layer_source.h"
#include "llama.h"
