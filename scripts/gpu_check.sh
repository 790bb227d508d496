#!/usr/bin/env bash
# Kiln's CUDA backend on a machine with an NVIDIA GPU, in one command:
#
#   bash scripts/gpu_check.sh [--prebuilt TARBALL] [--out DIR] [--only STAGES]
#
# 1. Builds Kiln there (meson, -Dcuda=enabled -Dgpu_arch=sm_<the GPU's>, no oneDNN/MPI),
#    unless --prebuilt gives a tree packed by scripts/gpu_pack.sh on another machine with
#    the same CUDA major version (it carries its own OpenBLAS/oneTBB runtime libraries).
#    A machine without OpenBLAS, oneTBB or doctest (a CUDA image with no apt) gets them
#    from Debian 12's .deb files in .gpu-debs/ (scripts/gpu_fetch_debs.sh downloads them
#    on a Debian machine), unpacked into a private prefix (/tmp/kiln-prefix), never into /.
# 2. tests: every test program of the suite (test_cuda must run, not skip), and
#    translate_toy trained on the GPU.
# 3. sanitize: compute-sanitizer memcheck, racecheck and initcheck over test_cuda, one
#    process per test case, in parallel; 0 errors required (KILN_SANITIZE_TOOLS picks
#    tools, KILN_SANITIZE_TIMEOUT caps a process's seconds).
# 4. bench: bench_train_step against benchmarks/torch_train_step.py on the same GPU, small
#    and base, float32 (TF32 off on both sides) and bf16 autocast, with peak GPU memory,
#    alternating KILN_BENCH_ROUNDS times (default 1; PyTorch's step varies 30-50% between
#    runs on an H200, so 3 or more make a ratio firmer) and the medians' ratio, each also
#    as a row of the table at the top of benchmarks/RESULTS.md ("row: | ... |"); the base
#    step once more with --recompute off (the norms' outputs kept: its time and memory
#    cost), once with --blas cublas (unbatched products on cuBLAS, a linear's bias
#    broadcast first; the default is cuBLASLt with it in the epilogue), once on both sides with each GEMM's algorithm timed among
#    cuBLASLt's candidates (Kiln's --blas-tuning, PyTorch's TunableOp), once with
#    KILN_CUDA_HEAD_COPIES=1 (attention's heads
#    copied head-major around its products, the earlier path), once on both sides with every layer
#    checkpointed (--checkpoint-layers), once with only the feed-forward hidden layers
#    checkpointed (--checkpoint-ff; under bf16 autocast Kiln's default, so its bf16 step
#    runs once more with them kept, --no-checkpoint-ff), and Kiln's once with the generator and loss as
#    linear_cross_entropy (--fused-loss);
#    bench_attention at 1024 and 4096 tokens on the tiled and the materialising
#    kernels.
#
# 5. translate: the real German->English translator's training throughput on the GPU,
#    Kiln's translate_de_en --device cuda:0 (KILN_TRANSLATE_SECONDS of training, default 30)
#    against benchmarks/torch_translate.py --device cuda --throughput-steps (the same ids,
#    batches and recipe, exported on the CPU machine), float32 (TF32 off) and bf16
#    autocast, with the ops Kiln's run staged through host memory (KILN_LOG_HOST_STAGED).
#    Needs .gpu/de-en.xz (Debian's trans-de-en, xz), .gpu/spm.model and
#    .gpu/tr-export.tar.xz (translate_de_en --export, made with that spm.model).
#
# 6. bert: all-MiniLM-L6-v2's forward (32 x 128 tokens) on the GPU, bench_bert --device
#    cuda:0 against transformers' BertModel (benchmarks/torch_bert.py --device cuda), float32
#    (TF32 off) and bf16 autocast, with peak GPU memory and the ops Kiln's forward staged
#    through host memory (KILN_LOG_HOST_STAGED); both built from the model's
#    config.json with random weights (the weights do not travel: gpu_pack.sh packs the
#    config alone, or .gpu/minilm/config.json).
#
# 7. profile (only when asked: --only profile): one base step, fp32 and bf16, under Nsight
#    Compute, its kernels' GPU time summed per kernel (scripts/gpu_kernel_times.py).
#
# --only tests,sanitize,bench,translate,bert picks stages (the build or unpacking always runs). Logs
# go to --out (default gpu_check_out/); the summary is printed last. Exit status 0 only
# when every stage run passed.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
prebuilt="" out="$ROOT/gpu_check_out" only="tests,sanitize,bench,translate,bert"
while [ $# -gt 0 ]; do
  case "$1" in
    --prebuilt) prebuilt=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    *) echo "gpu_check.sh: unknown argument '$1' (expected --prebuilt TARBALL, --out DIR, --only STAGES)" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
