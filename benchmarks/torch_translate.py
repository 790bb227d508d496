#!/usr/bin/env python3
"""PyTorch's side of the German->English translation comparison (examples/translate_de_en).

Kiln's example, run with `--export DIR`, writes the data and the recipe it trains with:
the joint SentencePiece model, config.json, the sentence pairs as ids, the raw validation
and test sentences, the fixed token-budget training batches and the order each epoch
reads them in. This script trains the same Seq2Seq Transformer on the same ids, in the
same batches and order, with the same recipe, for a budget of training time, and
evaluates the way Kiln's Trainer does, so that the two runs' BLEU against training time
can be compared (benchmarks/plot_translate_curves.py draws both):

    /work/venv-torch/bin/python benchmarks/torch_translate.py EXPORT_DIR --minutes 30 --out DIR

--minutes defaults to twice config.json's minutes (Kiln's budget); --autocast bf16 (or
config.json's autocast) runs forward and loss under torch.autocast(bfloat16) on the
training device; --compile trains through torch.compile(model) (eager, with the failure
reported, if it does not compile); --eval-every-seconds overrides config.json's.

--device cuda (or cuda:N; default cpu) trains and evaluates on that GPU: the model and
every batch are moved there, the clock is read after torch.cuda.synchronize(), float32
matrix products run without TF32 (as Kiln's float32), and there is no thread search
(torch's defaults). --throughput-steps N times training only: after --throughput-warmup
W untimed steps (default 5), the next N steps of the exported schedule (the batches and
order of the normal run) are timed, and one JSON line gives the seconds, target tokens/s
(counted as in the normal run) and the last loss; no evaluation, nothing written, and
--out is not needed:

    python3 benchmarks/torch_translate.py EXPORT_DIR --device cuda --throughput-steps 200

The model: one embedding table shared by source and target (scaled by sqrt(d_model)),
sinusoidal positions and dropout, nn.Transformer (post-norm, or pre-norm with
config.json's norm_first; ReLU, batch first, final LayerNorms), a generator Linear with bias; xavier_uniform_ on every matrix, then the
padding row of the embedding zeroed. The recipe: teacher forcing, CrossEntropy ignoring
padding with label smoothing, Adam with the warm-up inverse-square-root schedule (as
LambdaLR), gradient clipping. All of it is read from config.json.

The clock: only the training steps count (the batch tensors made, forward, backward,
clipping, the update), summed with time.perf_counter. Every eval_every_seconds of
training time (after the step that crosses each multiple), at each epoch's end (as
Kiln's Trainer; --no-epoch-evals turns that off) and when the budget runs out, off the
clock: the validation loss (teacher forced, label-smoothed as in training, mean over
tokens) and validation BLEU and chrF of greedy translations. At the end, test BLEU and
chrF of beam-search translations (GNMT length penalty).

Threads (on the CPU): before the clock starts, each split of --threads N into BLAS
threads x torch threads (B x T <= N; MKL_NUM_THREADS / OPENBLAS_NUM_THREADS = B,
OMP_NUM_THREADS and torch.set_num_threads = T, as benchmarks/compare.sh searches for
torch_train_step.py) times a few training steps in a child process; the script then runs
itself again at the fastest split (--split BxT skips the search). With an MKL build of torch (PyPI's),
torch.set_num_threads(T) also sets MKL's count for the calling thread, so B changes
little there; with OpenBLAS it is the BLAS pool's size.

Writes to --out: metrics.csv (one row per evaluation), test.txt (test BLEU and chrF in
sacreBLEU's format, steps, tokens/s, thread split, torch version) and test_hyps.txt (the
test translations); prints one line per evaluation on stderr and a JSON summary on stdout.
"""
import argparse
import csv
import json
import math
import os
import statistics
import subprocess
import sys
import time
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F

# What Kiln's --export writes; all of them are needed.
EXPORT_FILES = ("spm.model", "config.json", "train.ids", "valid.ids", "test.ids", "valid.de", "valid.en",
                "test.de", "test.en", "batches.txt", "order.txt")
CONFIG_KEYS = ("vocab_size", "d_model", "nhead", "num_encoder_layers", "num_decoder_layers", "dim_feedforward",
               "dropout", "activation", "norm_first", "final_norms", "scale_embedding", "share_embeddings",
               "max_len", "pad_id", "bos_id", "eos_id", "label_smoothing", "lr_factor", "warmup_steps", "beta1",
               "beta2", "eps", "weight_decay", "clip_grad_norm", "seed", "max_tokens", "minutes",
               "eval_every_seconds", "valid_decode", "test_beam", "length_penalty", "decode_max_len_a",
               "decode_max_len_b", "init", "autocast")
METRICS_COLUMNS = ("step", "epoch", "train_seconds", "train_loss", "val_loss", "val_bleu", "val_chrf")


def fail(message):
    raise SystemExit(f"torch_translate.py: {message}")


def parse_device(text):
    """--device: cpu, cuda or cuda:N, checked to exist."""
    try:
        device = torch.device(text)
    except (RuntimeError, ValueError):
        fail(f"--device '{text}' must be cpu, cuda or cuda:N")
    if device.type == "cpu":
        return device
    if device.type != "cuda":
        fail(f"--device '{text}' must be cpu, cuda or cuda:N")
    if not torch.cuda.is_available():
        fail(f"--device {text}: this torch ({torch.__version__}) sees no CUDA device")
    if device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    if device.index >= torch.cuda.device_count():
        fail(f"--device {text}: there are {torch.cuda.device_count()} CUDA devices")
    return device


def use_cuda(device):
    """Makes `device` current, with float32 as float32: no TF32 in matrix products or
    convolutions (Kiln's float32 GEMMs are full precision)."""
    torch.cuda.set_device(device)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")


def sync(device):
    """Waits for the work queued on a GPU (nothing on the CPU), so that the clock counts it."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def model_device(model):
    return next(model.parameters()).device


# ---------------------------------------------------------------- the export directory

def check_export(root):
    """Fails naming what is missing: the directory, its files, config.json's keys."""
    if not os.path.isdir(root):
        fail(f"export directory '{root}' does not exist (write it with translate_de_en --export DIR)")
    missing = [f for f in EXPORT_FILES if not os.path.isfile(os.path.join(root, f))]
    if missing:
        fail(f"export directory '{root}' is incomplete: missing {', '.join(missing)}")
    cfg = load_config(root)
    absent = [k for k in CONFIG_KEYS if k not in cfg]
    if absent:
        fail(f"{os.path.join(root, 'config.json')} lacks {', '.join(absent)}")
    return cfg


