"""The extraction worker on the CPU, with tiny random-weight models built by the tests.

Tolerances (relative Frobenius error ||got - ref|| / ||ref|| per sample and layer, against a
plain transformers forward with output_hidden_states, batch 1, no padding):
- float32: 1e-5 (measured: 3e-7 at worst; the fast path is the same arithmetic, batched
  and right-padded);
- bfloat16: 2e-2 (measured: 6.5e-3 at worst; the batched matmuls round differently from
  batch 1, and bf16 keeps 8 bits of mantissa).


The unit tier's tests of this file (starts nothing); the others are in tests/system/test_extract.py."""

from __future__ import annotations

import json
import os
import random

import pytest

from support.extract import CHAT_TEMPLATE, PLAIN_TEMPLATE, build_tokenizer, chat_record, reference_hidden_states, rel_err, write_chat_shards, write_tokenized
from support.extract_cases import extract, models  # noqa: F401

torch = pytest.importorskip("torch", reason="torch is needed by the extraction worker (pip install '.[extract]')")
pytest.importorskip("transformers", reason="transformers is needed by the extraction worker")
pytest.importorskip("safetensors", reason="safetensors is needed by the extraction worker")

TOL = {"float32": 1e-5, "bfloat16": 2e-2}


# ---------------------------------------------------------------- hidden states

@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("arch", ["qwen3", "llama", "hybrid"])
def test_hidden_states_equal_a_plain_transformers_forward(tmp_path, models, arch, dtype):
    from gpudeck.agents.workers.extract.reader import open_extract

    recs = write_tokenized(str(tmp_path / "data.jsonl"), 40, seed=1, min_len=10, max_len=70)
    out = str(tmp_path / "out")
    # layers 0 (embeddings) and 4 (last layer, after the final norm) are the edge cases
    rc = extract(models[arch], str(tmp_path / "data.jsonl"), out, "0,1,3,4", "--dtype", dtype,
                 "--max-tokens-per-batch", "200", "--shard-samples", "7")
    assert rc == 0
    result = open_extract(out)
    assert sorted(result.ids()) == sorted(r["id"] for r in recs)
    assert result.layers == [0, 1, 3, 4]
    worst = 0.0
    for r in recs:
        s = result.get(r["id"])
        assert s.input_ids.tolist() == r["input_ids"]
        assert s.loss_mask.int().tolist() == r["loss_mask"]
        assert s.hidden_states.shape == (len(r["input_ids"]), 4 * 64)
        assert s.hidden_states.dtype == getattr(torch, dtype)
        ref = reference_hidden_states(models[arch], r["input_ids"], [0, 1, 3, 4], dtype)
        for layer in (0, 1, 3, 4):
            worst = max(worst, rel_err(s.layer(layer), ref[layer]))
    assert worst <= TOL[dtype], f"worst relative error {worst:.2e} over {TOL[dtype]:.0e}"


def test_the_generic_path_gives_the_same_states_as_the_fast_path(tmp_path, models):
    from gpudeck.agents.workers.extract.reader import open_extract

    write_tokenized(str(tmp_path / "data.jsonl"), 12, seed=2)
    assert extract(models["qwen3"], str(tmp_path / "data.jsonl"), str(tmp_path / "fast"), "2,4",
                   "--dtype", "float32") == 0
    assert extract(models["qwen3"], str(tmp_path / "data.jsonl"), str(tmp_path / "generic"), "2,4",
                   "--dtype", "float32", "--generic-forward") == 0
    fast, generic = open_extract(str(tmp_path / "fast")), open_extract(str(tmp_path / "generic"))
    for i in fast.ids():
        assert rel_err(fast.get(i).hidden_states, generic.get(i).hidden_states) <= 1e-5
    progress = json.loads((tmp_path / "generic" / "progress.json").read_text())
    assert progress["forward"] == "generic"


def test_the_fast_path_runs_only_the_layers_it_needs(models):
    from transformers import AutoModelForCausalLM

    from gpudeck.agents.workers.extract.model import HiddenStateRunner

    model = AutoModelForCausalLM.from_pretrained(models["qwen3"], dtype=torch.float32).eval()
    calls = []
    for i, layer in enumerate(model.model.layers):
        layer.register_forward_pre_hook(lambda m, a, i=i: calls.append(i))
    runner = HiddenStateRunner(model, [1, 2], check=False)
    assert runner.path == "fast" and runner.layers_run == 2
    out = runner(torch.randint(0, 100, (2, 9)))
    assert out.shape == (2, 9, 128)
    assert calls == [], "the fast path must not go through the model's own layers"
    lm_head_calls = []
    model.lm_head.register_forward_hook(lambda *a: lm_head_calls.append(1))
    HiddenStateRunner(model, [4], fast=False)(torch.randint(0, 100, (1, 5)))
    assert lm_head_calls == [], "the generic path must not run the LM head"