summary="$out/summary.txt"
: >"$summary"
note() { echo "$*" | tee -a "$summary"; }
status=0
fail() { note "FAIL: $*"; status=1; }
stage() { [[ ",$only," == *",$1,"* ]]; }
# A JSON line's number field $2; the median of numbers.
num() { echo "$1" | grep -o "\"$2\": [0-9.]*" | grep -o '[0-9.]*$'; }
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

command -v nvidia-smi >/dev/null || { echo "gpu_check.sh: nvidia-smi not found: is this a GPU machine?" >&2; exit 2; }
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | sed 's/^/gpu: /' | tee -a "$summary"
nvcc_version=$(nvcc --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p')
note "nvcc: ${nvcc_version:-none}; host: $(nproc) cores"
cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)

# Debian's runtime libraries (and, for a build, headers) in a private prefix.
prefix=/tmp/kiln-prefix
use_debs() {
  [ -d "$ROOT/.gpu-debs" ] || { echo "gpu_check.sh: no .gpu-debs/: run scripts/gpu_fetch_debs.sh on Debian 12 first" >&2; exit 2; }
  mkdir -p "$prefix"
  for f in "$ROOT"/.gpu-debs/*.deb; do dpkg-deb -x "$f" "$prefix"; done
  local lib=$prefix/usr/lib/x86_64-linux-gnu
  export CPATH=$prefix/usr/include:$prefix/usr/include/x86_64-linux-gnu/openblas-pthread${CPATH:+:$CPATH}
  export LIBRARY_PATH=$lib:$lib/openblas-pthread${LIBRARY_PATH:+:$LIBRARY_PATH}
  export LD_LIBRARY_PATH=$lib:$lib/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export PKG_CONFIG_PATH=$lib/pkgconfig:$lib/openblas-pthread/pkgconfig
  export PKG_CONFIG_SYSROOT_DIR=$prefix
  export CMAKE_PREFIX_PATH=$prefix/usr
}

if [ -n "$prebuilt" ]; then
  # KILN_PREBUILT_DIR: where the tree is unpacked (two stages run at once need two).
  build=${KILN_PREBUILT_DIR:-/tmp/kiln-gpu-build}
  rm -rf "$build" && mkdir -p "$build" && tar -xf "$prebuilt" -C "$build"
  export LD_LIBRARY_PATH=$build/libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  note "build: prebuilt $(cat "$build/BUILD_INFO" 2>/dev/null)"
else
  build=$ROOT/build-gpu
  if ! { command -v pkg-config >/dev/null && pkg-config --exists openblas tbb; }; then use_debs; fi
  if [ ! -d "$build" ]; then
    meson setup "$build" --buildtype=release -Dcuda=enabled -Dgpu_arch="sm_$cc" -Donednn=disabled -Dmpi=disabled \
      >"$out/setup.log" 2>&1 || { tail -30 "$out/setup.log"; fail "meson setup (log: setup.log)"; exit 1; }
  fi
  t0=$(date +%s)
  ninja -C "$build" >"$out/build.log" 2>&1 || { tail -40 "$out/build.log"; fail "build (log: build.log)"; exit 1; }
  note "build: $build, sm_$cc, $(($(date +%s) - t0)) s"
fi
export KILN_FIXTURES=$ROOT/tests/fixtures KILN_SAVE_LOOP=$build/tests/save_loop

if stage tests; then
  # Every suite of tests/meson.build; each prints doctest's summary. A suite is a test
  # file's cases: kiln_tests filtered to the file, or the file's own program (test_cuda,
  # test_threads). test_cuda exits 77 where no GPU is usable: here that is a failure.
  # test_cuda and translate_toy run alone on the GPU first, then the CPU's suites
  # KILN_TEST_JOBS at a time (default 6).
  run_test() {  # run_test NAME PROGRAM [ARGS...]: its log, its line in the summary
    local name=$1 rc ms secs line t0
    shift
    t0=$(date +%s%N)
    (cd "$build/tests" && timeout 900 "$@" >"$out/$name.log" 2>&1)
    rc=$?
    ms=$((($(date +%s%N) - t0) / 1000000))
    secs=$((ms / 1000)).$((ms % 1000 / 100))
    line=$(grep -E '^\[doctest\] (test cases|assertions)' "$out/$name.log" | tr '\n' ' ')
    if [ $rc -eq 0 ]; then echo "ok   $name (${secs} s) $line"; else echo "FAIL: $name rc=$rc (${secs} s) $line"; fi
  }
  run_suite() {  # run_suite FILE: tests/FILE's cases
    local name
    name=$(basename "$1" .cpp)
    if [ "$1" = op_table ]; then
      run_test test_op_table "$build/tests/kiln_tests" '--source-file=*/op_table/*'
    elif [ -x "$build/tests/$name" ]; then
      run_test "$name" "$build/tests/$name"
    else
      run_test "$name" "$build/tests/kiln_tests" "--source-file=*/$1"
    fi
  }
  export -f run_test run_suite
  export build out
  run_test test_cuda "$build/tests/test_cuda" | tee -a "$summary"
  toy=$build/examples/translate_toy/translate_toy
  if [ -x "$toy" ]; then
    (cd "$out" && timeout 600 "$toy" --device cuda:0 >"$out/translate_toy.log" 2>&1)
    rc=$?
    line=$(grep -iE 'exact|accuracy' "$out/translate_toy.log" | tail -1)
    if [ $rc -eq 0 ]; then note "ok   translate_toy --device cuda:0: $line"; else fail "translate_toy rc=$rc: $line"; fi
  fi
  (cd "$ROOT/tests" && ls test_*.cpp | grep -v -x -e test_cuda.cpp -e test_util.cpp; echo op_table) |
    xargs -n 1 -P "${KILN_TEST_JOBS:-6}" bash -c 'run_suite "$0"' | sort | tee -a "$summary"
  grep -q '^FAIL: test_' "$summary" && status=1
