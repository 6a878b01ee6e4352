#!/usr/bin/env bash
# Every number in docs/benchmarks.md, in the order of its tables: about 4 hours on a 2-core CPU.
# Run from a checkout with the requirements installed, on an idle machine (each report records the
# share of CPU other processes took while it measured). The block under "Reproduce" in
# docs/benchmarks.md is this file from `mkdir` on; tests/test_readme.py keeps the two the same.
set -euo pipefail
cd "$(dirname "$0")/.."

mkdir -p out
# Tables 1-4 and 7, the profiles and the lab timing were measured on the earlier default
# configuration of the default pair: bf16 target, nf4 draft, every token id draftable
EARLIER="--target-quantization none --draft-quantization nf4"
# Table 1 - greedy, per category, with the transformers reference (about 25 min)
python -m playground.bench $EARLIER --draft-vocab 0 --categories coding,summarization,translation,qa,math_reasoning --limit 2 \
    --temperature 0 --gamma 4 --max-new-tokens 96 --repeats 2 --warmup 1 --reference transformers \
    --json out/greedy.json --csv out/greedy.csv --html out/greedy.html
# Table 2 - the same at temperature 0.7 (about 25 min)
python -m playground.bench $EARLIER --draft-vocab 0 --categories coding,summarization,translation,qa,math_reasoning --limit 2 \
    --temperature 0.7 --gamma 4 --max-new-tokens 96 --repeats 2 --warmup 1 --reference transformers \
    --json out/t07.json --csv out/t07.csv --html out/t07.html
# Table 3 and the plot - speedup against gamma, greedy, coding and qa (about 25 min)
python -m playground.bench $EARLIER --draft-vocab 0 --categories coding,qa --limit 2 --temperature 0 \
    --sweep gamma=1,2,4,6,8 \
    --max-new-tokens 96 --repeats 1 --warmup 1 --reference transformers \
    --json out/gamma.json --html out/gamma.html --png assets/bench_speedup_vs_gamma.png
# Table 3b - adaptive lookahead, without and with the draft-confidence cut (about 12 min)
python -m playground.bench $EARLIER --draft-vocab 0 --categories coding,qa --limit 2 --temperature 0 \
    --gamma 4 --adaptive \
    --sweep min_confidence=0,0.3 --max-new-tokens 96 --repeats 1 --warmup 1 --reference transformers \
    --json out/adaptive.json
# Table 3c - a smaller draft vocabulary: the first 32768 and 65536 token ids, then gamma 6 and 8 (about 30 min)
for n in 32768 65536; do
  python -m playground.bench $EARLIER --categories coding,qa --limit 2 --temperature 0 --gamma 4 \
      --max-new-tokens 96 --repeats 2 --warmup 1 --reference transformers --draft-vocab $n --json out/vocab-$n.json
done
python -m playground.bench $EARLIER --categories coding,qa --limit 2 --temperature 0 --sweep gamma=6,8 \
    --max-new-tokens 96 \
    --repeats 1 --warmup 1 --reference transformers --draft-vocab 65536 --json out/vocab-gamma.json
# Table 4 - quantization of each model, one run per row (about 6 min each)
for tq in none nf4; do for dq in none nf4; do
  python -m playground.bench --categories coding,qa --limit 2 --temperature 0 --gamma 4 --max-new-tokens 64 \
      --repeats 2 --warmup 1 --reference transformers --target-quantization $tq --draft-quantization $dq \
      --draft-vocab 0 --json out/quant-$tq-$dq.json
done; done
# Table 6 - faster than what? each target quantization plainly and with speculation, in one run
# (about 15 min for coding, 25 for the mix)
python -m playground.bench --categories coding --limit 4 --temperature 0 --max-new-tokens 96 --gamma 3 \
    --target-quantizations int4-cpu,nf4,none --draft-quantization int4-cpu --draft-vocab 65536 \
    --repeats 1 --warmup 1 --json out/faster-coding.json
python -m playground.bench --categories coding,summarization,translation,qa,math_reasoning --limit 2 \
    --temperature 0 --max-new-tokens 96 --gamma 3 --target-quantizations int4-cpu,nf4 \
    --draft-quantization int4-cpu --draft-vocab 65536 --repeats 1 --warmup 1 --json out/faster-mix.json
# the default configuration from the defaults alone (models.yaml's auto quantization, the pair's
# gamma and draft vocabulary) beside the nf4 target (about 12 min)
python -m playground.bench --categories coding,summarization,translation,qa,math_reasoning --limit 2 \
    --temperature 0 --max-new-tokens 96 --target-quantizations int4-cpu,nf4 --repeats 1 --warmup 1 \
    --json out/default-mix.json
python -m playground.measure.bench.profile --gamma 3 --max-new-tokens 96 --target-quantization int4-cpu \
    --draft-quantization int4-cpu --draft-vocab 65536 | tee out/profile-int4.txt