def load_config(root):
    path = os.path.join(root, "config.json")
    try:
        with open(path) as f:
            cfg = json.load(f)
    except json.JSONDecodeError as e:
        fail(f"{path} is not valid JSON: {e}")
    if not isinstance(cfg, dict):
        fail(f"{path} must hold a JSON object")
    return cfg


def check_config(cfg):
    """Rejects the settings this script does not implement, rather than training another model."""
    if cfg["valid_decode"] != "greedy":
        fail(f"config.json: valid_decode '{cfg['valid_decode']}' is not supported (only greedy)")
    if cfg["init"] not in ("xavier_uniform", "default"):
        fail(f"config.json: init '{cfg['init']}' is not supported (xavier_uniform or default)")
    if cfg["autocast"] not in ("none", "bf16"):
        fail(f"config.json: autocast '{cfg['autocast']}' is not supported (none or bf16)")
    if cfg["activation"] not in ("relu", "gelu"):
        fail(f"config.json: activation '{cfg['activation']}' is not supported (relu or gelu)")
    if cfg["d_model"] % cfg["nhead"]:
        fail(f"config.json: d_model {cfg['d_model']} is not a multiple of nhead {cfg['nhead']}")


def read_pairs(path, cfg, wanted=None):
    """`src ids<TAB>tgt ids` lines -> [(src, tgt)] lists of ints; with `wanted` (a set of
    line numbers) only those lines are parsed (the others are None)."""
    vocab, bos, eos = cfg["vocab_size"], cfg["bos_id"], cfg["eos_id"]
    pairs = []
    with open(path) as f:
        for n, line in enumerate(f):
            if wanted is not None and n not in wanted:
                pairs.append(None)
                continue
            parts = line.rstrip("\n").split("\t")
            if len(parts) != 2:
                fail(f"{path}:{n + 1}: expected 'source ids<TAB>target ids', got {len(parts)} fields")
            try:
                src, tgt = [int(t) for t in parts[0].split()], [int(t) for t in parts[1].split()]
            except ValueError:
                fail(f"{path}:{n + 1}: ids must be integers")
            # An empty source would leave every key of its row masked (NaN attention).
            if not src:
                fail(f"{path}:{n + 1}: empty source")
            if len(tgt) < 2 or tgt[0] != bos or tgt[-1] != eos:
                fail(f"{path}:{n + 1}: the target must start with bos {bos} and end with eos {eos}")
            if min(src + tgt) < 0 or max(src + tgt) >= vocab:
                fail(f"{path}:{n + 1}: an id outside the vocabulary of {vocab}")
            pairs.append((src, tgt))
    return pairs


def read_lines(path):
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def read_index_lines(path, bound, what):
    """Lines of space-separated indices, each in [0, bound)."""
    rows = []
    with open(path) as f:
        for n, line in enumerate(f):
            try:
                row = [int(t) for t in line.split()]
            except ValueError:
                fail(f"{path}:{n + 1}: indices must be integers")
            if not row:
                fail(f"{path}:{n + 1}: empty line")
            if min(row) < 0 or max(row) >= bound:
                fail(f"{path}:{n + 1}: an index outside the {bound} {what}")
            rows.append(row)
    if not rows:
        fail(f"{path} is empty")
    return rows


def count_lines(path):
    with open(path, "rb") as f:
        return sum(1 for _ in f)


def load_schedule(root):
    """batches.txt and order.txt, checked: every epoch reads every batch once."""
    n_train = count_lines(os.path.join(root, "train.ids"))
    batches = read_index_lines(os.path.join(root, "batches.txt"), n_train, "lines of train.ids")
    orders = read_index_lines(os.path.join(root, "order.txt"), len(batches), "lines of batches.txt")
    for e, order in enumerate(orders):
        if sorted(order) != list(range(len(batches))):
            fail(f"order.txt:{e + 1}: epoch {e} does not read each of the {len(batches)} batches exactly once")
    return batches, orders


def check_positions(pairs, cfg):
    """Training pairs (source, target with its start token) must fit config.json's max_len."""
    longest = max(max(len(src), len(tgt) - 1) for src, tgt in pairs)
    if longest > cfg["max_len"]:
        fail(f"train.ids has a sequence of {longest} positions, more than config.json's max_len {cfg['max_len']}")


def load_split(root, name, cfg):
    """valid or test: the id pairs and the raw references, checked to be of one length."""
    pairs = read_pairs(os.path.join(root, f"{name}.ids"), cfg)
    refs = read_lines(os.path.join(root, f"{name}.en"))
    sources = read_lines(os.path.join(root, f"{name}.de"))
    if not (len(pairs) == len(refs) == len(sources)):
        fail(f"{name}.ids, {name}.de and {name}.en differ in length: {len(pairs)}, {len(sources)}, {len(refs)} lines")
    if not pairs:
        fail(f"{name}.ids is empty")
    return pairs, refs


# ---------------------------------------------------------------- the model