fi

if stage sanitize; then
  # One compute-sanitizer process per test case of test_cuda's GPU suite, eight at a time.
  cases=$("$build/tests/test_cuda" --list-test-cases --no-intro 2>/dev/null | sed -n 's/^\(.*[a-z].*\)$/\1/p' |
    grep -v '^\[doctest\]' | grep -v '^=*$')
  # racecheck (shared-memory hazards) runs a kernel tens of times slower: it checks each
  # process's first KILN_RACECHECK_LAUNCHES launches (default 4000: every kernel of the
  # op cases, and the first training steps of the translator cases, with their shapes);
  # the rest run unchecked. memcheck and initcheck check every launch.
  # initcheck does not see the stores of cuBLAS's Hopper kernels (through the tensor
  # memory accelerator): every later read of their output is reported as uninitialised,
  # PyTorch's own bf16 matmul included (docs/cuda.md, "initcheck and cuBLAS"). Cases
  # named "not for initcheck" read such outputs on shapes that take those kernels;
  # initcheck leaves them out, memcheck and racecheck run them. initcheck also runs with cuBLAS preferred for
  # unbatched products (KILN_CUDA_BLAS=cublas; KILN_INITCHECK_BLAS=cublaslt keeps the
  # default): on the default, cuBLASLt, its reports on an H200 were all reads of cuBLASLt
  # outputs; the cases that choose cuBLASLt themselves still run it. And every product's
  # output is filled first (KILN_CUDA_PREFILL_PRODUCTS=1): with that, the reports on an
  # H200 went to 0 (3552 on the cuBLASLt case, 20 on the layer-norm recompute case), so
  # a report that remains is a read of memory that nothing wrote.
  # sanitize_case TOOL LIMIT LOG PATTERN: test_cuda's case PATTERN under compute-sanitizer
  # TOOL (LIMIT: its extra flags, or empty), the log to LOG; its exit status.
  sanitize_case() {
    # shellcheck disable=SC2086  # LIMIT is zero or more flags
    timeout "${KILN_SANITIZE_TIMEOUT:-900}" compute-sanitizer --tool "$1" $2 --error-exitcode 99 --print-limit 20 \
      "$build/tests/test_cuda" --test-case="$4" >"$3" 2>&1 </dev/null
  }
  export -f sanitize_case
  export build
  skipped=$(grep -c "not for initcheck" <<<"$cases")
  for tool in ${KILN_SANITIZE_TOOLS:-memcheck racecheck initcheck}; do
    limit=""
    [ $tool = racecheck ] && limit="--launch-count ${KILN_RACECHECK_LAUNCHES:-4000}"
    tool_cases=$cases
    blas=""
    [ $tool = initcheck ] && tool_cases=$(grep -v "not for initcheck" <<<"$cases") &&
      blas="KILN_CUDA_BLAS=${KILN_INITCHECK_BLAS:-cublas} KILN_CUDA_PREFILL_PRODUCTS=1"
    rm -rf "${out:?}/$tool" && mkdir -p "$out/$tool"
    t0=$(date +%s)
    i=0
    while IFS= read -r c; do
      i=$((i + 1))
      # doctest's filters treat , and * specially: match the case by its text up to any.
      pat=$(printf '%s' "$c" | sed 's/[,*?\[]/*/g')
      printf '%s\0%s\0' "$i" "$pat"
    done <<<"$tool_cases" | env $blas xargs -0 -n 2 -P 8 bash -c '
      sanitize_case '"$tool"' "'"$limit"'" "'"$out/$tool"'/case$0.log" "$1"
      echo "$? $0 $1" >>'"$out/$tool"'/rc.txt'
    # A filter that matched nothing passes too: every process must also have run its case.
    while read -r rc k _; do
      grep -q '^\[doctest\] test cases: *1 ' "$out/$tool/case$k.log" && [ "$rc" = 0 ] || echo "$k"
    done <"$out/$tool/rc.txt" >"$out/$tool/bad.txt"
    bad=$(wc -l <"$out/$tool/bad.txt")
    errs=$(grep -h 'ERROR SUMMARY' "$out/$tool"/case*.log | awk '{s += $4} END {print s + 0}')
    n=$(wc -l <"$out/$tool/rc.txt")
    left_out=""
    [ $tool = initcheck ] && [ "$skipped" -gt 0 ] && left_out=", $skipped left out (cuBLAS's TMA stores)"
    if [ "$bad" -eq 0 ]; then
      note "ok   compute-sanitizer $tool: $n test cases, $errs errors ($(($(date +%s) - t0)) s$left_out)"
    else
      fail "compute-sanitizer $tool: $bad of $n test cases failed, $errs errors: $(awk 'NR == FNR {b[$1]; next} $2 in b {$1=""; $2=""; print}' "$out/$tool/bad.txt" "$out/$tool/rc.txt" | head -5 | tr '\n' ';')"
      # A case the tool itself gave up on ("Internal Sanitizer Error", seen with racecheck
      # on cuBLASLt's default) runs once more with unbatched products on cuBLAS, to tell
      # the tool's trouble with one library's kernels from a fault of Kiln's.
      while read -r k; do
        grep -q "Internal Sanitizer Error" "$out/$tool/case$k.log" || continue
        pat=$(awk -v k="$k" '$2 == k {$1=""; $2=""; sub(/^ +/, ""); print}' "$out/$tool/rc.txt")
        KILN_CUDA_BLAS=cublas sanitize_case "$tool" "$limit" "$out/$tool/case$k.cublas.log" "$pat"
        note "     $tool case $k again on cuBLAS (KILN_CUDA_BLAS=cublas): rc $?, $(grep -h 'ERROR SUMMARY' "$out/$tool/case$k.cublas.log" | head -1)"
      done <"$out/$tool/bad.txt"
    fi
  done