# Table 7 - token trees beside chains from the same draft, greedy and T = 0.7 (about 15 min each)
for t in 0 0.7; do
  python -m playground.bench $EARLIER --draft-vocab 0 --categories coding,summarization,translation,qa,math_reasoning \
      --limit 2 --temperature $t --gamma 6 --max-new-tokens 96 --repeats 1 --warmup 1 --tree --tree-budget 24 \
      --tree-depth 6 --tree-branching 2 --tree-width 4 --json out/tree-$t.json
done
# Where the time goes - one coding answer split into verify, draft and engine overhead (about 4 min)
python -m playground.measure.bench.profile $EARLIER --gamma 4 --max-new-tokens 96 --draft-vocab 65536 | tee out/profile-vocab.txt
python -m playground.measure.bench.profile $EARLIER --gamma 4 --max-new-tokens 96 --draft-vocab 0 | tee out/profile.txt
# The losslessness lab, fast against slow, on the default pair (about 4 min)
python -m playground.measure.hardware.lab_timing --pair default $EARLIER --draws 20000 --slow-draws 400 | tee out/lab-timing.txt
# Runners - eager against compiled, alternated per cell (about 6 min; the compiled one also compiles)
python -m playground.bench --categories coding --limit 2 --temperature 0 --repeats 3 --sweep runner=eager,compiled \
    --json out/runners.json
# CPU kernels - plain step and v(2..8) of the target per kernel and runner (about 40 min; see the section)
python -m playground.measure.hardware.cpu_kernels --json out/cpu_kernels.json
# The llamacpp runner and llama.cpp's own plain decoding (the optional extra; about 15 min)
if python -m playground.serve setup llamacpp; then
  python -m playground.bench --categories coding --limit 4 --temperature 0 --max-new-tokens 96 --repeats 1 \
      --sweep runner=llamacpp gamma=2,3,4 --json out/llamacpp.json
  python -m playground.bench --categories coding --limit 4 --temperature 0 --max-new-tokens 96 --repeats 1 \
      --runner llamacpp --reference llama.cpp --json out/llamacpp-reference.json
  # ONNX Runtime's kernels: the onnxruntime runner beside llama.cpp's and onnxruntime-genai's own loops
  # (about 12 min for coding, 12 for the mix; the first run also builds both models, about 2 min)
  python -m playground.bench --categories coding --limit 4 --temperature 0 --max-new-tokens 96 --repeats 1 \
      --sweep runner=onnxruntime gamma=1,2,3 --reference llama.cpp,onnxruntime-genai --json out/ort-coding.json
  python -m playground.bench --categories coding,summarization,translation,qa,math_reasoning --limit 2 \
      --temperature 0 --max-new-tokens 96 --repeats 1 --runner onnxruntime --gamma 2 \
      --reference llama.cpp,onnxruntime-genai --json out/ort-mix.json
  # Drafters: every drafter for the default target, then three draft models (one with the pair's
  # tokenizer, two across tokenizers), beside llama.cpp's loop (about 30 min and 10 min)
  python -m playground.bench --categories translation,summarization,qa,math_reasoning,rag,coding,writing --limit 1 \
      --temperature 0 --max-new-tokens 96 --repeats 1 \
      --sweep drafter=model,prompt_lookup,suffix,recycling,self,hybrid --reference llama.cpp --json out/drafters.json
  python -m playground.bench --categories translation,summarization,qa,math_reasoning,rag,coding,writing --limit 1 \
      --temperature 0 --max-new-tokens 96 --repeats 1 --draft-vocab 0 \
      --sweep draft=qwen2.5-coder-0.5b-instruct,smollm2-135m-instruct,gemma-3-270m --json out/drafts.json
  # The drafts board: every drafter at its best γ, against the fastest plain decoding (about 90 min)
  python -m playground.bench --categories translation,summarization,qa,math_reasoning,rag,coding,writing --limit 1 \
      --temperature 0 --max-new-tokens 96 --repeats 1 --drafters all --reference llama.cpp \
      --json out/board.json --csv out/board.csv --png assets/board_map.png
  # Every peer in one table: ours with llama.cpp's, ORT GenAI's and OpenVINO GenAI's loops beside, then
  # llama-server and vLLM plain and speculative (about 22 min; a peer not installed is left out, saying how)
  python -m playground.serve setup llama-server && python -m playground.serve setup vllm \
    && python -m playground.serve setup openvino --pair default \
    && python -m playground.bench --peers --categories coding --limit 4 --temperature 0 --max-new-tokens 96 \
      --repeats 1 --warmup 1 --json out/peers-coding.json
fi
# Table 5 - the GPU oracle and the app's CUDA paths (one CUDA GPU, no network, no model files;
# about 12 min on an H200; skipped without a GPU)
if python -c "import sys, torch; sys.exit(not torch.cuda.is_available())"; then
  python -m playground.measure.hardware.gpu_oracle --json out/gpu_oracle.json
  python -m playground.measure.hardware.gpu_paths --json out/gpu_paths.json
  python -m playground.measure.hardware.gpu_runners --json out/gpu_runners.json
else
  echo "no CUDA GPU: table 5 (the GPU oracle and CUDA paths) not run"
fi
