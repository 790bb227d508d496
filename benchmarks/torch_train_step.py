#!/usr/bin/python3
# PyTorch's side of bench_train_step: the same Seq2Seq Transformer (nn.Transformer,
# post-norm, ReLU, dropout 0.1, padding and causal masks, CrossEntropy ignoring pad,
# Adam), the same shapes and the same token ids (train_config.h's formula), timed the
# same way. Any PyTorch runs it: PyPI's 2.x in a virtual environment (its own MKL BLAS;
# --compile adds torch.compile), or Debian's python3-torch 1.13 (OpenBLAS):
#
#   venv/bin/python benchmarks/torch_train_step.py --config tiny --threads 2 [--compile]
#   OPENBLAS_CORETYPE=<core> /usr/bin/python3 benchmarks/torch_train_step.py --config tiny --threads 2
#
# --bf16: PyTorch's mixed precision, torch.autocast(<device type>, dtype=torch.bfloat16)
# around the forward pass and the loss (its documented use; backward and Adam run
# outside it on the fp32 master weights), which Kiln's --bf16 autocast is compared with.
#
# --device cuda[:N] (bench_train_step's --device): the model, the ids and the masks on the
# GPU, float32 with TF32 off (torch.backends.cuda.matmul.allow_tf32 and cudnn's, as Kiln's
# cuBLAS calls use plain fp32), the step timed up to loss.item() (which waits for the
# GPU); "peak_gpu_mb" is torch.cuda.max_memory_allocated, the tensors' peak (Kiln's
# peak_tensor_mb), "reserved_gpu_mb" its caching allocator's peak.
#
# --checkpoint-layers (bench_train_step's): every encoder and decoder layer wrapped in
# torch.utils.checkpoint.checkpoint(layer, ..., use_reentrant=False), PyTorch's own
# activation checkpointing, with its default preserve_rng_state.
# --checkpoint-ff (bench_train_step's): only each layer's linear1 -> activation -> dropout
# through torch.utils.checkpoint (the layer's _ff_block replaced by one that does so;
# linear2 and the last dropout outside, as Kiln's Seq2SeqOptions::checkpoint_feed_forward).
#
# --blas cublas|cublaslt (bench_train_step's): torch.backends.cuda.preferred_blas_library.
# --tunable-op (bench_train_step's --blas-tuning): TunableOp on (torch.cuda.tunable.enable
# and tuning_enable): each GEMM problem's fastest implementation timed at its first call,
# in the warm-up steps.
#
# Prints one JSON line like bench_train_step.
import argparse
import json
import math
import os
import resource
import time

import torch
import torch.nn as nn
import torch.utils.checkpoint

# vocab, d_model, heads, layers, d_ff, batch, seq (train_config.h); "seed" is the earlier
# name of "base", still accepted.
CONFIGS = {
    "base": (5000, 512, 8, 6, 2048, 64, 100),
    "small": (1000, 128, 4, 2, 512, 32, 32),
    "tiny": (16, 64, 4, 2, 128, 2, 6),
}
ALIASES = {"seed": "base"}
M64 = (1 << 64) - 1


def token_at(i, j, seq, vocab, salt):
    if j >= seq - (i % 4):
        return 0
    h = (i * 1000003 + j * 7919 + salt * 104729) & M64
    h ^= h >> 13
    h = (h * 0x9E3779B97F4A7C15) & M64
    h ^= h >> 29
    return 1 + h % (vocab - 1)


class Checkpointed(nn.Module):
    """A layer run through torch.utils.checkpoint (non-reentrant)."""

    def __init__(self, layer):
        super().__init__()
        self.layer = layer

    def forward(self, *args, **kwargs):
        return torch.utils.checkpoint.checkpoint(self.layer, *args, use_reentrant=False, **kwargs)

    def __getattr__(self, name):  # nn.TransformerEncoder reads its first layer's self_attn
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self.layer, name)


def checkpoint_layers(transformer):
    for stack in (transformer.encoder.layers, transformer.decoder.layers):
        for i in range(len(stack)):
            stack[i] = Checkpointed(stack[i])


def checkpoint_feed_forward(transformer):
    for stack in (transformer.encoder.layers, transformer.decoder.layers):
        for layer in stack:
            def hidden(x, layer=layer):
                return layer.dropout(layer.activation(layer.linear1(x)))

            # The block's last dropout: dropout2 in an encoder layer, dropout3 in a decoder's.
            last = layer.dropout3 if hasattr(layer, "dropout3") else layer.dropout2

            def ff_block(x, hidden=hidden, layer=layer, last=last):
                return last(layer.linear2(torch.utils.checkpoint.checkpoint(hidden, x, use_reentrant=False)))

            layer._ff_block = ff_block


def ids(batch, seq, vocab, salt):
    return torch.tensor([[token_at(i, j, seq, vocab, salt) for j in range(seq)] for i in range(batch)])