fi

if stage bench; then
  # The step time, peak tensor memory (Kiln's peak_tensor_mb, PyTorch's peak_gpu_mb) and loss of a JSON line.
  fields() { echo "$1" | grep -o '"\(ms_per_step\|peak_tensor_mb\|peak_gpu_mb\|loss\)": [0-9.]*' | tr '\n' ' '; }
  ms() { num "$1" ms_per_step; }
  py=${TORCH_PYTHON:-python3}
  # For the rows in RESULTS.md's format: a JSON line's string field $2, the GPU, the commit.
  field() { echo "$1" | grep -o "\"$2\": \"[^\"]*\"" | head -1 | sed 's/.*: "//; s/"$//'; }
  gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
  if [ -n "$prebuilt" ]; then commit=$(awk '{print $1; exit}' "$build/BUILD_INFO" 2>/dev/null)
  else commit=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null); fi
  # One more run of each side at this $config, $mode ($flag) and $steps, with more
  # arguments; logged as "bench <config> <mode> <label>: kiln|torch <fields>".
  # KILN_BENCH_VARIANTS (comma-separated labels, default all) picks the base step's extra
  # runs below, to fit a short lease: e.g. "blas tuning,tunable op".
  wanted() { [ -z "${KILN_BENCH_VARIANTS:-}" ] || [[ ",$KILN_BENCH_VARIANTS," == *",$1,"* ]]; }
  kiln_run() {
    local label=$1 k
    shift
    wanted "$label" || return 0
    # The whole output kept: under KILN_CUDA_BLAS_TUNING_LOG the tuning's lines come first.
    k=$("$build/benchmarks/bench_train_step" --config $config --device cuda:0 --steps $steps --warmup 5 $flag "$@" 2>&1 |
      tee -a "$out/bench_kiln.log" | tail -1)
    echo "$k" >>"$out/bench.jsonl"
    note "bench $config $mode $label: kiln $(fields "$k")"
  }
  torch_run() {
    local label=$1 t
    shift
    wanted "$label" || return 0
    t=$($py "$ROOT/benchmarks/torch_train_step.py" --config $config --device cuda:0 --steps $steps --warmup 5 $flag "$@" 2>&1 |
      tee -a "$out/bench_torch.log" | tail -1)
    echo "$t" >>"$out/bench.jsonl"
    note "bench $config $mode $label: torch $(fields "$t")"
  }
  rounds=${KILN_BENCH_ROUNDS:-1}
  # KILN_BENCH_CONFIGS (default "small base") and KILN_BENCH_ATTENTION=0 trim the stage.
  for config in ${KILN_BENCH_CONFIGS:-small base}; do
    steps=$([ $config = base ] && echo 30 || echo 100)
    for mode in fp32 bf16; do
      flag=$([ $mode = bf16 ] && echo --bf16 || true)
      kiln_ms=() torch_ms=()
      for _ in $(seq "$rounds"); do
        k=$("$build/benchmarks/bench_train_step" --config $config --device cuda:0 --steps $steps --warmup 5 $flag 2>&1 | tail -1)
        t=$($py "$ROOT/benchmarks/torch_train_step.py" --config $config --device cuda:0 --steps $steps --warmup 5 $flag 2>&1 | tail -1)
        echo "$k" >>"$out/bench.jsonl"
        echo "$t" >>"$out/bench.jsonl"
        note "bench $config $mode: kiln $(fields "$k")"
        note "bench $config $mode: torch $(fields "$t")"
        m=$(ms "$k") && kiln_ms+=("$m")
        m=$(ms "$t") && torch_ms+=("$m")
      done
      if [ "${#kiln_ms[@]}" -gt 0 ] && [ "${#torch_ms[@]}" -gt 0 ]; then
        km=$(median "${kiln_ms[@]}") tm=$(median "${torch_ms[@]}")
        note "bench $config $mode: medians of ${#kiln_ms[@]} / ${#torch_ms[@]} runs: kiln $km ms, torch $tm ms, kiln/torch $(awk -v a="$km" -v b="$tm" 'BEGIN {printf "%.3f", a / b}')"
        # The same as a row of RESULTS.md's table (peaks: the last round's, MiB of tensors).
        kp=$(num "$k" peak_tensor_mb) tp=$(num "$t" peak_gpu_mb)
        note "$(awk -v c="$config" -v p="$([ $mode = bf16 ] && echo "bf16 autocast" || echo fp32)" -v g="$gpu_name" \
          -v km="$km" -v tm="$tm" -v tv="$(field "$t" torch)" -v kp="$kp" -v tp="$tp" -v d="$(date +%F)" \
          -v h="${commit:-unknown}" 'BEGIN {
            printf "row: | %s | %s | %s | %.2f ms | %.2f ms (%s, eager) | %.3f | %.1f / %.1f MiB tensors | %s | %s |", \
              c, p, g, km, tm, tv, km / tm, kp, tp, d, h }')"
      fi
      if [ $config = base ]; then
        kiln_run "recompute off" --recompute off
        # Unbatched products on cuBLAS, a linear's bias broadcast first (the default is
        # cuBLASLt with the bias in its epilogue: set_preferred_blas_library).
        kiln_run "blas cublas" --blas cublas
        # Each GEMM problem's algorithm the fastest of cuBLASLt's candidates, timed in the
        # warm-up steps: Kiln's set_blas_tuning, PyTorch's TunableOp.
        KILN_CUDA_BLAS_TUNING_LOG=1 kiln_run "blas tuning" --blas-tuning
        torch_run "tunable op" --tunable-op
        # Attention's heads copied head-major around its products (the earlier path, for
        # its cost against the pointer-batched products on heads in place).
        KILN_CUDA_HEAD_COPIES=1 kiln_run "head copies"
        # Activation checkpointing on both sides: each layer through its checkpoint.
        kiln_run "checkpoint layers" --checkpoint-layers
        torch_run "checkpoint layers" --checkpoint-layers
        # Only the feed-forward hidden layers checkpointed, on both sides (Kiln frees the
        # checkpoint's output too: recompute_outputs).
        kiln_run "checkpoint feed-forward" --checkpoint-ff
        torch_run "checkpoint feed-forward" --checkpoint-ff
        # Under autocast Kiln's default checkpoints those hidden layers on a GPU
        # (checkpoint_feed_forward_by_default): the step with them kept, for its cost.
        [ $mode = bf16 ] && kiln_run "feed-forward kept" --no-checkpoint-ff
        # The generator and its loss as linear_cross_entropy (no logits held); PyTorch has
        # no such op, so this is Kiln's figure beside the composition's above.
        kiln_run "fused loss" --fused-loss
      fi
    done
  done
  # Attention alone at long sequences, on each of the GPU's attention kernels.
  [ "${KILN_BENCH_ATTENTION:-1}" = 0 ] || for seq in 1024 4096; do
    for kernel in tiled materialized; do
      a=$("$build/benchmarks/bench_attention" --seq $seq --attention $kernel 2>&1 | tail -1)
      echo "$a" >>"$out/bench.jsonl"
      note "bench attention seq $seq $kernel: $(echo "$a" | grep -o '"\(ms\|peak_mb\)": [0-9.]*' | tr '\n' ' ')"
    done
  done
