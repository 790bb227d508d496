#!/usr/bin/python3
# llama.cpp's side of benchmarks/llama_compare.sh: the same GGUF file, prompt and counts
# as bench_llama, through PyPI's llama-cpp-python (built from its source distribution on
# this machine: CMAKE_ARGS="-DGGML_NATIVE=ON" pip install --no-binary llama-cpp-python).
# Times are llama.cpp's own (llama_perf_context: prompt eval and eval), so the Python
# around the calls is not counted; greedy picks read the last logits.
#
#   python3 benchmarks/llama_cpp_bench.py [--model FILE.gguf] [--prompt P] [--gen G]
#       [--threads T] [--runs R] [--flash-attn 0|1]
#
# Prints one JSON line like bench_llama's; "peak_rss_mb" is the process's high-water
# resident memory and "python_rss_mb" what the interpreter with llama_cpp imported held
# before the model was loaded (the part that is Python's, not llama.cpp's).
import argparse
import json
import os
import resource
import statistics
import time

import numpy as np


def rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def cpu_model():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.expanduser(
        os.path.join(os.environ.get("KILN_MODEL_CACHE", "~/.cache/kiln/models"),
                     "smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf")))
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--flash-attn", type=int, default=0)
    a = ap.parse_args()

    import llama_cpp

    python_rss = rss_mb()
    t0 = time.perf_counter()
    llm = llama_cpp.Llama(model_path=a.model, n_ctx=a.prompt + a.gen, n_batch=max(a.prompt, 512),
                          n_ubatch=max(a.prompt, 512), n_threads=a.threads, n_threads_batch=a.threads,
                          flash_attn=bool(a.flash_attn), verbose=False)
    load_s = time.perf_counter() - t0
    n_vocab = llm.n_vocab()
    ctx = llm._ctx.ctx
    prompt = [1000 + (7919 * i) % 40000 for i in range(a.prompt)]

    def run_once(gen):
        llm.reset()
        llm._ctx.kv_cache_clear() if hasattr(llm._ctx, "kv_cache_clear") else None
        llama_cpp.llama_perf_context_reset(ctx)
        llm.eval(prompt)
        for _ in range(gen):
            logits = np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(n_vocab,))
            llm.eval([int(np.argmax(logits))])
        p = llama_cpp.llama_perf_context(ctx)
        return p.n_p_eval / (p.t_p_eval_ms / 1000.0), p.n_eval / (p.t_eval_ms / 1000.0)

    run_once(min(a.gen, 8))  # warm-up
    pp, tg = [], []
    for _ in range(a.runs):
        x, y = run_once(a.gen)
        pp.append(x)
        tg.append(y)
    print(json.dumps({"engine": "llama.cpp" + (" fa" if a.flash_attn else ""), "weights": "q",
                      "prompt": a.prompt, "gen": a.gen,
                      "pp_tokens_per_s": round(statistics.median(pp), 2),
                      "tg_tokens_per_s": round(statistics.median(tg), 2),
                      "pp_runs": [round(v, 2) for v in pp], "tg_runs": [round(v, 2) for v in tg],
                      "load_s": round(load_s, 3), "peak_rss_mb": round(rss_mb(), 1),
                      "python_rss_mb": round(python_rss, 1), "threads": a.threads, "cpu": cpu_model()}))


if __name__ == "__main__":
    main()
