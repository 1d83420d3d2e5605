#!/usr/bin/env bash
# The distillation protocol's runs (issue #29), one after another; each is resumable: killing this
# script and running it again finishes a run where it stopped (bench/distill_quintd.py keeps its
# teacher import, student and judgments under runs/bench/distill_quintd/LABEL; it is `spanjudge distill` under
# the protocol's old name: a list option is repeated, --domains a --domains b).
#
#   bench/distill_protocol.sh                        # every run below, on the dev split, in order
#   bench/distill_protocol.sh LABEL ...              # only these runs
#   SPLIT=test bench/distill_protocol.sh LABEL ...   # the test split, once per seed of a finished recipe
#   SAMPLES=3 bench/distill_protocol.sh LABEL ...    # also self-consistency rows (3 sampled replies an output)
#   BASE=0 SPLIT=test bench/distill_protocol.sh ...  # the students first: the untrained base's row is left to a later
#                                                    # test run of one of them (its judgments restored, not redone)
#   WORKERS=1 bench/distill_protocol.sh ...          # judge in one process (default: one worker a core)
#
# Choices are made on the dev split (tables 70-79); the test split (80-99) is judged once, for a
# finished recipe only, and only for the runs named (the student trained for dev is reused). Logs:
# runs/bench/distill_quintd/LABEL.log (LABEL.test.log for the test split). Done so far (see
# bench/results/distill_quintd.md): on dev, smollm2-wikidata-s42, -s1 and -s2, smollm2-human-s42,
# -s1 and -s2, and smollm2-mixed-s42 and -s1 (both with SAMPLES=3) and -s2; on test, the recipe dev
# chose: smollm2-mixed-s42, -s1 and -s2. From issue #49 on, runs cut long training inputs as judging
# does (recipe smollm2-mixed-cut) and keep their judgments in bench/results/distill_judgments/: on dev,
# smollm2-mixed-cut-s42, -s1 and -s2; gemma3-mixed-cut-s42, -s1 and -s2 (dev chose gemma3-mixed-cut);
# on test, gemma3-mixed-cut-s42, -s1 and -s2. Issue #66: the teacher the ensemble study chose on dev
# (bench/results/ensemble_quintd.md: GPT-4's two samples merged by vote), recipe gemma3-vote-cut: on dev,
# gemma3-vote-cut-s42 and -s1, on dev and on test; -s2 on dev and on test. The votes as training signal (issue #66, decided on
# dev: the two samples' agreement on an output tracks how well their vote matches the humans there), recipe
# gemma3-vote-agree-cut: the same teacher, each example weighted by that agreement; on dev, -s42 only (the rule
# set before it was read stopped the arm there: docs/research/ensemble.md). Issue #67 (fast judging): gemma3-vote-agree-cut-llamacpp-s42 is the same student (its work folder)
# judging dev on llama.cpp in process (--student-engine llamacpp: its Q4_K_M GGUF with the adapter as a GGUF LoRA).
# Issue #67's data curve: gemma3-mixed-cut-t50 is gemma3-mixed-cut on tables 0-49 of each domain (twice the records);
# on dev, -s42. Its judgments were written by the batched engine before 635705b fixed its Gemma 3 padding (not
# exactly its greedy replies), and a recipe keeps one engine: the seeds' spread at twice the data is recipe
# gemma3-mixed-cut-t50-drafted, the same training judged with drafted decoding (exact greedy replies, faster):
# -s1 and -s2 on dev (next: -s42 trained again).
# Issue #67 (fast judging): gemma3-mixed-cut-s42 trained again on another machine (2026-12-04: another adapter, so its
# kept judgments were not restored; that label's rows stay those of the first student) judges as
# gemma3-mixed-cut-retrained-s42 (the batched transformers engine, dev: the baseline on the same machine) and as
# gemma3-mixed-cut-drafted-s42 (--student-engine transformers-drafted: the same replies, written faster), on dev and
# on test; bench/drafted_judging.py compares the two. gemma3-mixed-cut-located-s42: the same student and engine, its
# dev judgments read again with each span's location tokens' probabilities (bench/span_confidence_features.py).
# Issue #67's reply budget as a dev arm: gemma3-mixed-cut-t50-drafted-512tok-s1 and -s2 are the t50-drafted-s1 and -s2
# students (their work folders) judging dev with up to 512 new tokens instead of 320 (a fifth to a third of their dev replies ran past 320 twice); the
# prompt's budget is the context less the reply's, so owid's longest inputs are cut 192 tokens shorter.
# Issue #67's data curve at tables 0-69 (recipe gemma3-mixed-cut-t70-drafted-512tok: the 512-token reply budget that
# dev kept at twice the data): -s1 and -s2 on dev.
# Issue #67 (fast judging): gemma3-mixed-cut-drafted-bf16-s42 is gemma3-mixed-cut-drafted-s42's student and decoding
# in bfloat16 (--student-engine transformers-drafted-bf16), on dev: for CPUs with native bf16 only (elsewhere it is
# emulated, several times slower); bench/drafted_judging.py compares it with the float32 judgments: run on dev.
# Issue #67 (what a repeated error block costs): gemma3-mixed-cut-t50-drafted-512tok-stop-s1 and -s2 are the
# t50-drafted-s1 and -s2 students judging dev as -512tok-s1 and -s2 do, its replies' errors ending at the first block written again
# (--student-engine transformers-drafted-stop).
# From here on the search judges with the stop (dev kept it on two seeds: docs/research/distillation.md): the t70
# students judging dev so (gemma3-mixed-cut-t70-drafted-512tok-stop-s1, -s2; no training; on dev), then, not run
# yet: a third seed of the 0-49 recipe (gemma3-mixed-cut-t50-drafted-512tok-stop-s3), and issue #67's recipe arms
# at tables 0-49, each on seeds 1 and 2: LoRA rank 64 (-t50-r64-stop), 2 epochs (-t50-e2-stop), lr 2e-4
# (-t50-lr2e-4-stop), and the teacher's 'No Error' outputs twice, against once, in proportion (-t50-clean2-stop).
# Run so far of these: gemma3-mixed-cut-t50-r64-stop-s1 and -s2, gemma3-mixed-cut-t50-lr2e-4-stop-s1 and -s2,
# gemma3-mixed-cut-t50-e2-stop-s1 and -s2 (2026-12-06, the AMD host) and gemma3-mixed-cut-t50-clean2-stop-s1 and -s2 on dev (the latter's
# student also judged dev in bfloat16 with the stop as gemma3-mixed-cut-t50-clean2-bf16-stop-s1, for the speed on a
# host with native bf16); gemma3-mixed-cut-t50-drafted-512tok-stop-s3 on dev,
# after which dev chose recipe gemma3-mixed-cut-t50-drafted-512tok-stop: on test, -s1, -s2 and -s3 with BASE=0 (the
# untrained base's row at 512 tokens: BASE=1 SPLIT=test ... -s1, run 2026-12-06, its student's judgments restored).
# Every arm above read below dev's choice on seeds 1 and 2; the epochs' last step is queued: 3 epochs
# (gemma3-mixed-cut-t50-e3-stop-s1 and -s2, 426 steps, about 3.8 hours a seed on the AMD host with native bf16, 4.3
# on an AVX2-only one; -s1 started 2026-12-06, again on an AVX2-only host whose runs/ came without the first start's;
# -s1 read on dev 2026-12-07: decided objective 0.365, the highest on dev; -s2 read on dev the same day: 0.339, so
# the arm, 0.352 over seeds 1 and 2 against 0.321, is a finalist; -s3 started 2026-12-07 decides dev's choice: the
# test split for -s1, -s2 and -s3 with BASE=0 only if the arm's three seeds pass the chosen recipe's 0.305; -s3
# started over 2026-12-07 on an AVX512_BF16 host held to AVX2, ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 in
# its environment, so that it trains in float32 as -s1 and -s2 did; a resume keeps its checkpoint's precision;
# resumed 2026-12-08 on the same host, at its checkpoint 320 by 03:31).
# Training precision (issue #67): the students above trained under bf16 autocast (hosts with native bf16); on a
# host without it a run trains in float32 (its record's `precision`). gemma3-mixed-cut-t50-drafted-512tok-rows-stop-
# fp32train-s1 is dev's choice, seed 1, trained so (2026-12-06, an AMD EPYC with AVX2 only), judging dev as the
# rows run does: what the precision alone moves; then on test for the time with 2 judging workers (SPLIT=test BASE=0,
# 2026-12-07, the same host: 1,256.1 s; no choice is made from it).
# Issue #67 (fast judging): gemma3-mixed-cut-t50-drafted-512tok-rows-stop-s1 is dev's choice, seed 1, judging with
# each input's four outputs' replies written together as the rows of one batch (--student-engine
# transformers-drafted-rows-stop; the same replies up to the sums' rounding): run on dev, then on test for the time
# (2026-12-06, the AMD host, after -512tok-stop-s1's student was trained again there and judged dev).
# Issue #67 (fast judging): gemma3-mixed-cut-t50-drafted-512tok-rows-bf16-stop-s1 is the same student judging with the
# rows in bfloat16 (--student-engine transformers-drafted-rows-bf16-stop): for a host with native bf16 only; run
# 2026-12-07 on an AVX512_BF16 host (2 workers; dev, then SPLIT=test BASE=0: 764.8 s), outside bench/drafted_judging.py's
# stated tolerances on dev's count r (0.066), so no choice is made from it.
# Issue #67's recipe arm "full fine-tuning" (`--finetuning full`: every weight of Gemma 3 270M trains, no LoRA; lr
# 5e-5, the usual full-SFT step, ten times below the LoRA recipe's 5e-4, not searched): gemma3-mixed-cut-t50-full-stop-s1
# and -s2 on dev, judged as the other arms are (the stop). -s1 run 2026-12-07 on the AVX2-only host (float32; e3-s1
# was stopped at its checkpoint 20 for it, and resumes from there); -s2 run 2026-12-07 too: the arm reads 0.305 against
# the LoRA recipe's 0.321 on seeds 1 and 2, not a finalist (no -s3, no test read).
# Issue #67's transfer read: gemma3-mixed-cut-t50-drafted-512tok-rows-stop-gsmarena-s1 is that student (its work
# folder) judging the test tables of gsmarena, a quintd-1 domain no protocol run trains or chooses on (SPLIT=test
# BASE=0; no dev judgments of its own, so read written and as expected values, no thresholds fitted on it).
# Every run adds γ agreement (--gamma; pip install 'spanjudge[agreement]').
#
# runs/ goes with the machine. A run on a new one trains its student again and restores the judgments that the
# same judge made and a run kept (the base's in every run; a student's when its adapter is the same); the
# test split is judged only by the student whose dev judgments fitted its thresholds (the same adapter sha256,
# or for a run recorded before that the same losses); another student must judge dev first.
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-.venv/bin/python}"
NOTE="${NOTE:-protocol run}"
SPLIT="${SPLIT:-dev}"
SAMPLES="${SAMPLES:-0}"
BASE="${BASE:-1}"
# judging processes, the cores shared out (--judging-workers): the same judge's replies, each worker writing one
# input's outputs; 2 workers of one thread on 2 cores judged dev 1.44-1.49x as fast as one process (bench/results/
# judging_workers.md; from 2026-12-07 on: gemma3-mixed-cut-t50-full-stop-s2 was the first)
WORKERS="${WORKERS:-$(nproc)}"
RUNS=(
  "smollm2-wikidata-s42 --recipe smollm2-wikidata --student smollm2 --train-seed 42 --probabilities --domains wikidata --train-tables 0 70"
  "smollm2-wikidata-s1 --recipe smollm2-wikidata --student smollm2 --train-seed 1 --probabilities --domains wikidata --train-tables 0 70"
  "smollm2-wikidata-s2 --recipe smollm2-wikidata --student smollm2 --train-seed 2 --probabilities --domains wikidata --train-tables 0 70"
  "smollm2-human-s42 --recipe smollm2-human --student smollm2 --train-seed 42 --train-source human --probabilities --domains wikidata --train-tables 0 70"
  "smollm2-human-s1 --recipe smollm2-human --student smollm2 --train-seed 1 --train-source human --probabilities --domains wikidata --train-tables 0 70"
  "smollm2-human-s2 --recipe smollm2-human --student smollm2 --train-seed 2 --train-source human --probabilities --domains wikidata --train-tables 0 70"
  "smollm2-mixed-s42 --recipe smollm2-mixed --student smollm2 --train-seed 42 --domains wikidata --domains ice_hockey --domains owid --train-tables 0 25 --probabilities"
  "smollm2-mixed-s1 --recipe smollm2-mixed --student smollm2 --train-seed 1 --domains wikidata --domains ice_hockey --domains owid --train-tables 0 25 --probabilities"
  "smollm2-mixed-s2 --recipe smollm2-mixed --student smollm2 --train-seed 2 --domains wikidata --domains ice_hockey --domains owid --train-tables 0 25 --probabilities"
  "smollm2-mixed-cut-s42 --recipe smollm2-mixed-cut --student smollm2 --train-seed 42 --domains wikidata --domains ice_hockey --domains owid --train-tables 0 25 --too-long cut --probabilities"
  "smollm2-mixed-cut-s1 --recipe smollm2-mixed-cut --student smollm2 --train-seed 1 --domains wikidata --domains ice_hockey --domains owid --train-tables 0 25 --too-long cut --probabilities"
  "smollm2-mixed-cut-s2 --recipe smollm2-mixed-cut --student smollm2 --train-seed 2 --domains wikidata --domains ice_hockey --domains owid --train-tables 0 25 --too-long cut --probabilities"
  "gemma3-wikidata-s42 --recipe gemma3-wikidata --student gemma3 --train-seed 42 --probabilities --domains wikidata --train-tables 0 70"
  "gemma3-mixed-cut-s42 --recipe gemma3-mixed-cut --student gemma3 --train-seed 42 --domains wikidata --domains ice_hockey --domains owid --train-tables 0 25 --too-long cut --device-batch 1 --probabilities"
  "gemma3-mixed-cut-s1 --recipe gemma3-mixed-cut --student gemma3 --train-seed 1 --domains wikidata --domains ice_hockey --domains owid --train-tables 0 25 --too-long cut --device-batch 1 --probabilities"
  "gemma3-mixed-cut-s2 --recipe gemma3-mixed-cut --student gemma3 --train-seed 2 --domains wikidata --domains ice_hockey --domains owid --train-tables 0 25 --too-long cut --device-batch 1 --probabilities"
  "gemma3-vote-cut-s42 --recipe gemma3-vote-cut --student gemma3 --train-seed 42 --domains wikidata --domains ice_hockey --domains owid --train-tables 0 25 --too-long cut --device-batch 1 --probabilities --train-source config --import-config configs/import/quintd1_vote_gpt4_twice.yaml"
  "gemma3-vote-cut-s1 --recipe gemma3-vote-cut --student gemma3 --train-seed 1 --domains wikidata --domains ice_hockey --domains owid --train-tables 0 25 --too-long cut --device-batch 1 --probabilities --train-source config --import-config configs/import/quintd1_vote_gpt4_twice.yaml"
  "gemma3-vote-cut-s2 --recipe gemma3-vote-cut --student gemma3 --train-seed 2 --domains wikidata --domains ice_hockey --domains owid --train-tables 0 25 --too-long cut --device-batch 1 --probabilities --train-source config --import-config configs/import/quintd1_vote_gpt4_twice.yaml"
  "gemma3-vote-agree-cut-s42 --recipe gemma3-vote-agree-cut --student gemma3 --train-seed 42 --domains wikidata --domains ice_hockey --domains owid --train-tables 0 25 --too-long cut --device-batch 1 --probabilities --train-source config --import-config configs/import/quintd1_vote_gpt4_twice.yaml --example-weights agreement"
  "gemma3-vote-agree-cut-s1 --recipe gemma3-vote-agree-cut --student gemma3 --train-seed 1 --domains wikidata --domains ice_hockey --domains owid --train-tables 0 25 --too-long cut --device-batch 1 --probabilities --train-source config --import-config configs/import/quintd1_vote_gpt4_twice.yaml --example-weights agreement"
  "gemma3-mixed-cut-t50-s42 --recipe gemma3-mixed-cut-t50 --student gemma3 --train-seed 42 --domains wikidata --domains ice_hockey --domains owid --train-tables 0 50 --too-long cut --device-batch 1 --probabilities"
  "gemma3-mixed-cut-t50-drafted-s1 --recipe gemma3-mixed-cut-t50-drafted --student-engine transformers-drafted --student gemma3 --train-seed 1 --domains wikidata --domains ice_hockey --domains owid --train-tables 0 50 --too-long cut --device-batch 1 --probabilities"
  "gemma3-mixed-cut-t50-drafted-s2 --recipe gemma3-mixed-cut-t50-drafted --student-engine transformers-drafted --student gemma3 --train-seed 2 --domains wikidata --domains ice_hockey --domains owid --train-tables 0 50 --too-long cut --device-batch 1 --probabilities"
  "gemma3-mixed-cut-retrained-s42 --recipe gemma3-mixed-cut-retrained --work runs/bench/distill_quintd/gemma3-mixed-cut-s42 --student gemma3 --train-seed 42 --domains wikidata --domains ice_hockey --domains owid --train-tables 0 25 --too-long cut --device-batch 1 --probabilities"
  "gemma3-mixed-cut-drafted-s42 --recipe gemma3-mixed-cut-drafted --work runs/bench/distill_quintd/gemma3-mixed-cut-s42 --student-engine transformers-drafted --student gemma3 --train-seed 42 --domains wikidata --domains ice_hockey --domains owid --train-tables 0 25 --too-long cut --device-batch 1 --probabilities"
  "gemma3-mixed-cut-located-s42 --recipe gemma3-mixed-cut-located --work runs/bench/distill_quintd/gemma3-mixed-cut-s42 --student-engine transformers-drafted --student gemma3 --train-seed 42 --domains wikidata --domains ice_hockey --domains owid --train-tables 0 25 --too-long cut --device-batch 1 --probabilities"
  "gemma3-mixed-cut-t50-drafted-512tok-s1 --recipe gemma3-mixed-cut-t50-drafted-512tok --work runs/bench/distill_quintd/gemma3-mixed-cut-t50-drafted-s1 --student-engine transformers-drafted --student gemma3 --train-seed 1 --domains wikidata --domains ice_hockey --domains owid --train-tables 0 50 --too-long cut --device-batch 1 --probabilities --max-new-tokens 512"
  "gemma3-mixed-cut-t50-drafted-512tok-s2 --recipe gemma3-mixed-cut-t50-drafted-512tok --work runs/bench/distill_quintd/gemma3-mixed-cut-t50-drafted-s2 --student-engine transformers-drafted --student gemma3 --train-seed 2 --domains wikidata --domains ice_hockey --domains owid --train-tables 0 50 --too-long cut --device-batch 1 --probabilities --max-new-tokens 512"
  "gemma3-mixed-cut-t70-drafted-512tok-s1 --recipe gemma3-mixed-cut-t70-drafted-512tok --student-engine transformers-drafted --student gemma3 --train-seed 1 --domains wikidata --domains ice_hockey --domains owid --train-tables 0 70 --too-long cut --device-batch 1 --probabilities --max-new-tokens 512"
  "gemma3-mixed-cut-t70-drafted-512tok-s2 --recipe gemma3-mixed-cut-t70-drafted-512tok --student-engine transformers-drafted --student gemma3 --train-seed 2 --domains wikidata --domains ice_hockey --domains owid --train-tables 0 70 --too-long cut --device-batch 1 --probabilities --max-new-tokens 512"
  "gemma3-mixed-cut-t50-drafted-512tok-stop-s1 --recipe gemma3-mixed-cut-t50-drafted-512tok-stop --work runs/bench/distill_quintd/gemma3-mixed-cut-t50-drafted-s1 --student-engine transformers-drafted-stop --student gemma3 --train-seed 1 --domains wikidata --domains ice_hockey --domains owid --train-tables 0 50 --too-long cut --device-batch 1 --probabilities --max-new-tokens 512"
  "gemma3-mixed-cut-t50-drafted-512tok-stop-s2 --recipe gemma3-mixed-cut-t50-drafted-512tok-stop --work runs/bench/distill_quintd/gemma3-mixed-cut-t50-drafted-s2 --student-engine transformers-drafted-stop --student gemma3 --train-seed 2 --domains wikidata --domains ice_hockey --domains owid --train-tables 0 50 --too-long cut --device-batch 1 --probabilities --max-new-tokens 512"
  "gemma3-mixed-cut-t70-drafted-512tok-stop-s1 --recipe gemma3-mixed-cut-t70-drafted-512tok-stop --work runs/bench/distill_quintd/gemma3-mixed-cut-t70-drafted-512tok-s1 --student-engine transformers-drafted-stop --student gemma3 --train-seed 1 --domains wikidata --domains ice_hockey --domains owid --train-tables 0 70 --too-long cut --device-batch 1 --probabilities --max-new-tokens 512"
  "gemma3-mixed-cut-t70-drafted-512tok-stop-s2 --recipe gemma3-mixed-cut-t70-drafted-512tok-stop --work runs/bench/distill_quintd/gemma3-mixed-cut-t70-drafted-512tok-s2 --student-engine transformers-drafted-stop --student gemma3 --train-seed 2 --domains wikidata --domains ice_hockey --domains owid --train-tables 0 70 --too-long cut --device-batch 1 --probabilities --max-new-tokens 512"
  "gemma3-mixed-cut-t50-drafted-512tok-stop-s3 --recipe gemma3-mixed-cut-t50-drafted-512tok-stop --student-engine transformers-drafted-stop --student gemma3 --train-seed 3 --domains wikidata --domains ice_hockey --domains owid --train-tables 0 50 --too-long cut --device-batch 1 --probabilities --max-new-tokens 512"
  "gemma3-mixed-cut-t50-r64-stop-s1 --recipe gemma3-mixed-cut-t50-r64-stop --rank 64 --student-engine transformers-drafted-stop --student gemma3 --train-seed 1 --domains wikidata --domains ice_hockey --domains owid --train-tables 0 50 --too-long cut --device-batch 1 --probabilities --max-new-tokens 512"
  "gemma3-mixed-cut-t50-r64-stop-s2 --recipe gemma3-mixed-cut-t50-r64-stop --rank 64 --student-engine transformers-drafted-stop --student gemma3 --train-seed 2 --domains wikidata --domains ice_hockey --domains owid --train-tables 0 50 --too-long cut --device-batch 1 --probabilities --max-new-tokens 512"
  "gemma3-mixed-cut-t50-e2-stop-s1 --recipe gemma3-mixed-cut-t50-e2-stop --epochs 2 --student-engine transformers-drafted-stop --student gemma3 --train-seed 1 --domains wikidata --domains ice_hockey --domains owid --train-tables 0 50 --too-long cut --device-batch 1 --probabilities --max-new-tokens 512"
  "gemma3-mixed-cut-t50-e2-stop-s2 --recipe gemma3-mixed-cut-t50-e2-stop --epochs 2 --student-engine transformers-drafted-stop --student gemma3 --train-seed 2 --domains wikidata --domains ice_hockey --domains owid --train-tables 0 50 --too-long cut --device-batch 1 --probabilities --max-new-tokens 512"
  "gemma3-mixed-cut-t50-e3-stop-s1 --recipe gemma3-mixed-cut-t50-e3-stop --epochs 3 --student-engine transformers-drafted-stop --student gemma3 --train-seed 1 --domains wikidata --domains ice_hockey --domains owid --train-tables 0 50 --too-long cut --device-batch 1 --probabilities --max-new-tokens 512"
  "gemma3-mixed-cut-t50-e3-stop-s2 --recipe gemma3-mixed-cut-t50-e3-stop --epochs 3 --student-engine transformers-drafted-stop --student gemma3 --train-seed 2 --domains wikidata --domains ice_hockey --domains owid --train-tables 0 50 --too-long cut --device-batch 1 --probabilities --max-new-tokens 512"
  "gemma3-mixed-cut-t50-e3-stop-s3 --recipe gemma3-mixed-cut-t50-e3-stop --epochs 3 --student-engine transformers-drafted-stop --student gemma3 --train-seed 3 --domains wikidata --domains ice_hockey --domains owid --train-tables 0 50 --too-long cut --device-batch 1 --probabilities --max-new-tokens 512"
  "gemma3-mixed-cut-t50-lr2e-4-stop-s1 --recipe gemma3-mixed-cut-t50-lr2e-4-stop --lr 0.0002 --student-engine transformers-drafted-stop --student gemma3 --train-seed 1 --domains wikidata --domains ice_hockey --domains owid --train-tables 0 50 --too-long cut --device-batch 1 --probabilities --max-new-tokens 512"
  "gemma3-mixed-cut-t50-lr2e-4-stop-s2 --recipe gemma3-mixed-cut-t50-lr2e-4-stop --lr 0.0002 --student-engine transformers-drafted-stop --student gemma3 --train-seed 2 --domains wikidata --domains ice_hockey --domains owid --train-tables 0 50 --too-long cut --device-batch 1 --probabilities --max-new-tokens 512"
  "gemma3-mixed-cut-t50-full-stop-s1 --recipe gemma3-mixed-cut-t50-full-stop --finetuning full --lr 0.00005 --student-engine transformers-drafted-stop --student gemma3 --train-seed 1 --domains wikidata --domains ice_hockey --domains owid --train-tables 0 50 --too-long cut --device-batch 1 --probabilities --max-new-tokens 512"
  "gemma3-mixed-cut-t50-full-stop-s2 --recipe gemma3-mixed-cut-t50-full-stop --finetuning full --lr 0.00005 --student-engine transformers-drafted-stop --student gemma3 --train-seed 2 --domains wikidata --domains ice_hockey --domains owid --train-tables 0 50 --too-long cut --device-batch 1 --probabilities --max-new-tokens 512"
  "gemma3-mixed-cut-t50-clean2-stop-s1 --recipe gemma3-mixed-cut-t50-clean2-stop --repeat-no-error 2 --student-engine transformers-drafted-stop --student gemma3 --train-seed 1 --domains wikidata --domains ice_hockey --domains owid --train-tables 0 50 --too-long cut --device-batch 1 --probabilities --max-new-tokens 512"
  "gemma3-mixed-cut-t50-clean2-stop-s2 --recipe gemma3-mixed-cut-t50-clean2-stop --repeat-no-error 2 --student-engine transformers-drafted-stop --student gemma3 --train-seed 2 --domains wikidata --domains ice_hockey --domains owid --train-tables 0 50 --too-long cut --device-batch 1 --probabilities --max-new-tokens 512"
  "gemma3-mixed-cut-t50-clean2-bf16-stop-s1 --recipe gemma3-mixed-cut-t50-clean2-bf16-stop --work runs/bench/distill_quintd/gemma3-mixed-cut-t50-clean2-stop-s1 --repeat-no-error 2 --student-engine transformers-drafted-bf16-stop --student gemma3 --train-seed 1 --domains wikidata --domains ice_hockey --domains owid --train-tables 0 50 --too-long cut --device-batch 1 --probabilities --max-new-tokens 512"
  "gemma3-mixed-cut-t50-drafted-512tok-rows-stop-s1 --recipe gemma3-mixed-cut-t50-drafted-512tok-rows-stop --work runs/bench/distill_quintd/gemma3-mixed-cut-t50-drafted-s1 --student-engine transformers-drafted-rows-stop --student gemma3 --train-seed 1 --domains wikidata --domains ice_hockey --domains owid --train-tables 0 50 --too-long cut --device-batch 1 --probabilities --max-new-tokens 512"
  "gemma3-mixed-cut-t50-drafted-512tok-rows-bf16-stop-s1 --recipe gemma3-mixed-cut-t50-drafted-512tok-rows-bf16-stop --work runs/bench/distill_quintd/gemma3-mixed-cut-t50-drafted-s1 --student-engine transformers-drafted-rows-bf16-stop --student gemma3 --train-seed 1 --domains wikidata --domains ice_hockey --domains owid --train-tables 0 50 --too-long cut --device-batch 1 --probabilities --max-new-tokens 512"
  "gemma3-mixed-cut-t50-drafted-512tok-rows-stop-fp32train-s1 --recipe gemma3-mixed-cut-t50-drafted-512tok-rows-stop-fp32train --work runs/bench/distill_quintd/gemma3-mixed-cut-t50-drafted-s1 --student-engine transformers-drafted-rows-stop --student gemma3 --train-seed 1 --domains wikidata --domains ice_hockey --domains owid --train-tables 0 50 --too-long cut --device-batch 1 --probabilities --max-new-tokens 512"
  "gemma3-mixed-cut-t50-drafted-512tok-rows-stop-gsmarena-s1 --recipe gemma3-mixed-cut-t50-drafted-512tok-rows-stop-gsmarena --work runs/bench/distill_quintd/gemma3-mixed-cut-t50-drafted-s1 --student-engine transformers-drafted-rows-stop --student gemma3 --train-seed 1 --domains wikidata --domains ice_hockey --domains owid --train-tables 0 50 --too-long cut --device-batch 1 --probabilities --max-new-tokens 512 --eval-domains gsmarena"
  "gemma3-mixed-cut-drafted-bf16-s42 --recipe gemma3-mixed-cut-drafted-bf16 --work runs/bench/distill_quintd/gemma3-mixed-cut-s42 --student-engine transformers-drafted-bf16 --student gemma3 --train-seed 42 --domains wikidata --domains ice_hockey --domains owid --train-tables 0 25 --too-long cut --device-batch 1 --probabilities"
  "gemma3-vote-agree-cut-llamacpp-s42 --recipe gemma3-vote-agree-cut-llamacpp --work runs/bench/distill_quintd/gemma3-vote-agree-cut-s42 --student-engine llamacpp --student gemma3 --train-seed 42 --domains wikidata --domains ice_hockey --domains owid --train-tables 0 25 --too-long cut --device-batch 1 --probabilities --train-source config --import-config configs/import/quintd1_vote_gpt4_twice.yaml --example-weights agreement"
)
case "$SPLIT" in
  dev) log_suffix="" ;;
  test)
    log_suffix=".test"
    if [[ $# -eq 0 ]]; then
      echo "distill_protocol: SPLIT=test judges the test split of the runs you name, never all of them" >&2
      exit 2
    fi
    ;;
  *)
    echo "distill_protocol: SPLIT is dev or test, not '$SPLIT'" >&2
    exit 2
    ;;
esac
case "$BASE" in
  1) base="--base" ;;
  0) base="--no-base" ;;
  *)
    echo "distill_protocol: BASE is 1 or 0, not '$BASE'" >&2
    exit 2
    ;;
esac
known=$(printf '%s\n' "${RUNS[@]%% *}")
for wanted in "$@"; do
  if ! grep -qx -- "$wanted" <<< "$known"; then
    echo "distill_protocol: no run '$wanted'; the runs are: $(tr '\n' ' ' <<< "$known")" >&2
    exit 2
  fi
done
for run in "${RUNS[@]}"; do
  read -r label options <<< "$run"
  if [[ $# -gt 0 && ! " $* " =~ " $label " ]]; then continue; fi
  mkdir -p runs/bench/distill_quintd
  log="runs/bench/distill_quintd/$label$log_suffix.log"
  echo "[distill_protocol $(date +%T)] $label ($SPLIT split)" >&2
  # shellcheck disable=SC2086  # the options are words
  if ! "$PYTHON" bench/distill_quintd.py --label "$label" $options --split "$SPLIT" --samples "$SAMPLES" "$base" --judging-workers "$WORKERS" --gamma --note "$NOTE" \
      >> "$log" 2>&1; then
    echo "[distill_protocol] $label failed: see $log" >&2
  fi
done