fi

if stage translate; then
  py=${TORCH_PYTHON:-python3}
  tdir=/tmp/kiln-translate
  rm -rf "$tdir" && mkdir -p "$tdir"
  if xz -dc "$ROOT/.gpu/de-en.xz" >"$tdir/de-en" 2>/dev/null && tar -xf "$ROOT/.gpu/tr-export.tar.xz" -C "$tdir"; then
    secs=${KILN_TRANSLATE_SECONDS:-30}
    for mode in fp32 bf16; do
      flag=$([ $mode = bf16 ] && echo --bf16 || true)
      tflag=$([ $mode = bf16 ] && echo "--autocast bf16" || echo "--autocast none")
      # shellcheck disable=SC2086
      KILN_LOG_HOST_STAGED=1 timeout 300 "$build/examples/translate_de_en/translate_de_en" --device cuda:0 --corpus "$tdir/de-en" \
        --spm "$ROOT/.gpu/spm.model" --minutes "$(awk -v s="$secs" 'BEGIN {print s / 60}')" --eval-every 1e9 \
        --beam 0 --no-progress --out "$tdir/kiln_$mode" $flag >"$out/translate_kiln_$mode.log" 2>&1
      rc=$?
      line=$(grep -E '^trained ' "$out/translate_kiln_$mode.log" | tail -1)
      if [ $rc -eq 0 ]; then note "translate $mode: kiln $line"; else fail "translate $mode: kiln rc=$rc (log: translate_kiln_$mode.log)"; fi
      # Ops it ran through host memory (training, validation and test decoding), if any.
      staged=$(grep -o '^\[host-staged\] [a-z_]*' "$out/translate_kiln_$mode.log" | awk '{print $2}' | tr '\n' ' ')
      note "translate $mode: kiln ops staged through the host: ${staged:-none}"
      # shellcheck disable=SC2086
      t=$(timeout 300 "$py" "$ROOT/benchmarks/torch_translate.py" "$tdir/export" --device cuda --out "$tdir/torch_$mode" \
        --throughput-steps "${TORCH_TRANSLATE_STEPS:-1500}" $tflag 2>"$out/translate_torch_$mode.err" | tail -1)
      if [ -n "$t" ]; then note "translate $mode: torch $t"; else fail "translate $mode: torch (log: translate_torch_$mode.err)"; fi
    done
  else
    fail "translate: .gpu/de-en.xz or .gpu/tr-export.tar.xz missing or unreadable"
  fi
