#!/usr/bin/env bash
# GPU jobs for one device session, each pinned to one GPU so that two can run side by side on a
# two-GPU machine.  Run from the repository root:
#
#   bash benchmarks/gpu_live_session.sh GPU OUT_DIR JOB...
#
# Jobs (each in its own process, under its own time limit, logged to OUT_DIR/gpuGPU.log):
#   info         GPU, driver and package versions
#   smoke        a two-layer model: graph and eager verify through the executor
#   tests        the AITER GPU tests
#   mla-tests    the MLA/MoE GPU tests (tests/aiter/test_aiter_mla_gpu.py); prints their outcomes
#                and the whole V2-Lite model's step times (a JSON line)
#   host         benchmarks/bench_aiter_host_overhead.py     -> host_overhead.json
#   host-pin     the same, pinned to CPU 3 (taskset, sched_setaffinity, one torch thread)
#   host-keep    the same with cuBLAS's memset nodes left in the graphs (for comparison)
#   graphlaunch  benchmarks/bench_aiter_graph_launch.py      -> graph_launch.json, graph_dots.tar.gz
#   replay       benchmarks/bench_aiter_replay_vs_kernels.py -> replay_vs_kernels.json
#   stability    benchmarks/bench_aiter_eager_stability.py   -> eager_stability.json
#   mla          benchmarks/bench_aiter_mla_probe.py (AITER's Triton MLA decode)
#   straggler    benchmarks/bench_aiter_straggler.py         -> straggler.json
#   straggler2d  the same on 14 cases where the 2D verify kernel runs (the rule's weakest)
#                                                             -> straggler2d.json
#   straggler3d  the same on 12 cases in the 3D split-KV regime of the long-context sample's
#                worst band (10-32 requests at width 4, KV 3k-16k)  -> straggler3d.json
#   straggler70b eager verify with one long straggler on the Llama-3.1-70B tp-8 shard: width 6 at
#                9-26 requests (the long-context pad run's worst band), widths 4 and 8 beside
#                (`bench_aiter_straggler.py --tp 8 --eager`; 175 s on 2026-12-02, h200-2026-12-02f;
#                benchmarks/straggler_vs_profile.py compares it with the profile) -> straggler70b.json
#   straggler70b-wave2  the same shard's eager verify at width 6 and 22-26 requests, a second 3D
#                wave 3-22% full, with 4-5 long requests as its long-context runs batch them (and
#                with them last in the launch): where the partial-wave form errs +12 to +23% on
#                those runs and +2.5 to +12% on straggler70b's one-straggler cases
#                (`straggler_3d_waves.py --runs ...` scores it)          -> straggler70b_wave2.json
#   bswaves70b   eager verify on the 70B tp-8 shard at batch sizes between its eager grid's (13-15
#                and 17-19 at width 8, 13-15 and 17-21 at width 6, where the 3D kernel's second
#                wave starts at 16 and 22 requests), each with its uniform batches at five KV:
#                judges `backend.bs_interp = waves` against the line on shapes neither was built
#                from (`straggler_vs_profile.py --bs-interp waves|line`) -> bswaves70b.json
#   bswaves8b    the same for the 8B's eager verify at 9, 11, 13, 15, 18, 20 and 28 requests
#                (widths 4 and 8), between the ladder sizes its eager grid takes from the graphs
#                                                             -> bswaves8b.json
#   rates        benchmarks/bench_aiter_rates.py: V2-Lite's kernel classes alone (GEMM, fused
#                MoE, MLA decode, element-wise, flash, launch floor; the MLA decode
#                by launch size and flash by q x prefix: the curves)  -> rates.json
#   coarse8b     a quick, coarse Llama-3.1-8B profile       -> coarse-llama-3.1-8b__H200.parquet
#   profile8b    `specsched profile` for Llama-3.1-8B: the ladder x widths 1-8 x KV to 32k and the
#                default eager and prefill grids, then 40 held-out shapes off that grid (the
#                default --heldout; split=heldout rows)  -> llama-3.1-8b__H200.parquet
#   heldout8b    48 held-out shapes off the shipped Llama-3.1-8B profile's grid, measured now and
#                written with the shipped rows (`profile --heldout-only --base`; about 1-2 min)
#                                                             -> llama-3.1-8b__H200.parquet
#   prefill-dense:MODEL  llama-3.1-8b or llama-3.1-70b (the tp-8 shard): prefills every 32 tokens
#                from 32 to 1,536 (and the grid's tokens above) at the shipped prefix lines, in a
#                profile of prefills and one verify and draft point (-> prefill_dense_MODEL.parquet;
#                212 prefills took 142 s on the 8B on 2026-12-05, and the shard had not finished in
#                290 s: its journal, journal_prefill-dense-MODEL.jsonl, carried back as journals/
#                continues it in the next call), then the shipped profile with those as its prefill
#                rows at its own level per prefix line (`profile_take_rows.py --keep-level`):
#                pooled over the shipped live conversation runs, the 8B's prefills between the
#                grid's 128-1,024 tokens err -5.9 to +5.5%, the 70B's -1.3 to +2.9%
#                (benchmarks/prefill_between_grid.py; docs/backends.md, *Prefill between grid
#                tokens*); measured for the 8B on 2026-12-05 it was worse than the shipped grid
#                (h200-2026-12-05/README.md), so it is not shipped      -> MODEL__H200.parquet
#   prefill-line:MODEL  prefills of every token count from 1 to 1,536 at prefix 0 (3 timed
#                launches each; journal journal_prefill-line-MODEL.jsonl). The 8B's took 532 s
#                in one call (h200-2026-12-05b) and is shipped as its profile's prefill line
#                (`profile_take_rows.py --add-line`; docs/backends.md, *Prefill line*); the 70B
#                shard's would take two or three calls        (-> prefill_line_MODEL.parquet)
#   profile70b   `profile8b` for the Llama-3.1-70B tp-8 shard on a 14-size ladder x KV to 32k at 5
#                points (80 layers; the whole grid and 40 held-out shapes took 424 s on 2026-12-02)
#                                                             -> llama-3.1-70b__H200.parquet
#   profile70b-prefill  the 70B profile's journal (carry benchmarks/results/h200-2026-12-02d/
#                journal_profile70b.jsonl as journals/journal_profile70b.jsonl) grown by prefill
#                points at 1,088, 1,152 and 1,280 tokens: live prefills of 1,057-1,250 tokens run
#                about 3% below the line between the grid's 1,024 and 1,536 (docs/backends.md)
#                                                             -> llama-3.1-70b__H200.parquet
#   profile70b-eagerkv  the same journal (carry benchmarks/results/h200-2026-12-02e/
#                journal_profile70b.jsonl) grown by eager verify and draft-extend points at KV 16,384
#                and 32,768: on the long-context sample's 70B pad run, eager verify at 9-32
#                requests and KV 4k-16k erred 6.2%, its worst steps (KV 16k, above the eager grid's
#                8,192) +16% (h200-2026-12-02e/README.md)    -> llama-3.1-70b__H200.parquet
#   profile70b-eagerbs  the same journal grown by eager batch sizes 9, 10, 12, 20, 22, 23, 24 and
#                28 and eager width 6, where the width-6 launch changes shape between the eager
#                grid's 8, 16 and 32 (the pad run's worst band; straggler70b measured the uniform
#                curve 4-21% off there). Cut off at 400 s on 2026-12-02 after the verify points of
#                9-24 requests, finished in 101 s from that journal (h200-2026-12-02g; shipped)
#                                                             -> llama-3.1-70b__H200.parquet
#   live-long:POLICY[:N] live run of the long-context sample (traces/samples/
#                synth_longctx_200.parquet: 200 bursty requests, prompts median 8k; the first N
#                with :N) on Llama-3.1-8B under --policy POLICY (fixed, pad, split, bucket).
#                `split` runs most verifies eagerly: 194 of the 200 requests took 559 s on
#                2026-12-01 (holds 499 s, GPU 114 s), so give it a call alone or use :180
#   live-long70b:POLICY  the same on the Llama-3.1-70B tp-8 shard. Under pad, 72 requests took 343 s
#                on 2026-12-02 (holds 256 s, GPU 38 s), 73 more 261 s and the last 55 336 s, each
#                call carrying the last one's journal (done: h200-2026-12-02e/live_long70b_pad)
#                Under bucket, 74 requests in 243 s on 2026-12-04 and the other 126 in 359 s
#                (with the journal's replay) in a second call (done: h200-2026-12-04c)
#   live-70b:N   live run of the first N conversation requests on the Llama-3.1-70B tp-8 shard
#   calibrate8b[:TAG]  `specsched calibrate` of the shipped Llama-3.1-8B profile on this GPU: 24
#                of its grid points re-measured, one factor per pass group, within --budget-s 120
#                (limit 150 s); a TAG keeps several in one call apart
#                                                  -> llama-3.1-8b__H200.calibrated[_TAG].parquet
#   calibrate70b the same for the Llama-3.1-70B tp-8 shard  -> llama-3.1-70b__H200.calibrated.parquet
#   calibrate-conv:MODEL:POLICY:N  `specsched calibrate --trace` of the shipped profile of MODEL
#                (llama-3.1-8b, llama-3.1-70b at tp 8, the DeepSeek models with engine.max_draft 3
#                as their live-*p runs), its anchors chosen where the first N
#                conversation requests under --policy POLICY spend their time; run it beside
#                calibrate8b / calibrate70b and before the live run of the same requests to see
#                which set of anchors tracks the run (done for four runs: h200-2026-12-04f)
#                                 -> MODEL__H200.calibrated_conv_POLICYN.parquet
#   calibrate-v2lite[:TAG]  the same for DeepSeek-V2-Lite (33 s on 2026-12-02)
#                                              -> deepseek-v2-lite__H200.calibrated[_TAG].parquet
#   calibrate-tokens:MODEL  `specsched calibrate --residual tokens` of the shipped profile of
#                MODEL (llama-3.1-70b at tp 8): each group also x its anchors' residual by
#                token count, measured and fitted in one command
#                                              -> MODEL__H200.calibrated_tokens.parquet
#   capture-state  benchmarks/bench_capture_state.py: DeepSeek-V2-Lite graph replays after SGLang's
#                start-up captures and after each of a list of later captures -> capture_state.json
#   capture-state70b, capture-state8b  the same on the Llama-3.1-70B tp-8 shard and on Llama-3.1-8B,
#                ladder 1-32: does a verify graph of b requests replay as fast after SGLang's
#                start-up captures as after a draft-extend capture of b (how profiles were timed
#                until 2026-12-03)?          -> capture_state_70b.json, capture_state_8b.json
#   capture-state-prefill  DeepSeek-V2-Lite prefills of 1,024-8,192 tokens before any capture, after
#                the start-up captures and after later ones   -> capture_state_prefill.json
#   after-burst  benchmarks/bench_after_burst.py: DeepSeek-V2-Lite decode probes before and after
#                15 s of 8,192-token prefills, nvidia-smi sampled beside them
#                                                     -> after_burst.json, smi_after_burst.csv
#   live-conv:N  live `simulate --backend aiter` of the first N requests of the conversation sample
#   live-split:N the same with --policy split (a what-if: widths other than 4 run eagerly)
#   live-convp:POLICY:N  the first N conversation requests on Llama-3.1-8B under --policy POLICY
#                (pad, bucket: the what-ifs that keep a mixed-width batch in one launch; every
#                width but 4 runs eagerly). pad:400 took 461 s for 253 requests and 240 s more
#                from that journal, bucket:150 211 s (done: h200-2026-12-04e)
#   live-70bp:POLICY:N   the same on the Llama-3.1-70B tp-8 shard; bucket:150 took 424 s (done:
#                h200-2026-12-04e)
#   live-v2litep:POLICY:N  the same on DeepSeek-V2-Lite with engine.max_draft 3: its MLA decode
#                kernels take at most 4 rows a request, so wider proposals are capped (a run
#                without the cap is refused before it starts); bucket:150 224 s, split:150 217 s (done:
#                h200-2026-12-05)
#   live-code    live `simulate --backend aiter` of the whole code sample
#   live-adaptive:N  live run of the first N conversation requests with --controller sglang-adaptive
#                (SGLang PR #24055's per-bs candidates: widths 2, 4 and 8 below bs 64)
#   live-schedule:N  the same with --controller schedule and SCHEDULE (vLLM's per-bs format)
#   profile-v2lite  `specsched profile` for DeepSeek-V2-Lite (MLA + MoE, MTP draft) up to bs 48,
#                with the default 40 held-out shapes. Its ladder has every capture size up to 8
#                and 10-20 in steps of 2 or 4: with 1, 2, 4, 8, 16, 24 only (2026-12-01, 312 s)
#                the live steps at the sizes between were predicted 2.5-3.7% (verify) and up to
#                6.3% (draft-extend) short, as if a MoE model's time bent between grid points.
#                274 s on 2026-12-02 (h200-2026-12-02e). A MoE model's prefill grid now also
#                measures 1, 2, 4, ..., 32 tokens (profiling.prefill_grid): with 64 first, live
#                prefills under 64 tokens took the 64-token time (2 tokens: 5.3 ms live, 12.6 ms
#                predicted). Done on 2026-12-02 (h200-2026-12-02f, 91 s from the journal of
#                h200-2026-12-02e: the small prefills and the held-out shapes)
#   profile-v2lite-long  profile-v2lite's grid grown for long context (KV line 16,384, prefill
#                prefixes 16,384 and 32,768), from its journal (h200-2026-12-02f), with the MLA
#                decode kernel's occupancy in its metadata (straggler-aware lookups): 180 s on
#                2026-12-03 (h200-2026-12-03). Since then it also asks for the whole capture ladder
#                (BS_V2LITE), eager KV 16,384 and 32,768 and prefills of 3,072 tokens: 189 s from
#                h200-2026-12-03's journal, and with that journal's prefill rows removed it
#                measured every prefill row again on one GPU (245 s; h200-2026-12-03b, shipped)
#                On 2026-12-03 (h200-2026-12-03d) from a copy of that journal without its graph
#                rows of 22+ requests and eager rows (benchmarks/journal_remeasure.py): 313 s, those
#                rows timed after SGLang's last start-up capture (its prefill rows were not shipped)
#   straggler-mla  mixed-KV batches against uniform ones on the MLA decode kernel (DeepSeek-V2-Lite,
#                CASESMLA)                                             -> straggler_mla.json
#   straggler-mla-draft  DeepSeek-V2-Lite draft graphs with one straggler at 10-32 requests (KV
#                about 8k, the straggler 15k-23k), shaped like the long-context runs' worst band:
#                there the residual follows the decode's wave count, -5.5 to +0.7% on one-wave
#                launches and +3.7 to +6.0% where a second wave holds 6-22 of 264 programs, the
#                same within 0.5 points on three GPUs (docs/aiter_mla.md); the two-wave sizes
#                also with the straggler last in the launch  -> straggler_mla_draft.json
#   straggler-mla-order  the MLA decode straggler cases with the long rows first and last in the
#                launch (CASESMLA_ORDER; 46 s on 2026-12-03, h200-2026-12-03c: the same rows 12-32%
#                slower with the long ones last)                    -> straggler_mla_order.json
#   straggler8b-eager  Llama-3.1-8B eager verify batches shaped like the two bands its long-context
#                bucket and pad runs miss (CASES8B_EAGER: width 8 at 2-7 requests with one long
#                row, width 6 at 10-22 requests with one or two), each with its uniform curve;
#                done: h200-2026-12-04d (81 s)                 -> straggler8b_eager.json
#   straggler8b-bs4  the width-8, 4-request case of those as a graph replay -> straggler8b_bs4.json
#   prefill-protocols  DeepSeek-V2-Lite prefills of 8,192 tokens (prefix 0 and 8,192) and 3,240
#                timed as a profile does and as a live run does, on one GPU (52 s on 2026-12-03:
#                the same within 0.1%, h200-2026-12-03b)          -> prefill_protocols.json
#   prefill-protocols-short  the same for the conversation runs' short prefills (64, 256, 512 and
#                1,024 tokens at prefix 0, and 1,024 at prefix 2,048), where DeepSeek-V2-Lite's live
#                prefills ran 1.0-1.1% slower than its profile on three GPUs while calibrate's
#                anchors read 0.8-2.5% faster (h200-2026-12-04d); done: h200-2026-12-04e (55 s:
#                the protocols agree within 0.34%)
#                                                                 -> prefill_protocols_short.json
#   prefill-sweep:MODEL  prefills of deepseek-v2-lite, llama-3.1-8b or llama-3.1-70b (the tp-8
#                shard) between the profile's grid tokens, at its prefix lines and one between,
#                timed as a profile does, with the prefill attention kernel's measured occupancy:
#                the fused-MoE block staircase and the attention's waves the prefill lookup
#                follows (backends/moe_prefill.py, backends/prefill_waves.py;
#                benchmarks/bench_prefill_sweep.py)            -> prefill_sweep_MODEL.json
#   prefill-wave-fill  what a partly filled last wave of the prefill attention costs against a
#                full one: two-layer models with each shipped model's head layout, prefix share
#                at 16,384 over three waves (benchmarks/bench_prefill_wave_fill.py)
#                                                             -> prefill_wave_fill.json
#   prefill-occupancy  the two GPU tests that the prefill attention kernels (dense 2D unified
#                attention, MLA flash forward) hold backends/prefill_waves.py's slots per SM
#   moe-prefill-sweep  the 2026-12-03 sweep: DeepSeek-V2-Lite at prefixes 0 and 16,384
#                                                             -> moe_prefill_sweep.json
#   live-longmlap:MODEL:POLICY[:N]  the long-context sample on deepseek-v2-lite or deepseek-v3
#                under --policy POLICY (split, bucket, pad) with engine.max_draft 3 (the MLA decode
#                kernels take at most 4 rows a request); not yet run. The fixed runs took 512 s
#                (V2-Lite, two calls); plan a call each, carrying the journal
#   live-v3p:POLICY:N  the first N conversation requests on the DeepSeek-V3 shard under --policy
#                POLICY with engine.max_draft 3; not yet run (live-v3:400 took two calls)
#   live-longv2lite[:N]  live run of the long-context sample on DeepSeek-V2-Lite, fixed policy
#                (119 requests in 341 s, the last 81 in 171 s from its journal; done:
#                h200-2026-12-02f/live_longv2lite)
#   live-v2lite:N   live run of the first N conversation requests on DeepSeek-V2-Lite, fixed policy
#   v3-tests     the DeepSeek-V3 shard's GPU tests (tests/aiter/test_aiter_v3_gpu.py: FP8 GEMM and
#                FP8 EP fused MoE against PyTorch, the tp-8 / ep-8 shard built and a verify timed)
#   v3-moe       only the V3 FP8 EP MoE / MLA decode check of v3-tests
#   profile-v3-long  profile-v3's grid grown for the long-context sample (its contexts reach
#                26,387 tokens): KV lines 8,192 and 28,672 (the journal's max_context, 32,768, stays),
#                prefills of 8,192 tokens and prefixes 8,192, 16,384 and 24,576 (chunks of 8,192,
#                SGLang's size on an H200), from h200-2026-12-03b's journal_profile-v3.jsonl
#   live-longv3[:N]  live run of the long-context sample on the DeepSeek-V3 shard, fixed policy
#   profile-v3   `specsched profile` for the DeepSeek-V3 tp-8 / ep-8 shard (FP8, 61 layers + MTP):
#                bs 1-64 with SGLang's ladder sizes 10-48 (the live conversation run's worst band,
#                bs 9-32, was interpolated between 8, 16 and 32; half the 400-request run's
#                verify steps pad to 48, which lay between 32 and 64) x KV to 16k at 3 points, prefill
#                at 32-4,096 tokens (PT_V3), six of them under 256 (a 60-request live run on
#                2026-12-02 stepped up between 242 and 255 tokens, off the grid; the tile
#                thresholds 255/256 and 1,023/1,024 are added) and 1,536-3,072 (the 400-request
#                run's prefills of 2,200-2,600 tokens ran 10% below the line from 1,024 to 4,096),
#                at prefixes 0 and 4,096 (a pass of several requests is looked up along the
#                prefix slope; h200-2026-12-02g's journal holds 1-1,536 tokens of it),
#                eager bs 1, 8, 16; no held-out shapes (heldout-v3 adds them in another call).
#                Alone in a call: on 2026-12-01 the grid of 80 verify points, 10 prefill points
#                and 16 held-out shapes took 436 s; this one has 128 verify points and 8 prefill
#                points, and eager passes now wait behind longer holds (docs/aiter.md, Timing);
#                on 2026-12-02 its eager and prefill rows took 201 s. The journal of that
#                recording (benchmarks/results/h200-2026-12-02b) names 6 fewer prefill lengths, so
#                this job no longer resumes it: about 430 s from scratch
#                                                            -> deepseek-v3__H200.parquet
#   heldout-v3   16 held-out shapes off backends/profiles/deepseek-v3__H200.parquet's grid, written
#                with its rows (about 90 s)                   -> deepseek-v3__H200.parquet
#                after profile-v3 in the same call, off that profile's grid
#                                                            -> deepseek-v3__H200.heldout.parquet
#   sweep70b     verify graphs of the 70B shard at 1, 2, 4, 8 and 16 requests timed as profile sweeps
#                did (right after their own capture) and as they do now (after a draft-extend
#                capture, Runner.capture_for_timing), alternately  -> first_pass_sweep_70b.json
#   sweepv3      the same on the DeepSeek-V3 shard at 1, 8, 16 and 24 -> first_pass_sweep_v3.json
#   eager-sync   benchmarks/bench_aiter_eager_sync.py on the V3 shard: the launch queue's capacity,
#                and why (or whether) its eager prefills outrun their holds -> eager_sync_v3.json
#   live-v3:N    live run of the first N conversation requests on the DeepSeek-V3 shard, fixed policy
#   live-v2lite-unsafe:N  the same with --policy unsafe-derived: every mixed launch's output error
#                (steps.parquet max_abs_error, the MLA path's fixed-width metadata)
#   fidelity-conv:N, fidelity-code
#                `specsched fidelity` (live run and shipped profile) on the same traces
# Live runs are packed as OUT_DIR/live_<name>.tar.gz (summary.json, steps.parquet, ...), to be
# compared on any machine with `specsched fidelity --reference-run`. Each also leaves its journal,
# OUT_DIR/journal_<name>.jsonl (`simulate --journal`), removed once the run finishes. A run cut
# off by its limit keeps every measured call there: copy the file to journals/ here (git ignores
# it), carry journals, and the same job in the next call replays it and goes on (live-v3:400 over
# several calls). The profile
# jobs keep OUT_DIR/journal_<job>.jsonl the same way (`profile --journal`): a sweep cut off by
# its limit goes on in the next call from the rows it measured. Fidelity jobs leave
# OUT_DIR/fidelity_<name>.{md,json}.  DEADLINE (seconds from the start, default 570) bounds
# every job.
set -uo pipefail
gpu=$1; out=$2; shift 2
mkdir -p "$out"
export CUDA_VISIBLE_DEVICES=$gpu PYTHONUNBUFFERED=1
# wheels in .whl/ (amd-aiter, simpy): install them once, before starting jobs on two GPUs
if ls .whl/*.whl >/dev/null 2>&1 && [ ! -d /tmp/site/aiter ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
fi
export PYTHONPATH="/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
# without them every job would fail at import: stop now and say why
if ! python3 -c "import importlib.util as u, sys; sys.exit(0 if u.find_spec('aiter') and u.find_spec('simpy') else 1)"; then
  echo "error: amd-aiter or simpy is not installed: put their wheels in .whl/ (pip download --no-deps -d .whl amd-aiter simpy) and carry .whl" | tee -a "$out/gpu$gpu.log"
  exit 2
fi
log="$out/gpu$gpu.log"
deadline=${DEADLINE:-570}
# SMI=1: the GPU's clocks, power, temperatures and clock-event reasons every 250 ms for the whole
# call (OUT_DIR/smi_gpuGPU.csv); the job lines in the log carry epoch seconds to align them
if [ -n "${SMI:-}" ] && command -v nvidia-smi >/dev/null; then
  nvidia-smi -i "$gpu" --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,\
temperature.memory,utilization.gpu,clocks_event_reasons.active --format=csv -lms 250 \
    > "$out/smi_gpu$gpu.csv" 2>&1 &
  smi_pid=$!
  trap 'kill $smi_pid 2>/dev/null' EXIT
fi
BS="1,2,3,4,5,6,7,8,10,12,14,16,24,32,48,64,96,128,160,192,256"
KV="128,512,2048,4096,8192,16384,32768"
# the 70B shard has 80 layers: a 14 x 5 graph grid keeps its profile within one call
BS70="1,2,3,4,6,8,12,16,24,32,48,64,128,256"
# prefill-dense: every 32 tokens to 1,536 (the 70B's 1,088, 1,152 and 1,280 among them), then
# the shipped grids' tokens above it
PF_DENSE="$(seq -s, 32 32 1536),2048,3072,4096,6144,8192"
KV70="128,512,2048,8192,32768"
# its eager grid grown at the sizes where the shard's width-6 attention launch changes shape
# (16 KV segments from 9 requests, two waves from 23; docs/backends.md) and by width 6
EBS70="1,8,9,10,12,16,20,22,23,24,28,32,64,128,256,384,512"
EW70="1,2,4,6,8,12,16,21"
CONV=traces/samples/azure_conv_eagle_2k.parquet
CODE=traces/samples/azure_code_sps_2k.parquet
LONG=traces/samples/synth_longctx_200.parquet
# straggler cases where AITER's unified attention runs its 2D verify kernel (from about 30
# requests at width 6, 48 at width 4): one to ten stragglers, several lengths, graph padding
CASES2D="verify:30:6:1500:6000:1,verify:40:6:1500:6000:1,verify:48:6:1500:6000:1,\
verify:56:6:1500:6000:1,verify:64:6:1500:6000:1,verify:40:6:1000:8000:4,verify:40:5:1500:3000:10,\
verify:48:6:500:16000:1,verify:48:4:1000:8000:1,verify:64:4:1000:8000:1,verify:64:4:1000:4000:8,\
verify:96:4:1500:6000:2,verify:48/44:6:1500:6000:1,verify:128:4:1500:6000:1"
# straggler cases in the 3D split-KV regime of the long-context sample's worst band (9-32
# requests at width 4, mean KV 3k-8k, 1-5 requests 1.5-3x longer; docs/backends.md)
CASES3D="verify:10:4:4000:8000:1,verify:12:4:4000:8000:1,verify:12/11:4:4000:8000:1,\
verify:16:4:4000:8000:1,verify:16:4:4000:8000:4,verify:16:4:6000:12000:2,verify:16/14:4:5000:9000:2,\
verify:20:4:4000:8000:5,verify:24:4:4000:10000:1,verify:24:4:4000:10000:3,verify:32:4:3000:9000:2,\
verify:12:4:8000:16000:1"
# eager verify at width 6 with one 25k-token straggler among 8k-token requests (the 70B pad run's
# worst band: 9-26 requests, mean KV about 9k, stragglers to 25k), each with its uniform batches;
# widths 4 and 8 beside them. The batch sizes straddle where the shard's attention launch changes
# shape: at width 6, 16 KV segments from 9 requests (32 below) and two waves from 23
CASES70B="verify:9:6:8000:25000:1,verify:10:6:8000:25000:1,verify:11:6:8000:25000:1,\
verify:12:6:8000:25000:1,verify:16:6:8000:25000:1,verify:19:6:8000:25000:1,verify:20:6:8000:25000:1,\
verify:22:6:8000:25000:1,verify:23:6:8000:25000:1,verify:24:6:8000:25000:1,verify:26:6:8000:25000:1,\
verify:16:6:8000:16000:2,verify:10:4:8000:25000:1,verify:20:8:8000:25000:1,verify:14:8:8000:25000:1"
# straggler70b-wave2: 4-5 requests of 17k-25k among about 8.5k at 22-26 requests, width 6, eager
# (the long-context runs' batches there hold 4-5 requests over 1.5 x the mean), first and last
CASES_W2_70B="verify:22:6:8500:22000:4,verify:23:6:8500:22000:4,verify:24:6:8500:25000:5,\
verify:25:6:8500:25000:5,verify:26:6:8500:22000:4,verify:23:6:8500:22000:4:last,\
verify:24:6:8500:25000:5:last,verify:21:6:8500:22000:4"
# bswaves70b / bswaves8b: batch sizes between the eager grids' (each case also times its uniform
# batches at five KV lengths, which straggler_vs_profile.py sets beside the profile's lookups)
CASES_BSW70B="verify:13:8:8000:25000:1,verify:14:8:8000:16000:1,verify:15:8:8000:25000:1,\
verify:17:8:8000:25000:1,verify:18:8:8000:16000:1,verify:19:8:8000:25000:1,\
verify:13:6:8000:25000:1,verify:15:6:8000:25000:1,verify:17:6:8000:25000:1,\
verify:18:6:8000:16000:1,verify:21:6:8000:25000:1"
CASES_BSW8B="verify:9:8:4000:12000:1,verify:11:8:4000:12000:1,verify:13:4:4000:12000:1,\
verify:15:4:4000:12000:1,verify:18:4:4000:12000:1,verify:20:8:2000:8000:1,verify:28:4:2000:8000:1"
# a schedule that switches on the conversation sample (k is capped at num_draft_tokens - 1 = 3,
# as vLLM caps it at num_speculative_tokens; batches there are mostly 1-7 requests)
SCHEDULE=${SCHEDULE:-1-2:3,3-4096:1}
# MLA decode straggler cases on DeepSeek-V2-Lite (the same stage-1 kernel, 16 heads a GPU, as
# DeepSeek-V3's tp-8 shard): the long-context run's regimes (width 4, bs 2-32, mean KV 6k-9k,
# stragglers 1.5-3x) and the V3 conversation run's (bs 40-64, mean KV about 1,100, stragglers
# near 4,100), draft steps and width 2 beside them
CASESMLA="verify:2:4:6000:12000:1,verify:4:4:6000:14000:1,verify:4:4:7000:9000:1,\
verify:8:4:6000:13000:1,verify:8:4:6000:13000:3,verify:16:4:7000:17000:1,verify:16:4:7000:17000:2,\
verify:24:4:8000:23000:1,verify:24:4:8000:23000:3,verify:32:4:8000:23000:2,verify:12/10:4:7000:15000:1,\
verify:40:4:1000:4000:2,verify:48:4:1100:4100:1,verify:48:4:1100:4100:4,verify:48/44:4:1100:4100:1,\
verify:64:4:1000:4000:1,verify:8:2:6000:13000:1,draft:8:1:6000:13000:1,draft:24:1:8000:23000:1,\
draft:48:1:1100:4100:1"
# the same kernel with the stragglers first and last in the launch (rows are dispatched in order,
# so on a launch of two waves the rows placed last make the tail wave): the cells the long-context
# runs miss most (14-40 requests at width 4, mean KV 8k-16k, +5 to +9%; 19 requests padded to 20
# at mean KV 7,400 with one at 11,250, -11%; docs/aiter_mla.md, *Long context*)
# the 8B's eager verify bands that its long-context bucket and pad runs miss (h200-2026-12-04c):
# typical batches of each band, from the live runs' member_kv
CASES8B_EAGER="verify:2:8:7500:18700:1,verify:3:8:9200:22300:1,verify:4:8:11000:23000:1,\
verify:5:8:12000:26000:1,verify:6:8:8000:16000:1,verify:7:8:8000:16000:1,verify:10:6:7000:15800:1,\
verify:14:6:6700:15600:1,verify:14:6:6700:15600:2,verify:17:6:9100:25300:2,verify:20:6:8900:20900:1,\
verify:22:6:8300:25200:2"
# straggler-mla-draft: the V2-Lite long-context runs' draft band, one- and two-wave launches
CASESMLA_DRAFT="draft:10:1:7400:15200:1,draft:12:1:7200:15700:1,draft:14:1:7100:15600:1,\
draft:16:1:7300:11200:1,draft:18:1:8500:23800:1,draft:20:1:8600:21300:1,draft:24:1:7700:16200:1,\
draft:26:1:8800:22900:1,draft:28:1:8600:21900:1,draft:32:1:9100:20900:1,\
draft:18:1:8500:23800:1:last,draft:26:1:8800:22900:1:last,draft:28:1:8600:21900:1:last"
CASESMLA_ORDER="verify:20/19:4:7000:11250:1:first,verify:20/19:4:7000:11250:1:last,\
verify:20:4:8000:23000:1:first,verify:20:4:8000:23000:1:last,verify:14:4:9000:18000:2:first,\
verify:14:4:9000:18000:2:last,verify:24:4:9000:18000:2:first,verify:24:4:9000:18000:2:last,\
verify:28:4:9000:20000:3:first,verify:28:4:9000:20000:3:last,verify:40:4:8000:16000:4:first,\
verify:40:4:8000:16000:4:last,draft:28:1:9000:20000:3:first,draft:28:1:9000:20000:3:last,\
draft:20:1:8000:23000:1:first,draft:20:1:8000:23000:1:last"
# the capture ladder a default run uses (simulator.sglang.capture_ladder: SGLang's speculative
# ladder, 1-8, every 2 to 32, every 4 from 40, cut at its 48 running requests): a live graph
# launch pads to one of these, and the MLA decode's time is not monotone between them (its KV
# split count rounds up past one wave of programs; docs/aiter_mla.md), so each is measured.
# Both shipped DeepSeek grids have all of them since h200-2026-12-03b (V3 keeps 64)
BS_V2LITE="1,2,3,4,5,6,7,8,10,12,14,16,18,20,22,24,26,28,30,32,40,44,48"
BS_V3="1,2,3,4,5,6,7,8,10,12,14,16,18,20,22,24,26,28,30,32,40,44,48,64"
PT_V3="32,64,128,192,224,231,240,242,248,255,256,384,896,1023,1024,1536,2048,2560,3072,4096"
job() {  # job NAME SECONDS COMMAND...
  local name=$1 secs=$2; shift 2
  local left=$((deadline - SECONDS)); [ "$secs" -gt "$left" ] && secs=$left
  if [ "$secs" -le 5 ]; then echo "=== $name skipped: no time left ===" | tee -a "$log"; return; fi
  echo "=== $name (gpu $gpu, $(date +%T), epoch $(date +%s.%N), limit ${secs}s) ===" | tee -a "$log"
  local t0=$SECONDS
  timeout "$secs" "$@" >>"$log" 2>&1
  echo "=== $name rc=$? in $((SECONDS - t0))s, epoch $(date +%s.%N) ===" | tee -a "$log"
}
pjournal() {  # pjournal NAME: a job's journal in OUT_DIR, continued from journals/ if there
  local f="$out/journal_$1.jsonl"
  [ -f "journals/journal_$1.jsonl" ] && cp "journals/journal_$1.jsonl" "$f"
  echo "$f"
}
live() {  # live NAME TRACE [LIMIT [SIMULATE OPTIONS...]]
  local name=$1 trace=$2 lim=${3:-}; shift 3 2>/dev/null || shift $#
  # every executor call goes to OUT_DIR/journal_NAME.jsonl as it is measured; a journal of the
  # same name under journals/ (carried from an earlier call) is replayed first and continued
  local jn; jn=$(pjournal "$name")
  job "live-$name" 580 python3 -m specsched simulate --trace "$trace" --backend aiter \
    --model "${MODEL:-llama-3.1-8b}" ${lim:+--limit $lim} --no-report --progress --out "/tmp/live_$name" \
    --journal "$jn" "$@"
  # a finished run comes back as its results folder; its journal only when cut off (a call
  # returns at most 8 files)
  # (KEEP_JOURNAL=1 keeps it: a journal holds each call's batch digest and wall time, for
  # benchmarks/mla_dispatch_replay.py and for lining the run up with the GPU's telemetry)
  # (an if, not `&&`: with KEEP_JOURNAL set a chain's last test failed and the call ended rc 1)
  if [ -d "/tmp/live_$name" ] && tar -czf "$out/live_$name.tar.gz" -C /tmp "live_$name" \
      && [ -z "${KEEP_JOURNAL:-}" ]; then
    rm -f "$jn"
  fi
}
fid() {  # fid NAME TRACE [LIMIT]
  local name=$1 trace=$2 lim=${3:-}
  job "fidelity-$name" 580 bash -c "python3 -m specsched fidelity --trace '$trace' --model llama-3.1-8b \
    ${lim:+--limit $lim} --out '/tmp/fid_$name' > '$out/fidelity_$name.md'"
  cp "/tmp/fid_$name/fidelity.json" "$out/fidelity_$name.json" 2>/dev/null
}
for j in "$@"; do
  case "$j" in
    info) job info 30 bash -c 'nproc; grep -m1 "model name" /proc/cpuinfo; cat /sys/devices/system/cpu/cpu0/cpufreq/scaling_governor 2>/dev/null; hostname; nvidia-smi --query-gpu=name,uuid,serial,driver_version,memory.total,clocks.sm,clocks.mem --format=csv; python3 -c "import torch,triton,numpy,sys;print(sys.version);print(torch.__version__,torch.version.cuda,triton.__version__,numpy.__version__)"; python3 -c "import numba; print(\"numba\", numba.__version__)" || true' ;;
    smoke) job smoke 120 python3 - <<'PY'
import time, numpy as np
t = time.time()
from backends.aiter import bridge, make_executor
from backends.models import ModelShape
from backends.protocol import VerifyBatch
k = bridge.load_kernels(); print("kernels", k.runtime, k.arch, bridge.versions())
m = ModelShape(name="smoke", layers=2, hidden=1024, heads=8, kv_heads=2, head_dim=128, intermediate=2048, vocab=4096)
ex = make_executor(m, capture_bs=[1, 2, 4], max_context=8192, kv_pool_gib=1)
for graph, pbs in ((True, 4), (False, 3)):
    v = VerifyBatch(bs_real=3, bs_padded=pbs, widths=np.array([4, 4, 4]), kv_lens=np.array([100, 300, 50]), launch_width=4, mode="uniform", graph=graph)
    print("graph" if graph else "eager", "verify", [round(ex.verify(v).latency_s * 1e6, 1) for _ in range(5)], "us")
print("smoke ok in", round(time.time() - t, 1), "s")
PY
      ;;
    tests) job tests 200 python3 -m pytest tests/aiter/test_aiter_gpu.py -q -rs -p no:cacheprovider ;;
    prefill-wave-fill) job prefill-wave-fill 240 python3 benchmarks/bench_prefill_wave_fill.py \
        --measure --json "$out/prefill_wave_fill.json" ;;
    prefill-occupancy) job prefill-occupancy 150 python3 -m pytest -v -rfEs -p no:cacheprovider \
        --junitxml "$out/prefill_occupancy_tests.xml" \
        tests/aiter/test_aiter_gpu.py::test_prefill_attention_holds_the_slots_the_wave_term_counts \
        tests/aiter/test_aiter_mla_gpu.py::test_mla_prefill_attention_holds_the_slots_the_wave_term_counts ;;
    mla-tests) job mla-tests 240 python3 -m pytest tests/aiter/test_aiter_mla_gpu.py \
        tests/aiter/test_aiter_mla_unsafe_gpu.py -v -s -rfEs \
        -p no:cacheprovider --junitxml "$out/mla_tests.xml"
      sed -n '/=== mla-tests (/,$p' "$log" | grep -E 'PASSED|FAILED|ERROR|SKIPPED| in [0-9.]+s|^E |\{"' \
        | cut -c1-240 | tail -40 ;;
    host) job host 180 python3 benchmarks/bench_aiter_host_overhead.py --json "$out/host_overhead.json" ;;
    host-pin) job host-pin 180 taskset -c 3 env OMP_NUM_THREADS=1 python3 benchmarks/bench_aiter_host_overhead.py \
        --pin 3 --json "$out/host_overhead_pinned.json" ;;
    host-keep) job host-keep 150 python3 benchmarks/bench_aiter_host_overhead.py --keep-memsets \
        --json "$out/host_overhead_keep_memsets.json" ;;
    graphlaunch) job graphlaunch 200 python3 benchmarks/bench_aiter_graph_launch.py --json "$out/graph_launch.json" --dump /tmp/graph_dots
      tar -czf "$out/graph_dots.tar.gz" -C /tmp graph_dots 2>/dev/null ;;
    replay) job replay 150 python3 benchmarks/bench_aiter_replay_vs_kernels.py --json "$out/replay_vs_kernels.json" ;;
    stability) job stability 150 python3 benchmarks/bench_aiter_eager_stability.py --json "$out/eager_stability.json" ;;
    mla) job mla 120 python3 benchmarks/bench_aiter_mla_probe.py ;;
    straggler) job straggler 300 python3 benchmarks/bench_aiter_straggler.py --json "$out/straggler.json" ;;
    straggler2d) job straggler2d 300 python3 benchmarks/bench_aiter_straggler.py --json "$out/straggler2d.json" \
        --cases "$CASES2D" ;;
    straggler3d) job straggler3d 300 python3 benchmarks/bench_aiter_straggler.py --json "$out/straggler3d.json" \
        --cases "$CASES3D" ;;
    straggler70b) job straggler70b 300 python3 benchmarks/bench_aiter_straggler.py --model llama-3.1-70b \
        --tp 8 --eager --json "$out/straggler70b.json" --cases "$CASES70B" ;;
    straggler70b-wave2) job straggler70b-wave2 240 python3 benchmarks/bench_aiter_straggler.py \
        --model llama-3.1-70b --tp 8 --eager --json "$out/straggler70b_wave2.json" \
        --cases "$CASES_W2_70B" ;;
    bswaves70b) job bswaves70b 300 python3 benchmarks/bench_aiter_straggler.py --model llama-3.1-70b \
        --tp 8 --eager --json "$out/bswaves70b.json" --cases "$CASES_BSW70B" ;;
    bswaves8b) job bswaves8b 300 python3 benchmarks/bench_aiter_straggler.py --model llama-3.1-8b \
        --eager --json "$out/bswaves8b.json" --cases "$CASES_BSW8B" ;;
    straggler-mla) job straggler-mla 300 python3 benchmarks/bench_aiter_straggler.py --model deepseek-v2-lite \
        --json "$out/straggler_mla.json" --cases "$CASESMLA" ;;
    straggler-mla-draft) job straggler-mla-draft 300 python3 benchmarks/bench_aiter_straggler.py \
        --model deepseek-v2-lite --json "$out/straggler_mla_draft.json" --cases "$CASESMLA_DRAFT" ;;
    straggler8b-eager) job straggler8b-eager 300 python3 benchmarks/bench_aiter_straggler.py --eager \
        --json "$out/straggler8b_eager.json" --cases "$CASES8B_EAGER" ;;
    straggler8b-bs4) job straggler8b-bs4 150 python3 benchmarks/bench_aiter_straggler.py \
        --json "$out/straggler8b_bs4.json" --cases verify:4:8:11000:23000:1 ;;
    straggler-mla-order) job straggler-mla-order 300 python3 benchmarks/bench_aiter_straggler.py \
        --model deepseek-v2-lite --json "$out/straggler_mla_order.json" --cases "$CASESMLA_ORDER" ;;
    moe-prefill-sweep) job moe-prefill-sweep 240 python3 benchmarks/bench_prefill_sweep.py \
        --measure --shapes moe-2026-12-03 --json "$out/moe_prefill_sweep.json" ;;
    prefill-sweep:*) m=${j#prefill-sweep:}
        job "prefill-sweep-$m" 300 python3 benchmarks/bench_prefill_sweep.py --model "$m" \
        $([ "$m" = llama-3.1-70b ] && echo --tp 8) --measure --json "$out/prefill_sweep_$m.json" ;;
    prefill-protocols) job prefill-protocols 150 python3 benchmarks/bench_prefill_protocols.py \
        --model deepseek-v2-lite --shapes 8192@0,8192@8192,3240@0 --json "$out/prefill_protocols.json" ;;
    prefill-protocols-short) job prefill-protocols-short 150 python3 benchmarks/bench_prefill_protocols.py \
        --model deepseek-v2-lite --shapes 64@0,256@0,512@0,1024@0,1024@2048 \
        --json "$out/prefill_protocols_short.json" ;;
    rates) job rates 120 python3 benchmarks/bench_aiter_rates.py --json "$out/rates.json" ;;
    coarse8b) job coarse8b 240 python3 -m specsched profile --model llama-3.1-8b --bs 1,8,64,256 --widths 1,4,8 \
        --kv-lens 512,4096,32768 --eager-bs 1,64,384 --eager-widths 1,4 --eager-kv-lens 1024 \
        --prefill-tokens 256,4096 --prefill-prefix 0,8192 --reps 3 --warmup 1 --eager-reps 2 --progress \
        -o "$out/coarse-llama-3.1-8b__H200.parquet" ;;
    profile8b) job profile8b 560 python3 -m specsched profile --journal "$(pjournal profile8b)" --model llama-3.1-8b --progress \
        --bs "$BS" --kv-lens "$KV" -o "$out/llama-3.1-8b__H200.parquet" ;;
    heldout8b) job heldout8b 150 python3 -m specsched profile --model llama-3.1-8b --heldout-only --progress \
        --base backends/profiles/llama-3.1-8b__H200.parquet --heldout 48 -o "$out/llama-3.1-8b__H200.parquet" ;;
    prefill-dense:*) m=${j#prefill-dense:}; tpo=$([ "$m" = llama-3.1-70b ] && echo "--tp 8")
        job "prefill-dense-$m" 300 bash -c "python3 -m specsched profile --model $m $tpo --progress \
        --journal '$(pjournal "prefill-dense-$m")' \
        --bs 1 --widths 1 --kv-lens 128 --eager-bs 1 --eager-widths 1 --eager-kv-lens 512 \
        --no-extend --heldout 0 --prefill-tokens $PF_DENSE --prefill-prefix 0,2048,8192,16384 \
        -o '$out/prefill_dense_$m.parquet' && python3 benchmarks/profile_take_rows.py \
        backends/profiles/${m}__H200.parquet '$out/prefill_dense_$m.parquet' --kind prefill \
        --keep-level --note 'prefills every 32 tokens to 1,536 (prefill-dense:$m)' \
        -o '$out/${m}__H200.parquet'" ;;
    prefill-line:*) m=${j#prefill-line:}; tpo=$([ "$m" = llama-3.1-70b ] && echo "--tp 8")
        job "prefill-line-$m" 560 bash -c "python3 -m specsched profile --model $m $tpo --progress \
        --journal '$(pjournal "prefill-line-$m")' \
        --bs 1 --widths 1 --kv-lens 128 --eager-bs 1 --eager-widths 1 --eager-kv-lens 512 \
        --no-extend --heldout 0 --eager-reps 3 --prefill-tokens $(seq -s, 1 1536) --prefill-prefix 0 \
        -o '$out/prefill_line_$m.parquet'" ;;
    calibrate8b|calibrate8b:*) tag=${j#calibrate8b}; tag=${tag#:}
        job "calibrate8b${tag:+-$tag}" 150 python3 -m specsched calibrate --model llama-3.1-8b --progress \
        -o "$out/llama-3.1-8b__H200.calibrated${tag:+_$tag}.parquet" --budget-s 120 ;;
    calibrate70b) job calibrate70b 150 python3 -m specsched calibrate --model llama-3.1-70b --tp 8 \
        --progress -o "$out/llama-3.1-70b__H200.calibrated.parquet" --budget-s 120 ;;
    calibrate-conv:*) spec=${j#calibrate-conv:}; m=${spec%%:*}; rest=${spec#*:}; pol=${rest%%:*}
        n=${rest#*:}; tpopt=""; [ "$m" = llama-3.1-70b ] && tpopt="--tp 8"
        # the MLA models' live runs under a policy cap drafts at 3 (live-v2litep, live-v3p)
        [[ $m == deepseek-* ]] && tpopt="--set engine.max_draft=3"
        job "calibrate-conv-$m-$pol$n" 150 python3 -m specsched calibrate --model "$m" $tpopt \
        --progress --trace "$CONV" --limit "$n" --set "engine.policy=$pol" --budget-s 120 \
        -o "$out/${m}__H200.calibrated_conv_${pol}${n}.parquet" ;;
    calibrate-v2lite|calibrate-v2lite:*) tag=${j#calibrate-v2lite}; tag=${tag#:}
        job "calibrate-v2lite${tag:+-$tag}" 150 python3 -m specsched calibrate --model deepseek-v2-lite \
        --progress -o "$out/deepseek-v2-lite__H200.calibrated${tag:+_$tag}.parquet" --budget-s 120 ;;
    calibrate-tokens:*) m=${j#calibrate-tokens:}; tpopt=""; [ "$m" = llama-3.1-70b ] && tpopt="--tp 8"
        job "calibrate-tokens-$m" 150 python3 -m specsched calibrate --model "$m" $tpopt \
        --progress --residual tokens -o "$out/${m}__H200.calibrated_tokens.parquet" --budget-s 120 ;;
    capture-state) job capture-state 240 python3 benchmarks/bench_capture_state.py \
        --json "$out/capture_state.json" ;;
    capture-state70b) job capture-state70b 240 python3 benchmarks/bench_capture_state.py \
        --model llama-3.1-70b --tp 8 --kv 2048 --ladder 1,2,3,4,6,8,12,16,24,32 \
        --probes verify:1,verify:2,verify:4,verify:8,verify:16,draft:1,draft:8,extend:4,extend:16 \
        --then extend:2,extend:4,extend:8,extend:16,extend:1,verify:4,extend:1 \
        --json "$out/capture_state_70b.json" ;;
    capture-state8b) job capture-state8b 200 python3 benchmarks/bench_capture_state.py \
        --model llama-3.1-8b --kv 2048 --ladder 1,2,3,4,6,8,12,16,24,32 \
        --probes verify:1,verify:2,verify:4,verify:8,verify:16,draft:1,draft:8,extend:4,extend:16 \
        --then extend:2,extend:4,extend:8,extend:16,extend:1,verify:4,extend:1 \
        --json "$out/capture_state_8b.json" ;;
    capture-state-prefill) job capture-state-prefill 200 python3 benchmarks/bench_capture_state.py \
        --probes prefill:1024,prefill:4096,prefill:8192,verify:1,verify:24,draft:4 --fresh --n 8 \
        --then extend:24,extend:1 --json "$out/capture_state_prefill.json" ;;
    after-burst) job after-burst 200 python3 benchmarks/bench_after_burst.py \
        --json "$out/after_burst.json" --smi "$out/smi_after_burst.csv" ;;
    profile70b) job profile70b 560 python3 -m specsched profile --journal "$(pjournal profile70b)" --model llama-3.1-70b --tp 8 --progress \
        --bs "$BS70" --kv-lens "$KV70" -o "$out/llama-3.1-70b__H200.parquet" ;;
    profile70b-prefill) job profile70b-prefill 300 python3 -m specsched profile --journal "$(pjournal profile70b)" \
        --model llama-3.1-70b --tp 8 --progress --bs "$BS70" --kv-lens "$KV70" \
        --prefill-tokens 32,64,128,256,512,768,1024,1088,1152,1280,1536,2048,3072,4096,6144,8192 \
        -o "$out/llama-3.1-70b__H200.parquet" ;;
    profile70b-eagerkv) job profile70b-eagerkv 400 python3 -m specsched profile --journal "$(pjournal profile70b)" \
        --model llama-3.1-70b --tp 8 --progress --bs "$BS70" --kv-lens "$KV70" \
        --eager-kv-lens 512,2048,8192,16384,32768 \
        --prefill-tokens 32,64,128,256,512,768,1024,1088,1152,1280,1536,2048,3072,4096,6144,8192 \
        -o "$out/llama-3.1-70b__H200.parquet" ;;
    profile70b-eagerbs) job profile70b-eagerbs 560 python3 -m specsched profile --journal "$(pjournal profile70b)" \
        --model llama-3.1-70b --tp 8 --progress --bs "$BS70" --kv-lens "$KV70" \
        --eager-kv-lens 512,2048,8192,16384,32768 --eager-bs "$EBS70" --eager-widths "$EW70" \
        --prefill-tokens 32,64,128,256,512,768,1024,1088,1152,1280,1536,2048,3072,4096,6144,8192 \
        -o "$out/llama-3.1-70b__H200.parquet" ;;
    live-conv:*) live "conv${j#live-conv:}" "$CONV" "${j#live-conv:}" ;;
    live-split:*) live "split${j#live-split:}" "$CONV" "${j#live-split:}" --policy split ;;
    live-convp:*|live-70bp:*|live-v2litep:*) pol=${j#*:}; n=${pol#*:}; pol=${pol%%:*}
        if [[ $j == live-70bp:* ]]; then MODEL=llama-3.1-70b live "70b_${pol}${n}" "$CONV" "$n" --tp 8 --policy "$pol"
        elif [[ $j == live-v2litep:* ]]; then
          MODEL=deepseek-v2-lite live "v2lite_${pol}${n}" "$CONV" "$n" --policy "$pol" \
            --set engine.max_draft=3
        else live "conv_${pol}${n}" "$CONV" "$n" --policy "$pol"; fi ;;
    live-code) live code "$CODE" ;;
    live-long:*) pol=${j#live-long:}; n=""; [[ $pol == *:* ]] && { n=${pol#*:}; pol=${pol%%:*}; }
        live "long_${pol}${n}" "$LONG" "$n" --policy "$pol" ;;
    live-long70b:*) MODEL=llama-3.1-70b live "long70b_${j#live-long70b:}" "$LONG" "" --tp 8 \
        --policy "${j#live-long70b:}" ;;
    live-70b:*) MODEL=llama-3.1-70b live "70b${j#live-70b:}" "$CONV" "${j#live-70b:}" --tp 8 ;;
    live-adaptive:*) live "adaptive${j#live-adaptive:}" "$CONV" "${j#live-adaptive:}" \
        --controller sglang-adaptive ;;
    live-schedule:*) live "schedule${j#live-schedule:}" "$CONV" "${j#live-schedule:}" \
        --controller schedule --set "controller.schedule=$SCHEDULE" ;;
    profile-v2lite) job profile-v2lite 560 python3 -m specsched profile --journal "$(pjournal profile-v2lite)" --model deepseek-v2-lite --progress \
        --bs 1,2,3,4,5,6,7,8,10,12,14,16,20,24,32,48 --kv-lens 128,512,2048,8192,32768 --eager-bs 1,16,48 \
        --prefill-tokens 64,128,256,512,768,1024,2048,4096,8192 --prefill-prefix 0,8192 \
        -o "$out/deepseek-v2-lite__H200.parquet" ;;
    profile-v2lite-long) job profile-v2lite-long 560 python3 -m specsched profile \
        --journal "$(pjournal profile-v2lite)" --model deepseek-v2-lite --progress \
        --bs "$BS_V2LITE" --kv-lens 128,512,2048,8192,16384,32768 \
        --eager-bs 1,16,48 --eager-kv-lens 512,2048,8192,16384,32768 \
        --prefill-tokens 64,128,256,512,768,1024,2048,3072,4096,8192 \
        --prefill-prefix 0,8192,16384,32768 -o "$out/deepseek-v2-lite__H200.parquet" ;;
    live-longmlap:*) spec=${j#live-longmlap:}; m=${spec%%:*}; pol=${spec#*:}; n=""
        [[ $pol == *:* ]] && { n=${pol#*:}; pol=${pol%%:*}; }
        case "$m" in deepseek-v2-lite) tag=longv2lite ;; deepseek-v3) tag=longv3 ;;
          *) echo "live-longmlap: MODEL must be deepseek-v2-lite or deepseek-v3, not $m" >&2; continue ;; esac
        MODEL=$m live "${tag}_${pol}$n" "$LONG" "$n" --policy "$pol" --set engine.max_draft=3 ;;
    live-v3p:*) pol=${j#live-v3p:}; n=${pol#*:}; pol=${pol%%:*}
        MODEL=deepseek-v3 live "v3_${pol}$n" "$CONV" "$n" --policy "$pol" --set engine.max_draft=3 ;;
    live-longv2lite|live-longv2lite:*) n=${j#live-longv2lite}; n=${n#:}
        MODEL=deepseek-v2-lite live "longv2lite$n" "$LONG" "$n" --policy fixed ;;
    live-v2lite:*) MODEL=deepseek-v2-lite live "v2lite${j#live-v2lite:}" "$CONV" "${j#live-v2lite:}" \
        --policy fixed ;;
    v3-tests) job v3-tests 240 python3 -m pytest tests/aiter/test_aiter_v3_gpu.py -v -s -rfEs \
        -p no:cacheprovider --junitxml "$out/v3_tests.xml" ;;
    v3-moe) job v3-moe 90 python3 -m pytest -q -rfEs -p no:cacheprovider \
        tests/aiter/test_aiter_v3_gpu.py::test_fp8_ep_moe_and_mla_decode_match_the_references ;;
    profile-v3) job profile-v3 560 python3 -m specsched profile --journal "$(pjournal profile-v3)" --model deepseek-v3 --progress \
        --bs "$BS_V3" --kv-lens 512,4096,16384 --eager-bs 1,8,16 \
        --eager-kv-lens 1024 --prefill-tokens "$PT_V3" --prefill-prefix 0,4096 --heldout 0 \
        --max-context 32768 -o "$out/deepseek-v3__H200.parquet" ;;
    profile-v3-long) job profile-v3-long 560 python3 -m specsched profile --journal "$(pjournal profile-v3)" \
        --model deepseek-v3 --progress --bs "$BS_V3" --kv-lens 512,4096,8192,16384,28672 \
        --eager-bs 1,8,16 --eager-kv-lens 1024 --prefill-tokens "$PT_V3,8192" \
        --prefill-prefix 0,4096,8192,16384,24576 --heldout 0 --max-context 32768 \
        -o "$out/deepseek-v3__H200.parquet" ;;
    live-longv3|live-longv3:*) n=${j#live-longv3}; n=${n#:}
        MODEL=deepseek-v3 live "longv3$n" "$LONG" "$n" --policy fixed ;;
    heldout-v3) base=backends/profiles/deepseek-v3__H200.parquet; hout="$out/deepseek-v3__H200.parquet"
        # after profile-v3 in the same call: that profile, written beside it
        [ -f "$hout" ] && { base=$hout; hout="$out/deepseek-v3__H200.heldout.parquet"; }
        job heldout-v3 200 python3 -m specsched profile --model deepseek-v3 --heldout-only \
        --progress --base "$base" --heldout 16 --max-context 32768 -o "$hout" ;;
    firstpass70b) job firstpass70b 150 python3 benchmarks/bench_aiter_first_pass.py --model llama-3.1-70b \
        --tp 8 --json "$out/first_pass_70b.json" ;;
    stages70b|stages70b:*) v=${j#stages70b}; v=${v#:}  # :memsets, :kv or :pools for a variant
        flag=""; case "$v" in memsets) flag=--keep-memsets ;; kv) flag=--kv-fill ;; pools) flag=--private-pools ;; esac
        job "stages70b${v:+-$v}" 120 python3 benchmarks/bench_aiter_first_pass.py --model llama-3.1-70b --tp 8 \
        --stages $flag --json "$out/first_pass_stages_70b${v:+_$v}.json" ;;
    sweep70b) job sweep70b 150 python3 benchmarks/bench_aiter_first_pass.py --model llama-3.1-70b --tp 8 \
        --sweep 1,2,4,8,16 --json "$out/first_pass_sweep_70b.json" ;;
    sweepv3) job sweepv3 180 python3 benchmarks/bench_aiter_first_pass.py --model deepseek-v3 \
        --sweep 1,8,16,24 --kv 512 --json "$out/first_pass_sweep_v3.json" ;;
    firstpass8b) job firstpass8b 120 python3 benchmarks/bench_aiter_first_pass.py --model llama-3.1-8b \
        --json "$out/first_pass_8b.json" ;;
    eager-sync) job eager-sync 150 python3 benchmarks/bench_aiter_eager_sync.py --model deepseek-v3 \
        --tokens 64,203,1315 --json "$out/eager_sync_v3.json" ;;
    live-v3:*) MODEL=deepseek-v3 live "v3${j#live-v3:}" "$CONV" "${j#live-v3:}" --policy fixed ;;
    live-v2lite-unsafe:*) MODEL=deepseek-v2-lite live "v2liteunsafe${j#live-v2lite-unsafe:}" "$CONV" \
        "${j#live-v2lite-unsafe:}" --policy unsafe-derived ;;
    fidelity-conv:*) fid "conv${j#fidelity-conv:}" "$CONV" "${j#fidelity-conv:}" ;;
    fidelity-code) fid code "$CODE" ;;
    *) echo "unknown job $j" | tee -a "$log" ;;
  esac
done
