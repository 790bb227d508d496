#!/usr/bin/env python3
# The peers of benchmarks/bench_bert.cpp on the same all-MiniLM-L6-v2 files and inputs:
# PyTorch eager (transformers' BertModel, its default attention), torch.compile of it, and
# ONNX Runtime on the model exported by torch.onnx (all graph optimisations; also the
# model after onnxruntime.transformers' BERT optimizer, which fuses attention, layer norm
# and GELU), each inference only.
#
#   torch_bert.py --engine torch|compile|ort|ort_fused --case forward|latency|corpus
#                 [--model DIR] [--threads T] [--runs R] [--warmup W] [--bf16]
#                 [--device cpu|cuda] [--random-weights]
#
# The cases are bench_bert's: forward (32 x 128 tokens, ids [CLS], 1000 + (7919 i) % 20000
# ..., [SEP]), latency (1 x 16), corpus (the Ding dictionary's distinct English sentences,
# batch 32, longest first: sentence-transformers' encode for torch; the tokenizers
# library, the session, mean pooling and normalisation for ort). Each forward includes
# the pooling and normalisation, as bench_bert's. --bf16: torch.autocast(device,
# torch.bfloat16) (torch engines only). --device cuda (torch engines, forward and latency):
# on the GPU, TF32 off, each run timed until the GPU's queue is drained, and the peak of
# torch.cuda.max_memory_allocated as peak_gpu_mb. --random-weights: BertModel from
# DIR's config.json alone, randomly initialised, as bench_bert's (timing only). Prints
# one JSON line like bench_bert's.
import argparse
import json
import os
import resource
import sys
import time

import numpy as np


def cpu_model():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "?"


def bench_ids(b, t):
    ids = np.zeros((b, t), dtype=np.int64)
    for bi in range(b):
        for ti in range(t):
            i = bi * t + ti
            ids[bi, ti] = 101 if ti == 0 else 102 if ti == t - 1 else 1000 + (7919 * i) % 20000
    return ids


def case_ids(case):
    """The forward case's (32, 128) ids or the latency case's (1, 16)."""
    return bench_ids(32, 128) if case == "forward" else bench_ids(1, 16)


def timed_runs(forward, ids, mask, args):
    """Milliseconds of each of args.runs calls of forward, after args.warmup untimed ones."""
    times = []
    for i in range(args.warmup + args.runs):
        t0 = time.perf_counter()
        forward(ids, mask)
        if i >= args.warmup:
            times.append(1000 * (time.perf_counter() - t0))
    return times


def corpus_sentences():
    # The sentences bench_bert embeds (Kiln's data::read_ding_corpus), from the file
    # `bench_bert --sentences-out FILE` writes.
    path = os.environ.get("KILN_BERT_CORPUS")
    if not path:
        sys.exit("torch_bert.py: --case corpus needs KILN_BERT_CORPUS, a file of the sentences, one a line "
                 "(bench_bert --sentences-out FILE writes it)")
    with open(path, encoding="utf-8") as f:
        return [l.rstrip("\n") for l in f if l.strip()]


def mean_pool_normalize(hidden, mask):
    m = mask[..., None].astype(hidden.dtype)
    pooled = (hidden * m).sum(1) / np.clip(m.sum(1), 1e-9, None)
    return pooled / np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)


def torch_engine(args):
    import torch
    import transformers
    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    cuda = args.device == "cuda"
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    if args.random_weights:
        model = transformers.BertModel(transformers.BertConfig.from_pretrained(args.model))
    else:
        model = transformers.BertModel.from_pretrained(args.model)
    model.eval()
    model.to(args.device)
    run = model
    if args.engine == "compile":
        run = torch.compile(model)

    def forward(ids, mask):
        with torch.inference_mode(), torch.autocast(args.device, dtype=torch.bfloat16, enabled=args.bf16):
            h = run(input_ids=ids, attention_mask=mask).last_hidden_state
            m = mask.unsqueeze(-1).to(h.dtype)
            pooled = (h * m).sum(1) / torch.clamp(m.sum(1), min=1e-9)
            out = torch.nn.functional.normalize(pooled, p=2, dim=1)
        if cuda:
            torch.cuda.synchronize()
        return out

    if args.case == "corpus":
        import sentence_transformers
        st = sentence_transformers.SentenceTransformer(args.model, device="cpu")
        sentences = corpus_sentences()
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
            st.encode(sentences, batch_size=32)
        return [1000 * (time.perf_counter() - t0)], len(sentences)
    ids = torch.from_numpy(case_ids(args.case)).to(args.device)
    return timed_runs(forward, ids, torch.ones_like(ids), args), ids.shape[0]