def test_the_hybrid_path_runs_the_models_own_layers_up_to_the_deepest_kept(tmp_path, models, monkeypatch):
    """Gated DeltaNet + full attention (qwen3_5_text): the hybrid path, its DeltaNets taken
    apart, no mask, no LM head, layer 4 never runs when layer 2 is the deepest kept;
    right-padded samples give the states of a masked forward on their real tokens."""
    from transformers import AutoModelForCausalLM

    from gpudeck.agents.workers.extract import hybrid
    from gpudeck.agents.workers.extract.model import HiddenStateRunner
    from gpudeck.agents.workers.extract.perf import CountedFlops

    model = AutoModelForCausalLM.from_pretrained(models["hybrid"], dtype=torch.float32).eval()
    calls, lm_head_calls, whole = [], [], []
    index = {id(layer): i for i, layer in enumerate(model.model.layers)}
    layer_call = hybrid.Parts.__call__
    monkeypatch.setattr(hybrid.Parts, "__call__", lambda self, h, pe: calls.append(index[id(self.layer)])
                        or layer_call(self, h, pe))
    for layer in model.model.layers:  # the DeltaNet modules themselves never run: they are taken apart
        if hasattr(layer, "linear_attn"):
            layer.linear_attn.register_forward_pre_hook(lambda *a: whole.append(1))
    model.lm_head.register_forward_hook(lambda *a: lm_head_calls.append(1))
    runner = HiddenStateRunner(model, [0, 2])
    assert runner.path == "hybrid", runner.why_not_fast
    assert "gated_delta_rule=" in runner.why_not_fast  # which kernels run is said
    assert all(isinstance(step.mixer, hybrid.DeltaNet) for step in runner._steps)
    ids = torch.randint(0, 500, (3, 40))
    mask = torch.ones(3, 40, dtype=torch.long)
    mask[1, 30:] = 0
    mask[2, 9:] = 0
    calls.clear()
    whole.clear()
    out = runner(ids)
    assert calls == [0, 1] and lm_head_calls == [] and whole == []
    with torch.no_grad():
        ref = model.model(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states
    for j, layer in enumerate([0, 2]):
        assert rel_err(out[..., j * 64:(j + 1) * 64][mask.bool()], ref[layer][mask.bool()]) <= 1e-5
    flops = runner.flop_model()
    assert isinstance(flops, CountedFlops) and flops.attn_width == 0  # layers 1-2 are both linear attention
    assert HiddenStateRunner(model, [4]).flop_model().attn_width == 4 * 16  # layer 4 is full attention


def test_the_deltanet_conv_as_shifted_multiply_adds_is_the_models_conv():
    import transformers.models.qwen3_5.modeling_qwen3_5 as q35

    from gpudeck.agents.workers.extract import hybrid

    gen = torch.Generator().manual_seed(3)
    x, w = torch.randn(2, 11, 6, generator=gen), torch.randn(6, 4, generator=gen)
    ref = q35.causal_conv1d_fn(x.transpose(1, 2), w, None, activation="silu").transpose(1, 2)
    assert rel_err(hybrid.conv_silu(x, w), ref) <= 1e-6
    assert rel_err(hybrid.conv_silu(x[:, :1], w), ref[:, :1]) <= 1e-6  # one token: only its own tap


def test_a_deltanet_of_another_layout_runs_its_own_module(models, monkeypatch):
    from transformers import AutoModelForCausalLM

    from gpudeck.agents.workers.extract import hybrid
    from gpudeck.agents.workers.extract.model import HiddenStateRunner

    model = AutoModelForCausalLM.from_pretrained(models["hybrid"], dtype=torch.float32).eval()
    monkeypatch.setattr(hybrid, "DELTANET_PARTS", hybrid.DELTANET_PARTS + ("in_proj_qkvz",))
    runner = HiddenStateRunner(model, [3])
    assert runner.path == "hybrid" and "DeltaNet modules called whole" in runner.why_not_fast, runner.why_not_fast
    assert all(step.mixer is None for step in runner._steps)
    ids = torch.randint(0, 500, (2, 20))
    with torch.no_grad():
        ref = model.model(input_ids=ids, output_hidden_states=True).hidden_states[3]
    assert rel_err(runner(ids), ref) <= 1e-5


def test_a_hybrid_layer_taken_apart_wrongly_falls_back_to_the_models_own_layers(models, monkeypatch):
    from transformers import AutoModelForCausalLM

    from gpudeck.agents.workers.extract import hybrid
    from gpudeck.agents.workers.extract.model import HiddenStateRunner

    model = AutoModelForCausalLM.from_pretrained(models["hybrid"], dtype=torch.float32).eval()
    taken_apart = hybrid.Parts.__call__
    monkeypatch.setattr(hybrid.Parts, "__call__", lambda self, h, pe: taken_apart(self, h, pe) * 1.01)
    runner = HiddenStateRunner(model, [3])
    assert runner.path == "hybrid-layers", runner.why_not_fast
    ids = torch.randint(0, 500, (2, 20))
    with torch.no_grad():
        ref = model.model(input_ids=ids, output_hidden_states=True).hidden_states[3]
    assert rel_err(runner(ids), ref) <= 1e-5


def test_a_hybrid_model_through_the_worker_says_its_path(tmp_path, models):
    write_tokenized(str(tmp_path / "d.jsonl"), 10, seed=4)
    assert extract(models["hybrid"], str(tmp_path / "d.jsonl"), str(tmp_path / "out"), "1,4",
                   "--dtype", "float32") == 0
    progress = json.loads((tmp_path / "out" / "progress.json").read_text())
    assert progress["forward"] == "hybrid"


# ---------------------------------------------------------------- chat input and the loss mask

@pytest.mark.parametrize("template", [CHAT_TEMPLATE, PLAIN_TEMPLATE], ids=["reasoning_content", "plain"])
def test_the_loss_mask_covers_exactly_the_assistant_reply(template):
    from gpudeck.agents.workers.extract.data import Encoder

    tok = build_tokenizer(template)
    enc = Encoder(tok)
    rng = random.Random(3)
    for i in range(30):
        rec = chat_record(i, rng, multi_turn=(i % 2 == 0))
        s = enc.encode("shard-000000.jsonl", i + 1, rec)
        ids, mask = s.input_ids.tolist(), s.loss_mask.tolist()
        first = mask.index(1)
        assert all(mask[first:]) and not any(mask[:first]), "the mask must be one run at the end"
        prompt = tok.apply_chat_template(rec["messages"], add_generation_prompt=True, tokenize=False)
        reply = f"<think>\n{rec['reasoning']}\n</think>\n\n{rec['answer']}<|im_end|>\n"
        assert tok.decode(ids[:first]) == prompt
        assert tok.decode(ids[first:]) == reply
        assert s.id == rec["id"]


def test_a_chat_record_ending_with_the_assistant_turn_is_read_too():
    from gpudeck.agents.workers.extract.data import Encoder

    tok = build_tokenizer()
    rec = {"messages": [{"role": "user", "content": "why the sky"},
                        {"role": "assistant", "content": "the stars and rivers", "reasoning_content": "think"}]}
    s = Encoder(tok).encode("data.jsonl", 7, rec)
    ids, mask = s.input_ids.tolist(), s.loss_mask.tolist()
    assert s.id == "data.jsonl:7"
    assert tok.decode([t for t, m in zip(ids, mask) if m]) == "<think>\nthink\n</think>\n\nthe stars and rivers<|im_end|>\n"


def test_chat_shards_of_the_generation_worker_go_through_the_worker(tmp_path, models):
    from gpudeck.agents.workers.extract.data import Encoder
    from gpudeck.agents.workers.extract.reader import open_extract

    recs = write_chat_shards(str(tmp_path / "gen"), 25, per_shard=10)
    (tmp_path / "gen" / ".shard-000003.jsonl.tmp").write_text("{not json\n")  # a temp file: never read
    out = str(tmp_path / "out")
    assert extract(models["qwen3"], str(tmp_path / "gen"), out, "2", "--dtype", "float32") == 0
    result = open_extract(out)
    assert sorted(result.ids()) == sorted(r["id"] for r in recs)
    enc = Encoder(build_tokenizer())
    for r in recs[:5]:
        want = enc.encode("x", 1, r)
        got = result.get(r["id"])
        assert got.input_ids.tolist() == want.input_ids.tolist()
        assert got.loss_mask.int().tolist() == want.loss_mask.tolist()


@pytest.mark.parametrize("line, why", [
    ("{not json", "not valid JSON"),
    ('{"input_ids": [1, 2, 3]}', "needs 'loss_mask'"),
    ('{"input_ids": [1, 2, 3], "loss_mask": [1, 0]}', "as long as 'input_ids'"),
    ('{"text": "hello"}', "expected a tokenized record"),
])
def test_bad_input_is_refused_with_its_file_and_line(tmp_path, models, capsys, line, why):
    data = tmp_path / "data.jsonl"
    write_tokenized(str(data), 3)
    with open(data, "a") as f:
        f.write(line + "\n")
    rc = extract(models["qwen3"], str(data), str(tmp_path / "out"), "1", "--no-audit")
    err = capsys.readouterr().err
    assert rc == 2
    assert f"{data}:4:" in err and why in err


def test_layers_out_of_range_are_refused_with_the_models_depth(tmp_path, models, capsys):
    write_tokenized(str(tmp_path / "d.jsonl"), 3)
    assert extract(models["qwen3"], str(tmp_path / "d.jsonl"), str(tmp_path / "out"), "1,9", "--no-audit") == 2
    assert "4 decoder layers" in capsys.readouterr().err


# ---------------------------------------------------------------- the audit before a start

def test_the_six_token_dataset_is_refused_unless_forced(tmp_path, models):
    rng = random.Random(5)
    data = tmp_path / "data.jsonl"
    with open(data, "w") as f:
        for i in range(200):  # the story's dataset: 87% of samples with 6 target tokens
            n = rng.randint(40, 90)
            target = 6 if i % 100 < 87 else rng.randint(20, 35)
            f.write(json.dumps({"id": f"d{i}", "input_ids": [rng.randrange(500) for _ in range(n)],
                                "loss_mask": [0] * (n - target) + [1] * target}) + "\n")
    out = tmp_path / "out"
    assert extract(models["qwen3"], str(data), str(out), "1") == 4
    progress = json.loads((out / "progress.json").read_text())
    assert progress["state"] == "refused" and "6" in progress["error"]
    assert not any(n.endswith(".safetensors") for n in os.listdir(out))
    assert extract(models["qwen3"], str(data), str(out), "1", "--force") == 0
    progress = json.loads((out / "progress.json").read_text())
    assert progress["done"] == 200 and progress["quality"]["short_target"] == 174


# ---------------------------------------------------------------- output, progress, reader

def test_progress_json_and_the_format(tmp_path, models):
    from safetensors import safe_open

    from gpudeck.agents.workers.extract.layout import FORMAT
    from gpudeck.agents.workers.extract.reader import read_shard

    write_tokenized(str(tmp_path / "d.jsonl"), 30, seed=7)
    progress_file = tmp_path / "state" / "progress.json"
    progress_file.parent.mkdir()
    out = tmp_path / "out"
    assert extract(models["qwen3"], str(tmp_path / "d.jsonl"), str(out), "1,4", "--dtype", "bfloat16",
                   "--progress-file", str(progress_file), "--shard-samples", "8") == 0
    p = json.loads(progress_file.read_text())
    assert p["done"] == 30 and p["total"] == 30 and p["state"] == "done"
    assert p["tokens"] == sum(len(json.loads(line)["input_ids"]) for line in open(tmp_path / "d.jsonl"))
    assert p["bytes_written"] == sum(f.stat().st_size for f in out.glob("shard-*.safetensors"))
    assert p["projected_total_bytes"] == p["bytes_written"] and p["disk_alert"] is None
    for key in ("tokens_per_s", "tflops", "mfu", "peak_tflops", "free_bytes", "quality"):
        assert key in p
    assert p["mfu"] is None and "no device" in p["peak_source"]  # a CPU has no peak in the table
    # the start-up, said (issue 25): its phases, and the process's start to the first durable shard
    assert p["phase"] == "running" and p["phase_since"] <= p["updated_at"]
    assert p["startup_s"] > 0 and {"preparing", "first_shard"} <= set(p["startup"])
    shards = sorted(out.glob("shard-*.safetensors"))
    assert len(shards) == 4 and not list(out.glob(".shard-*"))
    with safe_open(str(shards[0]), "pt") as st:  # the safetensors library reads our streamed shards
        meta = st.metadata()
        assert meta["format"] == FORMAT and meta["layers"] == "1,4"
        ids = json.loads(meta["ids"])
        h = st.get_tensor("0.hidden_states")
        assert h.dtype == torch.bfloat16 and h.shape[1] == 128
        assert st.get_tensor("0.input_ids").dtype == torch.int32
        assert st.get_tensor("0.loss_mask").dtype == torch.uint8
    assert [s.id for s in read_shard(str(shards[0]))] == ids
    index = [json.loads(line) for line in open(out / "index.jsonl")]
    assert [e["shard"] for e in index] == [s.name for s in shards]
    assert sorted(open(out / "done.txt").read().split()) == sorted(i for e in index for i in e["ids"])


def test_parts_split_one_dataset_between_jobs(tmp_path, models):
    from gpudeck.agents.workers.extract.reader import open_extract

    recs = write_tokenized(str(tmp_path / "d.jsonl"), 40, seed=8)
    for i in range(3):
        assert extract(models["qwen3"], str(tmp_path / "d.jsonl"), str(tmp_path / "out"), "2",
                       "--part", f"{i}/3", "--no-audit") == 0
    result = open_extract(str(tmp_path / "out"))
    assert len(result.dirs) == 3 and sorted(result.ids()) == sorted(r["id"] for r in recs)
    sizes = [len(open(tmp_path / "out" / f"part-{i}-of-3" / "done.txt").read().split()) for i in range(3)]
    assert sum(sizes) == 40 and all(sizes)


def test_a_second_run_with_other_layers_is_refused(tmp_path, models, capsys):
    write_tokenized(str(tmp_path / "d.jsonl"), 5)
    assert extract(models["qwen3"], str(tmp_path / "d.jsonl"), str(tmp_path / "out"), "1") == 0
    assert extract(models["qwen3"], str(tmp_path / "d.jsonl"), str(tmp_path / "out"), "2") == 1
    assert "layers=[1]" in capsys.readouterr().err


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_compressed_shards_read_back_bit_for_bit(tmp_path, models, dtype):
    """--compress stores the same values as a plain run, in fewer bytes, and the reader gives
    them back exactly; the shards stay valid safetensors files."""
    from safetensors import safe_open

    from gpudeck.agents.workers.extract.layout import CODEC_PLANES_ZSTD
    from gpudeck.agents.workers.extract.reader import open_extract
    from gpudeck.agents.workers.extract.store import entry_from_header

    recs = write_tokenized(str(tmp_path / "d.jsonl"), 30, seed=5, min_len=10, max_len=70)
    args = ("0,2,4", "--dtype", dtype, "--max-tokens-per-batch", "200", "--shard-samples", "7", "--no-audit")
    assert extract(models["qwen3"], str(tmp_path / "d.jsonl"), str(tmp_path / "plain"), *args) == 0
    assert extract(models["qwen3"], str(tmp_path / "d.jsonl"), str(tmp_path / "packed"), *args, "--compress") == 0
    plain, packed = open_extract(str(tmp_path / "plain")), open_extract(str(tmp_path / "packed"))
    assert sorted(packed.ids()) == sorted(r["id"] for r in recs)
    for r in recs:
        a, b = plain.get(r["id"]), packed.get(r["id"])
        assert b.hidden_states.dtype == getattr(torch, dtype) and b.hidden_states.shape == a.hidden_states.shape
        assert torch.equal(a.hidden_states.view(torch.uint8), b.hidden_states.view(torch.uint8)), r["id"]
        assert torch.equal(a.input_ids, b.input_ids) and torch.equal(a.loss_mask, b.loss_mask)
        assert torch.equal(b.layer(2), a.layer(2))
    assert sum(1 for _ in packed.iter_samples()) == len(recs)
    shards = sorted((tmp_path / "packed").glob("shard-*.safetensors"))
    with safe_open(str(shards[0]), "pt") as st:
        assert st.metadata()["codec"] == CODEC_PLANES_ZSTD
        low = st.get_tensor("0.hidden_states.low")
        n = int(st.get_tensor("0.input_ids").shape[0])
        assert low.dtype == torch.uint8 and list(low.shape) == [torch.finfo(getattr(torch, dtype)).bits // 8 - 1,
                                                                 3, n, 64]
    index = {e["shard"]: e for e in map(json.loads, open(tmp_path / "packed" / "index.jsonl"))}
    assert entry_from_header(str(shards[0]))["ids"] == index[shards[0].name]["ids"]
    progress = json.loads((tmp_path / "packed" / "progress.json").read_text())
    assert progress["compress"] is True and progress["compression"] > 1.0
    size = {d: sum(f.stat().st_size for f in (tmp_path / d).glob("shard-*")) for d in ("plain", "packed")}
    assert size["packed"] < size["plain"]


def test_a_model_object_handed_over_is_not_looked_up_on_the_hub(tmp_path, models, monkeypatch):
    """The benchmark hands run_extraction its model object under a made-up name; no tokenizer
    lookup may follow that name (offline, the Hub client retried for ~46 s)."""
    from transformers import AutoModelForCausalLM

    from gpudeck.agents.workers.extract import run as extract_run

    def no_lookup(path):
        raise AssertionError(f"looked for a tokenizer at {path!r}")

    monkeypatch.setattr(extract_run, "_load_tokenizer", no_lookup)
    write_tokenized(str(tmp_path / "d.jsonl"), 4)
    model = AutoModelForCausalLM.from_pretrained(models["qwen3"], dtype=torch.float32)
    opts = extract_run.ExtractOptions(model="made-up/model-name", data=str(tmp_path / "d.jsonl"),
                                      out=str(tmp_path / "out"), layers="1", device="cpu", dtype="float32",
                                      audit=False)
    assert extract_run.run_extraction(opts, model=model) == 0
    assert json.loads((tmp_path / "out" / "progress.json").read_text())["done"] == 4


# ---------------------------------------------------------------- the job kind and the CLI

def test_build_argv_from_the_fleet_file(tmp_path):
    from gpudeck.agents.contract.jobs import SpecError
    from gpudeck.remote.fleet import parse_fleet

    fleet = parse_fleet("""
[[jobs]]
name = "ex0"
kind = "extract"
model = "/models/q"
gpus = [0]
data = "/data/gen"
out = "/data/hs"
layers = [1, 7, 14, 21, 27]
max_tokens_per_batch = 65536
s3 = "s3://b/hs"
force = true
compress = true
writers = 8
args = ["--part", "0/4"]
""")
    job = fleet.jobs[0]
    assert job.argv("/venv/bin/python") == [
        "/venv/bin/python", "-m", "gpudeck.agents.workers.extract", "--model", "/models/q", "--data", "/data/gen",
        "--out", "/data/hs", "--layers", "1,7,14,21,27", "--max-tokens-per-batch", "65536", "--s3", "s3://b/hs",
        "--force", "--compress", "--part", "0/4"]  # writers = 8 is the default: no flag needed
    bad = job.to_dict()
    bad["options"] = {"data": "/d", "out": "/o"}
    from gpudeck.agents.contract.jobs import JobSpec
    with pytest.raises(SpecError, match="needs 'layers'"):
        JobSpec.from_dict(bad).argv("python3")


def test_flops_and_peak_table():
    from gpudeck.agents.workers.extract.perf import FlopModel, disk_projection, peak_flops

    assert peak_flops("NVIDIA H200")[0] == 989.4e12
    assert peak_flops("NVIDIA H100 80GB HBM3")[0] == 989.4e12
    assert peak_flops("NVIDIA H100 PCIe")[0] == 756e12
    assert peak_flops("Some GPU")[0] is None and peak_flops("Some GPU", 100.0)[0] == 100e12
    qwen = FlopModel(hidden=2048, intermediate=6144, n_heads=16, n_kv_heads=8, head_dim=128, layers_run=27)
    # 27 layers x (2 x 50.3M matmul params + 2 x 2048 x 2048 attention) per token at 2,048 tokens
    assert qwen.sample_flops(2048) / 2048 == pytest.approx(2.944e9, rel=1e-3)
    p = disk_projection(bytes_written=10 << 20, samples_written=10, samples_total=1000, free_bytes=500 << 20)
    assert p["projected_total_bytes"] == 1000 << 20 and "will not fit" in p["disk_alert"]
    assert disk_projection(10 << 20, 10, 1000, 2 << 30)["disk_alert"] is None