def sinusoidal_table(max_len, d):
    """PE[pos, 2i] = sin(pos / 10000^(2i/d)), PE[pos, 2i+1] = cos(...): computed in double
    and rounded once to float32, as Kiln's sinusoidal_table."""
    pos = torch.arange(max_len, dtype=torch.float64).unsqueeze(1)
    freq = torch.exp(-math.log(10000.0) * torch.arange(0, d, 2, dtype=torch.float64) / d)
    pe = torch.zeros(max_len, d, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(pos * freq)
    pe[:, 1::2] = torch.cos(pos * freq)[:, : d // 2]
    return pe.float()


class Seq2Seq(nn.Module):
    """Kiln's Seq2SeqTransformer (models/transformer/seq2seq.cpp) in torch.nn."""

    def __init__(self, cfg):
        super().__init__()
        d, vocab, pad, p = cfg["d_model"], cfg["vocab_size"], cfg["pad_id"], cfg["dropout"]
        self.d_model, self.pad, self.max_len = d, pad, cfg["max_len"]
        self.scale = math.sqrt(d) if cfg["scale_embedding"] else 1.0
        self.src_embedding = nn.Embedding(vocab, d, padding_idx=pad)
        self.tgt_embedding = self.src_embedding if cfg["share_embeddings"] else nn.Embedding(vocab, d, padding_idx=pad)
        self.register_buffer("pe", sinusoidal_table(cfg["max_len"], d), persistent=False)
        # One dropout after the positions, for source and target alike (Kiln's positional
        # encoding module holds it and serves both).
        self.pe_dropout = nn.Dropout(p)
        self.transformer = nn.Transformer(d, cfg["nhead"], cfg["num_encoder_layers"], cfg["num_decoder_layers"],
                                          cfg["dim_feedforward"], p, activation=cfg["activation"], batch_first=True,
                                          norm_first=cfg["norm_first"])
        if not cfg["final_norms"]:
            self.transformer.encoder.norm = None
            self.transformer.decoder.norm = None
        self.generator = nn.Linear(d, vocab)

    def embed(self, table, ids, offset=0):
        end = offset + ids.size(1)
        if end > self.max_len:
            raise ValueError(f"positions {offset}..{end} exceed config.json's max_len {self.max_len}")
        return self.pe_dropout(table(ids) * self.scale + self.pe[offset:end])

    def encode(self, src):
        """src (N, S) -> memory (N, S, d), the source padding mask (N, S)."""
        src_kpm = src.eq(self.pad)
        return self.transformer.encoder(self.embed(self.src_embedding, src), src_key_padding_mask=src_kpm), src_kpm

    def decode(self, tgt_in, memory, src_kpm):
        """tgt_in (N, T) -> logits (N, T, V): causal and padding masks on the target,
        the source's padding mask on the memory."""
        T = tgt_in.size(1)
        causal = torch.triu(torch.ones(T, T, dtype=torch.bool, device=tgt_in.device), 1)
        # tgt_is_causal: the mask is causal by construction, so nn.TransformerDecoder need
        # not compare it with one at each call (a data-dependent branch torch.compile
        # breaks its graph at). With a padding mask the layers still apply the mask itself.
        y = self.transformer.decoder(self.embed(self.tgt_embedding, tgt_in), memory, tgt_mask=causal,
                                     tgt_key_padding_mask=tgt_in.eq(self.pad), memory_key_padding_mask=src_kpm,
                                     tgt_is_causal=True)
        return self.generator(y)

    def forward(self, src, tgt_in):
        memory, src_kpm = self.encode(src)
        return self.decode(tgt_in, memory, src_kpm)


def build_model(cfg):
    torch.manual_seed(cfg["seed"])
    model = Seq2Seq(cfg)
    if cfg["init"] == "xavier_uniform":
        # As the example does: every matrix re-drawn (embedding and generator included;
        # biases as constructed), then the padding row zeroed again, as Kiln's Embedding
        # keeps it (its gradient is never accumulated, so it stays zero).
        for p in model.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)
    with torch.no_grad():
        model.src_embedding.weight[cfg["pad_id"]].zero_()
        model.tgt_embedding.weight[cfg["pad_id"]].zero_()
    return model


# ---------------------------------------------------------------- the recipe

def pad_rows(rows, pad):
    width = max(len(r) for r in rows)
    return torch.tensor([r + [pad] * (width - len(r)) for r in rows], dtype=torch.long)


def make_batch(pairs, indices, pad):
    """The padded (N, S) source and (N, T) target of the examples `indices` (right padding)."""
    return pad_rows([pairs[i][0] for i in indices], pad), pad_rows([pairs[i][1] for i in indices], pad)


def warmup_rate(cfg):
    """Kiln's WarmupInverseSqrtLR with LambdaLR indexing: update k (k = 1, 2, ...) runs
    at LambdaLR step k - 1, read as s = max(k - 1, 1); the rate ignores the base lr (1.0)."""
    factor, d, warmup = cfg["lr_factor"], cfg["d_model"], cfg["warmup_steps"]

    def rate(step):
        s = float(max(step, 1))
        return factor * d ** -0.5 * min(s ** -0.5, s * warmup ** -1.5)
    return rate


def make_optimizer(model, cfg):
    """Adam (L2 weight decay added to the gradient, as Kiln's Adam) and the schedule.
    fused=True is the same update as torch's default for-loop, in one pass over the
    parameters: the fastest Adam PyTorch ships, on the CPU and on CUDA."""
    kwargs = dict(lr=1.0, betas=(cfg["beta1"], cfg["beta2"]), eps=cfg["eps"], weight_decay=cfg["weight_decay"])
    try:
        opt, kind = torch.optim.Adam(model.parameters(), fused=True, **kwargs), "fused"
    except (RuntimeError, TypeError, ValueError):
        opt, kind = torch.optim.Adam(model.parameters(), **kwargs), "for-loop"
    return opt, torch.optim.lr_scheduler.LambdaLR(opt, warmup_rate(cfg)), kind


class Stepper:
    """One training step: what Kiln's Trainer does between its clock readings. The model
    is on its device already (the optimizer's state is made where its parameters are)."""

    def __init__(self, model, forward, cfg, autocast):
        self.model, self.forward, self.cfg = model, forward, cfg
        self.device = model_device(model)
        self.params = list(model.parameters())
        self.opt, self.sched, self.adam = make_optimizer(model, cfg)
        self.loss_fn = nn.CrossEntropyLoss(ignore_index=cfg["pad_id"], label_smoothing=cfg["label_smoothing"])
        self.autocast = autocast

    def batch(self, pairs, indices):
        """The padded source and target of the examples `indices`, on the model's device."""
        src, tgt = make_batch(pairs, indices, self.cfg["pad_id"])
        return src.to(self.device), tgt.to(self.device)

    def loss(self, src, tgt):
        tgt_in, labels = tgt[:, :-1], tgt[:, 1:]
        # Forward and loss only under autocast, as torch.autocast is meant to be used (and
        # Kiln's Trainer does): backward and Adam run outside it on float32 weights.
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.autocast):
            logits = self.forward(src, tgt_in)
            return self.loss_fn(logits.reshape(-1, logits.size(-1)), labels.reshape(-1))

    def step(self, pairs, indices):
        src, tgt = self.batch(pairs, indices)
        self.model.train()
        loss = self.loss(src, tgt)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        if self.cfg["clip_grad_norm"] > 0:
            torch.nn.utils.clip_grad_norm_(self.params, self.cfg["clip_grad_norm"])
        self.opt.step()
        self.sched.step()
        return loss.item()