def export_onnx(model_dir, fused):
    """The model as ONNX (cached beside the benchmark's temporaries); fused: after ORT's BERT optimizer."""
    import torch
    import transformers
    cache = os.path.join(os.environ.get("TMPDIR", "/tmp"), "kiln_bert_onnx")
    os.makedirs(cache, exist_ok=True)
    plain = os.path.join(cache, "minilm.onnx")
    if not os.path.exists(plain):
        bert = transformers.BertModel.from_pretrained(model_dir)
        bert.eval()

        class Encoder(torch.nn.Module):  # positional inputs, one output: what the exporter traces best
            def __init__(self, m):
                super().__init__()
                self.m = m

            def forward(self, input_ids, attention_mask):
                return self.m(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).last_hidden_state

        ids = torch.from_numpy(bench_ids(2, 8))
        mask = torch.ones_like(ids)
        torch.onnx.export(Encoder(bert), (ids, mask), plain, input_names=["input_ids", "attention_mask"],
                          output_names=["last_hidden_state"],
                          dynamic_axes={"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"},
                                        "last_hidden_state": {0: "batch", 1: "seq"}}, opset_version=17, dynamo=False)
    if not fused:
        return plain
    out = os.path.join(cache, "minilm_fused.onnx")
    if not os.path.exists(out):
        from onnxruntime.transformers import optimizer
        m = optimizer.optimize_model(plain, model_type="bert", num_heads=12, hidden_size=384)
        m.save_model_to_file(out)
    return out


def ort_engine(args):
    import onnxruntime as ort
    path = export_onnx(args.model, args.engine == "ort_fused")
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.intra_op_num_threads = args.threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])

    def forward(ids, mask):
        h = sess.run(["last_hidden_state"], {"input_ids": ids, "attention_mask": mask})[0]
        return mean_pool_normalize(h, mask)

    if args.case == "corpus":
        from tokenizers import Tokenizer
        tok = Tokenizer.from_file(os.path.join(args.model, "tokenizer.json"))
        tok.enable_truncation(256)
        tok.enable_padding()
        sentences = corpus_sentences()
        order = sorted(range(len(sentences)), key=lambda i: -len(sentences[i]))
        t0 = time.perf_counter()
        for s in range(0, len(order), 32):
            encs = tok.encode_batch([sentences[i] for i in order[s:s + 32]])
            ids = np.array([e.ids for e in encs], dtype=np.int64)
            mask = np.array([e.attention_mask for e in encs], dtype=np.int64)
            forward(ids, mask)
        return [1000 * (time.perf_counter() - t0)], len(sentences)
    ids = case_ids(args.case)
    return timed_runs(forward, ids, np.ones_like(ids), args), ids.shape[0]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--engine", choices=["torch", "compile", "ort", "ort_fused"], default="torch")
    p.add_argument("--case", choices=["forward", "latency", "corpus"], default="forward")
    p.add_argument("--model", default=os.path.join(os.environ.get("KILN_MODEL_CACHE", os.path.expanduser(
        "~/.cache/kiln/models")), "all-MiniLM-L6-v2"))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--bf16", action="store_true")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--random-weights", action="store_true")
    args = p.parse_args()
    if args.device == "cuda" and (args.engine.startswith("ort") or args.case == "corpus"):
        p.error("--device cuda times the torch engines' forward and latency cases only")
    if args.random_weights and args.case == "corpus":
        p.error("--random-weights is for the forward and latency cases")
    times, n = (ort_engine if args.engine.startswith("ort") else torch_engine)(args)
    median = sorted(times)[len(times) // 2]
    per_s = n / (median / 1000) if args.case != "corpus" else n / (times[0] / 1000)
    import importlib.metadata as md
    version = md.version("onnxruntime") if args.engine.startswith("ort") else md.version("torch")
    extra = {}
    if args.device == "cuda":
        import torch
        extra = {"gpu": torch.cuda.get_device_name(0),
                 "peak_gpu_mb": round(torch.cuda.max_memory_allocated() / 2**20, 1)}
    print(json.dumps({"engine": args.engine, "version": version, "case": args.case,
                      "precision": "bf16" if args.bf16 else "fp32", "device": args.device,
                      "weights": "random" if args.random_weights else "pretrained", "ms": round(median, 3),
                      "runs_ms": [round(t, 3) for t in times], "sentences_per_s": round(per_s, 1),
                      "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
                      "threads": args.threads, "cpu": cpu_model(), **extra}))


if __name__ == "__main__":
    main()