class Seq2Seq(nn.Module):
    def __init__(self, vocab, d, heads, layers, d_ff, max_len):
        super().__init__()
        self.d = d
        self.src_embedding = nn.Embedding(vocab, d, padding_idx=0)
        self.tgt_embedding = nn.Embedding(vocab, d, padding_idx=0)
        pos = torch.arange(max_len).unsqueeze(1)
        div = torch.exp(torch.arange(0, d, 2) * (-math.log(10000.0) / d))
        pe = torch.zeros(max_len, d)
        pe[:, 0::2] = torch.sin(pos * div)
        pe[:, 1::2] = torch.cos(pos * div)
        self.register_buffer("pe", pe)
        self.dropout = nn.Dropout(0.1)
        self.transformer = nn.Transformer(d, heads, layers, layers, d_ff, 0.1, batch_first=True)
        self.generator = nn.Linear(d, vocab)

    def embed(self, table, x):
        return self.dropout(table(x) * math.sqrt(self.d) + self.pe[: x.size(1)])

    def forward(self, src, tgt):
        src_pad, tgt_pad = src.eq(0), tgt.eq(0)
        causal = torch.triu(torch.ones(tgt.size(1), tgt.size(1), dtype=torch.bool, device=tgt.device), 1)
        y = self.transformer(self.embed(self.src_embedding, src), self.embed(self.tgt_embedding, tgt),
                             tgt_mask=causal, src_key_padding_mask=src_pad, tgt_key_padding_mask=tgt_pad,
                             memory_key_padding_mask=src_pad)
        return self.generator(y)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="tiny", choices=[*CONFIGS, *ALIASES], metavar="{base,small,tiny}",
                    help="the configuration (default tiny; seed is another name for base)")
    ap.add_argument("--steps", type=int, default=0)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--compile", action="store_true", help="torch.compile the model (PyTorch 2.x)")
    ap.add_argument("--bf16", action="store_true", help="bf16 autocast around forward and loss")
    ap.add_argument("--device", default="cpu", help="cpu or cuda[:N]")
    ap.add_argument("--checkpoint-layers", action="store_true",
                    help="each encoder and decoder layer through torch.utils.checkpoint")
    ap.add_argument("--checkpoint-ff", action="store_true",
                    help="each layer's linear1, activation and dropout through torch.utils.checkpoint")
    ap.add_argument("--blas", choices=("cublas", "cublaslt"), help="torch.backends.cuda.preferred_blas_library")
    ap.add_argument("--tunable-op", action="store_true", help="TunableOp: GEMMs timed and chosen at first use")
    ap.add_argument("--flush-denormal", action="store_true", help="torch.set_flush_denormal(True) (FTZ and DAZ)")
    a = ap.parse_args()
    if a.flush_denormal and not torch.set_flush_denormal(True):
        raise SystemExit("torch_train_step.py: --flush-denormal: this CPU cannot flush denormals")
    a.config = ALIASES.get(a.config, a.config)
    vocab, d, heads, layers, d_ff, batch, seq = CONFIGS[a.config]
    steps = a.steps or {"base": 3, "small": 20, "tiny": 200}[a.config]
    if a.threads:
        torch.set_num_threads(a.threads)
    device = torch.device(a.device)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.cuda.set_device(device)
        if a.blas:
            torch.backends.cuda.preferred_blas_library(a.blas)
        if a.tunable_op:
            torch.cuda.tunable.enable(True)
            torch.cuda.tunable.tuning_enable(True)
            # As many cuBLASLt candidates as Kiln's --blas-tuning times; results not kept.
            if hasattr(torch.cuda.tunable, "set_cublaslt_requested_algo_count"):
                torch.cuda.tunable.set_cublaslt_requested_algo_count(16)
            torch.cuda.tunable.set_filename(f"/tmp/torch_train_step_tunableop{os.getpid()}.csv")
    torch.manual_seed(0)
    model = Seq2Seq(vocab, d, heads, layers, d_ff, max(seq + 1, 128)).to(device)
    if a.checkpoint_layers:
        checkpoint_layers(model.transformer)
    if a.checkpoint_ff:
        checkpoint_feed_forward(model.transformer)
    model.train()
    fwd = torch.compile(model) if a.compile else model
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    loss_fn = nn.CrossEntropyLoss(ignore_index=0)
    src, tgt_in, labels = (ids(batch, seq, vocab, salt).to(device) for salt in (1, 2, 3))

    def step():
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=a.bf16):
            logits = fwd(src, tgt_in)
            loss = loss_fn(logits.reshape(-1, vocab), labels.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.item()

    for _ in range(a.warmup):
        step()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    ms = []
    loss = 0.0
    for _ in range(steps):
        t0 = time.perf_counter()
        loss = step()
        ms.append((time.perf_counter() - t0) * 1000)
    ms.sort()
    median = ms[len(ms) // 2]
    tokens = batch * seq
    params = sum(p.numel() for p in model.parameters())
    gpu = {}
    if device.type == "cuda":
        gpu = {"device": str(device), "gpu": torch.cuda.get_device_name(device),
               "peak_gpu_mb": round(torch.cuda.max_memory_allocated(device) / 2**20, 1),
               "reserved_gpu_mb": round(torch.cuda.max_memory_reserved(device) / 2**20, 1)}
    print(json.dumps({
        "framework": "torch", "config": a.config, "threads": torch.get_num_threads(), "steps": steps, "compiled": a.compile, "bf16": a.bf16, "flush_denormal": a.flush_denormal,
        "checkpoint_layers": a.checkpoint_layers, "checkpoint_feed_forward": a.checkpoint_ff,
        "blas": a.blas or "default", "tunable_op": a.tunable_op,
        "ms_per_step": round(median, 3), "tokens_per_s": round(tokens / (median / 1000), 1),
        "gflops": round(6 * params * tokens / (median / 1000) / 1e9, 2),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "parameters": params, "loss": round(loss, 4), "torch": torch.__version__, **gpu}))


if __name__ == "__main__":
    main()