# ---------------------------------------------------------------- evaluation

def length_batches(lengths, budget, rows_per_item=1):
    """Indices sorted by length, cut into batches of at most `budget` padded tokens
    (rows x longest), each at least one item: little padding, bounded memory."""
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    batches, cur, longest = [], [], 0
    for i in order:
        longer = max(longest, lengths[i])
        if cur and (len(cur) + 1) * rows_per_item * longer > budget:
            batches.append(cur)
            cur, longer = [], lengths[i]
        cur.append(i)
        longest = longer
    if cur:
        batches.append(cur)
    return batches


def validation_loss(model, pairs, cfg, autocast):
    """Kiln's Trainer::evaluate: the label-smoothed loss summed over the batches divided
    by the non-pad labels, in eval mode without gradients (under autocast when training is)."""
    pad, device = cfg["pad_id"], model_device(model)
    total, tokens = 0.0, 0
    lengths = [max(len(s), len(t)) for s, t in pairs]
    with torch.no_grad():
        for batch in length_batches(lengths, cfg["max_tokens"]):
            src, tgt = (t.to(device) for t in make_batch(pairs, batch, pad))
            labels = tgt[:, 1:]
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
                logits = model(src, tgt[:, :-1])
                loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), labels.reshape(-1), ignore_index=pad,
                                       label_smoothing=cfg["label_smoothing"], reduction="sum")
            total += loss.item()
            tokens += int(labels.ne(pad).sum())
    return total / tokens


def max_output_len(src_len, cfg):
    """Generated tokens allowed, the end token included: floor(a * src_len + b), at least
    1, and at most the positions the table has (the decoder reads one per token)."""
    n = math.floor(cfg["decode_max_len_a"] * src_len + cfg["decode_max_len_b"])
    return max(1, min(n, cfg["max_len"]))