fi

if stage bert; then
  # all-MiniLM-L6-v2's forward (32 x 128 tokens, mean-pooled and normalised) on the GPU:
  # bench_bert against transformers' BertModel in eager PyTorch (benchmarks/torch_bert.py),
  # both built from the model's config.json with random weights (its 87 MB of weights do
  # not travel; no step of the forward depends on their values), float32 (TF32 off) and
  # bf16 autocast, KILN_BERT_RUNS timed runs (default 50) after 5, alternating
  # KILN_BENCH_ROUNDS times (default 1), the medians' ratio.
  py=${TORCH_PYTHON:-python3}
  config_dir=$build/minilm
  [ -f "$config_dir/config.json" ] || config_dir=$ROOT/.gpu/minilm
  if [ -f "$config_dir/config.json" ]; then
    runs=${KILN_BERT_RUNS:-50}
    for mode in fp32 bf16; do
      flag=$([ $mode = bf16 ] && echo --bf16 || true)
      kiln_ms=() torch_ms=()
      for _ in $(seq "${KILN_BENCH_ROUNDS:-1}"); do
        # shellcheck disable=SC2086
        k=$(KILN_LOG_HOST_STAGED=1 timeout 300 "$build/benchmarks/bench_bert" --model "$config_dir" --random-weights \
          --device cuda:0 --runs "$runs" --warmup 5 $flag 2>&1 | tee -a "$out/bert_kiln_$mode.log" | tail -1)
        # shellcheck disable=SC2086
        t=$(timeout 300 "$py" "$ROOT/benchmarks/torch_bert.py" --model "$config_dir" --random-weights --device cuda \
          --runs "$runs" --warmup 5 $flag 2>&1 | tail -1)
        echo "$k" >>"$out/bert.jsonl"
        echo "$t" >>"$out/bert.jsonl"
        m=$(num "$k" ms) && kiln_ms+=("$m") || fail "bert $mode: kiln: $k"
        m=$(num "$t" ms) && torch_ms+=("$m") || fail "bert $mode: torch: $t"
        note "bert $mode: kiln $(num "$k" ms) ms, peak $(num "$k" peak_tensor_mb) MiB; torch $(num "$t" ms) ms, peak $(num "$t" peak_gpu_mb) MiB"
      done
      # Ops the forward ran through host memory (KILN_LOG_HOST_STAGED), if any.
      staged=$(grep -o '^\[host-staged\] [a-z_]*' "$out/bert_kiln_$mode.log" 2>/dev/null | awk '{print $2}' | sort -u | tr '\n' ' ')
      note "bert $mode: kiln ops staged through the host: ${staged:-none}"
      if [ "${#kiln_ms[@]}" -gt 0 ] && [ "${#torch_ms[@]}" -gt 0 ]; then
        km=$(median "${kiln_ms[@]}") tm=$(median "${torch_ms[@]}")
        note "bert $mode: medians kiln $km ms, torch $tm ms, kiln/torch $(awk -v a="$km" -v b="$tm" 'BEGIN {printf "%.3f", a / b}')"
      fi
    done
  else
    fail "bert: no all-MiniLM-L6-v2 config.json in $build/minilm (gpu_pack.sh packs it) or .gpu/minilm"
  fi
fi

if stage profile; then
  # One base step's kernels under Nsight Compute (durations only, the card's clocks left as
  # they are), fp32 and bf16, summed per kernel by scripts/gpu_kernel_times.py.
  if command -v ncu >/dev/null; then
    for mode in fp32 bf16; do
      flag=$([ $mode = bf16 ] && echo --bf16 || true)
      timeout 300 ncu --clock-control none --print-units base --metrics gpu__time_duration.sum --csv --page raw \
        "$build/benchmarks/bench_train_step" --config base --device cuda:0 --warmup 1 --steps 1 $flag \
        >"$out/ncu_$mode.csv" 2>"$out/ncu_$mode.err"
      if python3 "$ROOT/scripts/gpu_kernel_times.py" "$out/ncu_$mode.csv" --top 30 >"$out/kernels_$mode.txt"; then
        note "profile base $mode: $(head -1 "$out/kernels_$mode.txt") (per kernel: kernels_$mode.txt)"
      else
        fail "profile base $mode (log: ncu_$mode.err)"
      fi
    done
  else
    fail "profile: ncu not found"
  fi
fi

echo "==== summary"
cat "$summary"
exit $status