class CachedDecoder:
    """The decoder one position at a time, with each layer's keys and values kept (Kiln's
    decode_step with its cache; nn.TransformerDecoder has none, and decoding the whole
    prefix at each step costs length^2). The same layers, weights and arithmetic as
    Seq2Seq.decode, to rounding. Eval mode only: no dropout."""

    def __init__(self, model, memory, src_kpm):
        self.model = model
        self.layers = list(model.transformer.decoder.layers)
        self.heads = self.layers[0].self_attn.num_heads
        self.keep = ~src_kpm[:, None, None, :]  # (N, 1, 1, S): True where a source key is read
        self.cross = [self._kv(layer.multihead_attn, memory) for layer in self.layers]
        self.past = [None] * len(self.layers)
        self.length = 0

    def _heads(self, x):  # (N, L, E) -> (N, H, L, E / H)
        n, length, e = x.shape
        return x.view(n, length, self.heads, e // self.heads).transpose(1, 2)

    def _kv(self, attn, x):
        e = attn.embed_dim
        k, v = F.linear(x, attn.in_proj_weight[e:], attn.in_proj_bias[e:]).chunk(2, dim=-1)
        return self._heads(k), self._heads(v)

    def _attend(self, attn, x, k, v, mask):
        e = attn.embed_dim
        q = self._heads(F.linear(x, attn.in_proj_weight[:e], attn.in_proj_bias[:e]))
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return attn.out_proj(o.transpose(1, 2).reshape(x.shape))

    def _self_attention(self, i, layer, x):
        k, v = self._kv(layer.self_attn, x)
        if self.past[i] is not None:
            k, v = torch.cat([self.past[i][0], k], 2), torch.cat([self.past[i][1], v], 2)
        self.past[i] = (k, v)
        return self._attend(layer.self_attn, x, k, v, None)  # every earlier position is visible

    def step(self, tokens):
        """tokens (N) int64, the newest position of each row -> logits (N, V) float32."""
        m = self.model
        x = m.embed(m.tgt_embedding, tokens[:, None], self.length)
        for i, layer in enumerate(self.layers):
            def ff(h, layer=layer):
                return layer.linear2(layer.activation(layer.linear1(h)))
            cross_k, cross_v = self.cross[i]
            if layer.norm_first:
                x = x + self._self_attention(i, layer, layer.norm1(x))
                x = x + self._attend(layer.multihead_attn, layer.norm2(x), cross_k, cross_v, self.keep)
                x = x + ff(layer.norm3(x))
            else:
                x = layer.norm1(x + self._self_attention(i, layer, x))
                x = layer.norm2(x + self._attend(layer.multihead_attn, x, cross_k, cross_v, self.keep))
                x = layer.norm3(x + ff(x))
        if m.transformer.decoder.norm is not None:
            x = m.transformer.decoder.norm(x)
        self.length += 1
        return m.generator(x[:, 0]).float()

    def select(self, rows):
        """Keeps the rows `rows` (an int64 index, repeats allowed) of every cached tensor."""
        self.keep = self.keep.index_select(0, rows)
        self.cross = [(k.index_select(0, rows), v.index_select(0, rows)) for k, v in self.cross]
        self.past = [None if p is None else (p[0].index_select(0, rows), p[1].index_select(0, rows))
                     for p in self.past]


def forbid_pad(logits, cfg):
    """Padding is never generated (Kiln's forbidden_tokens), unless it is the end token."""
    if cfg["pad_id"] != cfg["eos_id"]:
        logits[:, cfg["pad_id"]] = -math.inf
    return logits


def greedy_decode(model, sources, cfg):
    """Kiln's greedy_decode, batched: at each step the most likely token (the lowest id
    among equals), until the end token or the sentence's max_output_len. Returns each
    sentence's tokens before the end token. Rows that finish leave the batch."""
    out = [None] * len(sources)
    bos, eos, pad = cfg["bos_id"], cfg["eos_id"], cfg["pad_id"]
    device = model_device(model)
    with torch.no_grad():
        for batch in length_batches([len(s) for s in sources], cfg["max_tokens"]):
            memory, src_kpm = model.encode(pad_rows([sources[i] for i in batch], pad).to(device))
            dec = CachedDecoder(model, memory, src_kpm)
            limits = [max_output_len(len(sources[i]), cfg) for i in batch]
            rows = list(range(len(batch)))  # the batch positions still decoding, in row order
            hyps = [[] for _ in batch]
            tokens = torch.full((len(batch),), bos, dtype=torch.long, device=device)
            for step in range(max(limits)):
                best = forbid_pad(dec.step(tokens), cfg).argmax(-1).tolist()
                going = []
                for r, b in enumerate(rows):
                    if best[r] == eos:
                        continue
                    hyps[b].append(best[r])
                    if step + 1 < limits[b]:
                        going.append(r)
                if not going:
                    break
                if len(going) < len(rows):
                    index = torch.tensor(going, dtype=torch.long, device=device)
                    dec.select(index)
                    tokens = torch.tensor(best, dtype=torch.long, device=device).index_select(0, index)
                else:
                    tokens = torch.tensor(best, dtype=torch.long, device=device)
                rows = [rows[r] for r in going]
            for b, i in enumerate(batch):
                out[i] = hyps[b]
    return out


def ranked_candidates(totals, k):
    """The k best (beam, token) extensions of each row of totals (A, K*V): values and flat
    indices, best first, equal totals by the lower index (Kiln's partial_sort comparator).
    topk's order among equal values is unspecified, so its k are re-sorted by (total desc,
    index asc), and a row whose k-th total is shared by candidates that topk left out is
    ranked by a full stable sort."""
    k = min(k, totals.size(1))
    vals, idx = torch.topk(totals, k, dim=1)
    by_index = torch.argsort(idx, dim=1)
    vals, idx = vals.gather(1, by_index), idx.gather(1, by_index)
    by_total = torch.sort(vals, dim=1, descending=True, stable=True).indices
    vals, idx = vals.gather(1, by_total), idx.gather(1, by_total)
    kth = vals[:, -1:]
    straddling = (totals == kth).sum(1) > (vals == kth).sum(1)
    for r in straddling.nonzero().flatten().tolist():
        v, i = torch.sort(totals[r], descending=True, stable=True)
        vals[r], idx[r] = v[:k], i[:k]
    return vals.tolist(), idx.tolist()


def length_normalised(log_prob, length, alpha):
    """GNMT: log P / ((5 + length) / 6)^alpha."""
    return log_prob / ((5.0 + length) / 6.0) ** alpha


def advance_beams(live, finished, vals, idx, K, V, eos, alpha):
    """One step of one sentence (Kiln's Beams::advance): the 2K best extensions in order;
    an end token among the first K finishes its hypothesis, the others refill up to K
    live beams. live: [(tokens, log_prob, score)]. Returns the new live beams and, for
    each, the beam it extends; no beams when nothing extends (the old ones then stay)."""
    nxt, origin = [], []
    for r, (total, c) in enumerate(zip(vals, idx)):
        if len(nxt) >= K:
            break
        if not math.isfinite(total):  # only forbidden tokens (padding) are left
            break
        beam, token = divmod(c, V)
        tokens = live[beam][0]
        if token == eos:
            if r < K:  # only an end among the K best counts
                finished.append((tokens, total, length_normalised(total, len(tokens) + 1, alpha)))
            continue
        nxt.append((tokens + [token], total, length_normalised(total, len(tokens) + 1, alpha)))
        origin.append(beam)
    return nxt, origin


def beam_search(model, sources, cfg, K, alpha):
    """Kiln's beam_search_batch: every unfinished sentence's K beam rows through the
    decoder together (rows of beams not yet there hold log P = -inf), a sentence leaving
    once it has K finished hypotheses, no live beam, or its max_output_len steps. Its
    answer: the best-scoring finished hypothesis (the earliest found among equals), or
    the best live one when none finished. Returns each sentence's tokens."""
    out = [None] * len(sources)
    bos, eos, pad = cfg["bos_id"], cfg["eos_id"], cfg["pad_id"]
    device = model_device(model)
    with torch.no_grad():
        for batch in length_batches([len(s) for s in sources], cfg["max_tokens"], rows_per_item=K):
            n = len(batch)
            memory, src_kpm = model.encode(pad_rows([sources[i] for i in batch], pad).to(device))
            # The cross-attention's keys and values made once per sentence, then repeated K times.
            dec = CachedDecoder(model, memory, src_kpm)
            dec.select(torch.arange(n, device=device).repeat_interleave(K))
            limits = [max_output_len(len(sources[i]), cfg) for i in batch]
            live = [[([], 0.0, 0.0)] for _ in range(n)]
            finished = [[] for _ in range(n)]
            active = list(range(n))
            tokens = torch.full((n * K,), bos, dtype=torch.long, device=device)
            beam_lp = torch.full((n, K), -math.inf, dtype=torch.float64, device=device)
            beam_lp[:, 0] = 0.0
            for step in range(max(limits)):
                logp = torch.log_softmax(forbid_pad(dec.step(tokens), cfg).double(), -1)  # (A*K, V)
                V = logp.size(1)
                totals = (beam_lp.reshape(-1, 1) + logp).reshape(len(active), K * V)
                vals, idx = ranked_candidates(totals, 2 * K)
                keep, next_tokens, next_lp, still = [], [], [], []
                for a, s in enumerate(active):
                    nxt, origin = advance_beams(live[s], finished[s], vals[a], idx[a], K, V, eos, alpha)
                    if nxt:
                        live[s] = nxt
                    if not nxt or len(finished[s]) >= K or step + 1 >= limits[s]:
                        continue
                    still.append(s)
                    # K rows per sentence: its beams, then copies of its first row (log P -inf).
                    keep += [a * K + o for o in origin] + [a * K] * (K - len(nxt))
                    next_tokens += [h[0][-1] for h in nxt] + [pad] * (K - len(nxt))
                    next_lp.append([h[1] for h in nxt] + [-math.inf] * (K - len(nxt)))
                active = still
                if not active:
                    break
                dec.select(torch.tensor(keep, dtype=torch.long, device=device))
                tokens = torch.tensor(next_tokens, dtype=torch.long, device=device)
                beam_lp = torch.tensor(next_lp, dtype=torch.float64, device=device)
            for b, i in enumerate(batch):
                pool = finished[b] or live[b]
                out[i] = sorted(pool, key=lambda h: -h[2])[0][0]  # stable: the earliest among equals
    return out


def score(sp, hyp_ids, refs):
    """Subwords to text, then sacreBLEU's corpus BLEU and chrF at their defaults (13a
    tokenisation, exp smoothing, cased: what sacrebleu.corpus_bleu and corpus_chrf do),
    with the metrics' signatures."""
    from sacrebleu.metrics import BLEU, CHRF
    hyps = [sp.decode(ids) for ids in hyp_ids]
    bleu, chrf = BLEU(), CHRF()
    return hyps, bleu.corpus_score(hyps, [refs]), chrf.corpus_score(hyps, [refs]), (bleu.get_signature(),
                                                                                    chrf.get_signature())


# ---------------------------------------------------------------- threads

def thread_splits(n):
    """Every BLAS x torch split that fits n threads, in compare.sh's order."""
    return [(b, t) for b in range(1, n + 1) for t in range(1, n + 1) if b * t <= n]


def split_env(b, t):
    env = dict(os.environ)
    env.update(MKL_NUM_THREADS=str(b), OPENBLAS_NUM_THREADS=str(b), OMP_NUM_THREADS=str(t))
    return env


def probe(args, cfg):
    """(Child process, at the split its environment sets.) Times --probe-steps training
    steps of a fresh model on epoch 0's first batches, after one untimed step; prints the
    median ms per step as JSON."""
    batches, orders = load_schedule(args.export)
    chosen = [batches[b] for b in orders[0][: args.probe_steps + 1]]
    pairs = read_pairs(os.path.join(args.export, "train.ids"), cfg, wanted={i for b in chosen for i in b})
    model = build_model(cfg)
    stepper = Stepper(model, model, cfg, args.autocast == "bf16")
    ms = []
    for k, batch in enumerate(chosen):
        t0 = time.perf_counter()
        stepper.step(pairs, batch)
        if k:
            ms.append((time.perf_counter() - t0) * 1000)
    print(json.dumps({"ms_per_step": statistics.median(ms) if ms else 0.0}))


def choose_split(args):
    """Each split timed in a child process (the BLAS libraries read their thread counts
    from the environment once, at load): the fastest (the first among equals)."""
    splits = thread_splits(args.threads)
    if len(splits) == 1:
        return splits[0]
    best = None
    for b, t in splits:
        cmd = [sys.executable, os.path.abspath(__file__), *sys.argv[1:], "--probe", "--split", f"{b}x{t}"]
        r = subprocess.run(cmd, env=split_env(b, t), capture_output=True, text=True)
        if r.returncode != 0:
            sys.stderr.write(r.stderr)
            fail(f"timing the thread split {b}x{t} failed (exit {r.returncode})")
        ms = json.loads(r.stdout.strip().splitlines()[-1])["ms_per_step"]
        print(f"thread split {b}x{t} (BLAS x torch): {ms:.1f} ms/step", file=sys.stderr, flush=True)
        if best is None or ms < best[2]:
            best = (b, t, ms)
    return best[0], best[1]


def parse_split(text):
    try:
        b, t = (int(x) for x in text.lower().split("x"))
    except ValueError:
        fail(f"--split '{text}' must be BxT (BLAS threads x torch threads), e.g. 1x2")
    if b < 1 or t < 1:
        fail(f"--split '{text}': thread counts must be positive")
    return b, t


# ---------------------------------------------------------------- the run

class MetricsCsv:
    def __init__(self, path):
        self.file = open(path, "w", newline="")
        self.writer = csv.writer(self.file)
        self.writer.writerow(METRICS_COLUMNS)
        self.file.flush()

    def write(self, row):
        self.writer.writerow([row[c] for c in METRICS_COLUMNS])
        self.file.flush()  # partial runs keep what they evaluated


def compile_model(model, stepper, pairs, first_batch):
    """Trains through torch.compile(model), compiled off the clock by one forward and
    backward on the first batch (no update; the RNG restored, so the run draws as it
    would without it); eager if compiling fails. Returns a note for the report."""
    try:
        cuda = stepper.device.type == "cuda"
        rng = torch.get_rng_state()
        cuda_rng = torch.cuda.get_rng_state(stepper.device) if cuda else None  # dropout's, on a GPU
        stepper.forward = torch.compile(model, dynamic=True)
        src, tgt = stepper.batch(pairs, first_batch)
        model.train()
        stepper.loss(src, tgt).backward()
        stepper.opt.zero_grad(set_to_none=True)
        torch.set_rng_state(rng)
        if cuda:
            torch.cuda.set_rng_state(cuda_rng, stepper.device)
        return "compiled"
    except Exception as e:  # any failure of the compiler: report it, train eagerly
        stepper.forward = model
        stepper.opt.zero_grad(set_to_none=True)
        note = f"compile failed ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}); eager"
        print(f"torch.compile: {note}", file=sys.stderr, flush=True)
        return note


class Data:
    """Everything the run reads from the export directory, checked."""

    def __init__(self, root, cfg):
        import sentencepiece as spm
        self.batches, self.orders = load_schedule(root)
        self.train = read_pairs(os.path.join(root, "train.ids"), cfg)
        self.valid, self.valid_refs = load_split(root, "valid", cfg)
        self.test, self.test_refs = load_split(root, "test", cfg)
        self.sp = spm.SentencePieceProcessor(model_file=os.path.join(root, "spm.model"))
        if self.sp.get_piece_size() != cfg["vocab_size"]:
            fail(f"spm.model has {self.sp.get_piece_size()} pieces but config.json's vocab_size is "
                 f"{cfg['vocab_size']}")
        check_positions(self.train, cfg)


def evaluate(model, data, cfg, autocast):
    """The validation loss, BLEU and chrF, in eval mode; the model is left in train mode."""
    model.eval()
    try:
        val_loss = validation_loss(model, data.valid, cfg, autocast)
        # Decoding in float32: Kiln's Trainer calls eval_metrics outside its autocast.
        hyp_ids = greedy_decode(model, [src for src, _ in data.valid], cfg)
        _, bleu, chrf, _ = score(data.sp, hyp_ids, data.valid_refs)
    finally:
        model.train()
    return val_loss, bleu.score, chrf.score


class Run:
    """Where training stands: steps, epochs, the clock, tokens, the last evaluation."""

    def __init__(self):
        self.step, self.epoch, self.seconds, self.tokens = 0, 0, 0.0, 0
        self.losses = []  # the step losses since the previous evaluation
        self.last = None  # the last evaluation's metrics row


def record_evaluation(run, model, data, cfg, autocast, metrics):
    t0 = time.perf_counter()
    val_loss, bleu, chrf = evaluate(model, data, cfg, autocast)
    run.last = dict(step=run.step, epoch=run.epoch + 1, train_seconds=round(run.seconds, 3),
                    train_loss=round(sum(run.losses) / len(run.losses), 6), val_loss=round(val_loss, 6),
                    val_bleu=round(bleu, 4), val_chrf=round(chrf, 4))
    metrics.write(run.last)
    print(f"step {run.step}  epoch {run.epoch + 1}  {run.seconds:.1f}s trained  "
          f"train loss {run.last['train_loss']:.4f}  val loss {val_loss:.4f}  bleu {bleu:.2f}  chrf {chrf:.2f}  "
          f"({time.perf_counter() - t0:.1f}s to evaluate)", file=sys.stderr, flush=True)
    run.losses = []


def target_tokens(pairs, indices):
    """The non-pad labels of a batch (each target but its first token): what tokens/s counts."""
    return sum(len(pairs[i][1]) - 1 for i in indices)


def timed_step(stepper, pairs, indices):
    """One training step and the seconds it took, the GPU's queued work included."""
    sync(stepper.device)
    t0 = time.perf_counter()
    loss = stepper.step(pairs, indices)
    sync(stepper.device)
    return loss, time.perf_counter() - t0


def train_loop(args, cfg, data, model, stepper, metrics):
    """Kiln's Trainer::fit under a time budget: the epochs' batches in order.txt's order,
    only the steps on the clock; an evaluation after the step that crosses each multiple
    of eval_every_seconds, after the step where the budget ends, and at epoch ends."""
    autocast = args.autocast == "bf16"
    budget, every = args.minutes * 60.0, args.eval_every_seconds
    next_eval = every if every > 0 else math.inf
    run = Run()
    out_of_time = budget <= 0
    while not out_of_time:
        order = data.orders[run.epoch % len(data.orders)]  # after the last listed epoch, epoch 0's again
        for pos, b in enumerate(order):
            loss, seconds = timed_step(stepper, data.train, data.batches[b])
            run.seconds += seconds
            run.step += 1
            run.losses.append(loss)
            run.tokens += target_tokens(data.train, data.batches[b])
            if not math.isfinite(loss):
                fail(f"the loss is {loss} at step {run.step}")
            out_of_time = run.seconds >= budget
            epoch_end = pos == len(order) - 1
            if run.seconds >= next_eval or out_of_time or (epoch_end and not args.no_epoch_evals):
                while next_eval <= run.seconds:
                    next_eval += every
                record_evaluation(run, model, data, cfg, autocast, metrics)
            if out_of_time:
                break
        run.epoch += 1
    return run


def threads_text(split):
    """The thread split for people to read: BxT on the CPU, none chosen on CUDA."""
    return f"{split[0]}x{split[1]} (BLAS x torch)" if split else "torch's defaults"


def report(args, cfg, data, model, run, split, notes):
    """Test BLEU and chrF of beam search; test.txt, test_hyps.txt and the JSON summary."""
    model.eval()
    t0 = time.perf_counter()
    hyp_ids = beam_search(model, [src for src, _ in data.test], cfg, cfg["test_beam"], cfg["length_penalty"])
    hyps, bleu, chrf, signatures = score(data.sp, hyp_ids, data.test_refs)
    print(f"test: beam {cfg['test_beam']}, {time.perf_counter() - t0:.1f}s: {bleu}", file=sys.stderr, flush=True)
    tokens_per_s = run.tokens / run.seconds if run.seconds > 0 else 0.0
    threads = f"{split[0]}x{split[1]}" if split else None
    with open(os.path.join(args.out, "test_hyps.txt"), "w", encoding="utf-8") as f:
        f.writelines(h + "\n" for h in hyps)
    with open(os.path.join(args.out, "test.txt"), "w") as f:
        f.write(f"{bleu}\n{chrf}\nsignatures: {signatures[0]}  {signatures[1]}\n")
        f.write(f"beam {cfg['test_beam']}, length penalty {cfg['length_penalty']}\n")
        f.write(f"steps {run.step}\ntrain_seconds {run.seconds:.3f}\ntokens_per_s {tokens_per_s:.1f}\n")
        f.write(f"device {args.device}\nthreads {threads_text(split)}\ntorch {torch.__version__}\n")
        f.write(f"autocast {args.autocast}\nmodel {notes['model']}\nadam {notes['adam']}\n")
    print(json.dumps({"framework": "pytorch", "torch": torch.__version__, "device": str(args.device),
                      "threads": threads, "steps": run.step,
                      "train_seconds": round(run.seconds, 3),
                      "final_val_bleu": run.last["val_bleu"] if run.last else None,
                      "test_bleu": round(bleu.score, 4), "test_chrf": round(chrf.score, 4),
                      "tokens_per_s": round(tokens_per_s, 1), "autocast": args.autocast,
                      "compiled": notes["model"] == "compiled"}))


def train(args, cfg, split):
    data = Data(args.export, cfg)
    autocast = args.autocast == "bf16"
    if autocast:
        # nn.TransformerEncoderLayer's inference fast path (eval mode, no grad) does not
        # follow autocast: it fails on the bfloat16 activations. The standard path does.
        torch.backends.mha.set_fastpath_enabled(False)
    model = build_model(cfg).to(args.device)
    stepper = Stepper(model, model, cfg, autocast)
    first_batch = data.batches[data.orders[0][0]]
    notes = {"model": compile_model(model, stepper, data.train, first_batch) if args.compile else "eager",
             "adam": stepper.adam}
    os.makedirs(args.out, exist_ok=True)
    metrics = MetricsCsv(os.path.join(args.out, "metrics.csv"))
    n_params = sum(p.numel() for p in model.parameters())
    print(f"torch {torch.__version__}, {args.device}, threads {threads_text(split)}, {n_params} parameters, "
          f"{len(data.batches)} batches per epoch, budget {args.minutes:g} min, autocast {args.autocast}, "
          f"{notes['model']}, Adam {notes['adam']}", file=sys.stderr, flush=True)
    run = train_loop(args, cfg, data, model, stepper, metrics)
    report(args, cfg, data, model, run, split, notes)


def scheduled_batches(orders, count):
    """The first `count` steps' batches (indices into batches.txt), read as train_loop reads them."""
    out, epoch = [], 0
    while len(out) < count:
        out += orders[epoch % len(orders)][: count - len(out)]
        epoch += 1
    return out


def throughput(args, cfg, split):
    """--throughput-steps: a fresh model trains --throughput-warmup steps off the clock,
    then --throughput-steps on it, the schedule's first batches in train_loop's order;
    the clock and the tokens as train_loop's. Prints one JSON line; writes nothing."""
    warmup, steps = args.throughput_warmup, args.throughput_steps
    batches, orders = load_schedule(args.export)
    chosen = [batches[b] for b in scheduled_batches(orders, warmup + steps)]
    pairs = read_pairs(os.path.join(args.export, "train.ids"), cfg, wanted={i for b in chosen for i in b})
    check_positions([pairs[i] for b in chosen for i in b], cfg)
    autocast = args.autocast == "bf16"
    model = build_model(cfg).to(args.device)
    stepper = Stepper(model, model, cfg, autocast)
    compiled = compile_model(model, stepper, pairs, chosen[0]) if args.compile else "eager"
    n_params = sum(p.numel() for p in model.parameters())
    print(f"torch {torch.__version__}, {args.device}, threads {threads_text(split)}, "
          f"{n_params} parameters, {warmup} warm-up + {steps} timed steps, autocast {args.autocast}, {compiled}, "
          f"Adam {stepper.adam}", file=sys.stderr, flush=True)
    seconds, tokens = 0.0, 0
    for k, indices in enumerate(chosen):
        loss, step_seconds = timed_step(stepper, pairs, indices)
        if not math.isfinite(loss):
            fail(f"the loss is {loss} at step {k + 1}")
        if k >= warmup:
            seconds += step_seconds
            tokens += target_tokens(pairs, indices)
    print(json.dumps({"framework": "pytorch", "torch": torch.__version__, "device": str(args.device), "steps": steps,
                      "seconds": round(seconds, 4),
                      "target_tokens_per_s": round(tokens / seconds, 1) if seconds > 0 else 0.0,
                      "loss": round(loss, 6), "autocast": args.autocast}))


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("export", help="the directory translate_de_en --export wrote")
    ap.add_argument("--out", help="where metrics.csv, test.txt and test_hyps.txt go (required, except with "
                                   "--throughput-steps, which writes nothing)")
    ap.add_argument("--minutes", type=float, help="training-time budget (default: twice config.json's minutes)")
    ap.add_argument("--eval-every-seconds", type=float,
                    help="training seconds between evaluations (default: config.json's; 0: epoch ends and the end)")
    ap.add_argument("--no-epoch-evals", action="store_true",
                    help="no evaluation at epoch ends (Kiln's Trainer makes one), only timed ones and the last")
    ap.add_argument("--device", default="cpu",
                    help="cpu, cuda or cuda:N (default cpu); on CUDA no thread search, and no TF32")
    ap.add_argument("--throughput-steps", type=int,
                    help="only time this many training steps (after the warm-up) and print one JSON line")
    ap.add_argument("--throughput-warmup", type=int, default=5,
                    help="untimed steps before the timed ones of --throughput-steps (default 5)")
    ap.add_argument("--threads", type=int, default=2,
                    help="CPU threads to split between BLAS and torch (default 2)")
    ap.add_argument("--split", help="BxT: BLAS threads x torch threads, skipping the search (CPU only)")
    ap.add_argument("--probe-steps", type=int, default=4, help="steps timed per thread split in the search")
    ap.add_argument("--autocast", choices=("none", "bf16"), help="default: config.json's")
    ap.add_argument("--compile", action="store_true", help="train with torch.compile(model) (eager if it fails)")
    ap.add_argument("--probe", action="store_true", help=argparse.SUPPRESS)  # the split search's child
    return ap.parse_args(argv)


def main():
    args = parse_args(sys.argv[1:])
    cfg = check_export(args.export)
    check_config(cfg)
    args.autocast = args.autocast or cfg["autocast"]
    args.minutes = 2 * cfg["minutes"] if args.minutes is None else args.minutes
    args.eval_every_seconds = cfg["eval_every_seconds"] if args.eval_every_seconds is None else args.eval_every_seconds
    if args.threads < 1 or args.probe_steps < 1:
        fail("--threads and --probe-steps must be at least 1")
    if args.throughput_steps is not None and (args.throughput_steps < 1 or args.throughput_warmup < 0):
        fail("--throughput-steps must be at least 1 and --throughput-warmup at least 0")
    if args.out is None and args.throughput_steps is None:
        fail("--out is required (except with --throughput-steps)")
    args.device = parse_device(args.device)
    # nn.TransformerEncoder's eval-mode fast path warns about nested tensors being a prototype.
    warnings.filterwarnings("ignore", message=".*nested tensors.*")
    if args.device.type == "cuda":
        if args.split is not None or args.probe:
            fail("--split is for the CPU: on CUDA, torch keeps its default threads")
        use_cuda(args.device)
        if args.throughput_steps is not None:
            throughput(args, cfg, None)
        else:
            train(args, cfg, None)
        return
    if args.split is None:
        b, t = choose_split(args)
        # Run again at that split: the BLAS thread count is read from the environment at load.
        argv = [sys.executable, os.path.abspath(__file__), *sys.argv[1:], "--split", f"{b}x{t}"]
        sys.stdout.flush()
        sys.stderr.flush()
        os.execve(sys.executable, argv, split_env(b, t))
    b, t = parse_split(args.split)
    torch.set_num_threads(t)
    if args.probe:
        probe(args, cfg)
    elif args.throughput_steps is not None:
        throughput(args, cfg, (b, t))
    else:
        train(args, cfg, (b, t))


if __name__ == "__main__":
    main()
