"""Pinned autotuning (agents/workers/extract/tuning.py): what a kernel chose is recorded, and a
table narrows a fresh process's candidates to it, on real Triton autotuners (declared here;
declaring one needs no GPU)."""

from __future__ import annotations

import json
import sys
import types

import pytest

triton = pytest.importorskip("triton", reason="Triton is not installed (it comes with the CUDA build of torch)")

from gpudeck.agents.workers.extract import tuning  # noqa: E402

PKG = "gd_tuning_pkg"  # a kernel package of our own, registered in sys.modules for the test


def configs():
    return [triton.Config({"BLOCK": b}, num_warps=w, num_stages=s) for b in (32, 64) for w in (2, 4) for s in (2, 3)]


@pytest.fixture
def package():
    import triton.language as tl

    mod = types.ModuleType(f"{PKG}.ops")

    @triton.autotune(configs=configs(), key=["n"])
    @triton.jit
    def scale_kernel(x, n, BLOCK: tl.constexpr):
        pass

    @triton.heuristics({"EVEN": lambda args: args["n"] % 2 == 0})  # outside the autotuner, as the package does
    @triton.autotune(configs=configs(), key=["n"])
    @triton.jit
    def shift_kernel(x, n, BLOCK: tl.constexpr, EVEN: tl.constexpr):
        pass

    @triton.jit
    def plain_kernel(x):
        pass

    mod.scale_kernel, mod.shift_kernel, mod.plain_kernel = scale_kernel, shift_kernel, plain_kernel
    mod.alias = scale_kernel  # a kernel imported under a second name counts once
    sys.modules[mod.__name__] = mod
    yield mod
    sys.modules.pop(mod.__name__, None)


def test_what_the_kernels_chose_is_recorded_and_a_fresh_process_is_narrowed_to_it(package, tmp_path, monkeypatch):
    tuners = tuning.autotuners(PKG)
    scale_name, shift_name = (tuning.kernel_name(k) for k in (package.scale_kernel, package.shift_kernel.fn))
    assert scale_name.startswith(__name__ + ".") and scale_name.endswith(".scale_kernel")
    assert sorted(tuners) == sorted((scale_name, shift_name))
    scale = tuners[scale_name]
    best_small, best_big = scale.configs[5], scale.configs[2]
    scale.cache[(128, "torch.bfloat16")] = best_small  # what Triton's timing chose, per tuning key
    scale.cache[(32768, "torch.bfloat16")] = best_big
    scale.cache[(65536, "torch.bfloat16")] = best_big

    path = tmp_path / "kernel-tuning.json"
    assert tuning.record(str(path), "NVIDIA H200", PKG) == 1  # shift_kernel never ran: nothing to pin
    table = json.loads(path.read_text())
    assert table["gpu"] == "NVIDIA H200" and table["format"] == tuning.FORMAT
    assert table["kernels"][scale_name] == [tuning.config_dict(best_small),
                                                           tuning.config_dict(best_big)]

    # a fresh process: the same kernels, every candidate again
    scale.cache.clear()
    scale.configs = configs()
    monkeypatch.setenv(tuning.ENV, str(path))
    loaded, where = tuning.load_table("NVIDIA H200")
    assert where == str(path)
    assert tuning.apply(loaded, tuning.autotuners(PKG)) == (1, 2)
    kept = sorted(json.dumps(tuning.config_dict(c), sort_keys=True) for c in scale.configs)
    assert kept == sorted(json.dumps(p, sort_keys=True) for p in table["kernels"][scale_name])
    assert len(tuners[shift_name].configs) == 8  # not in the table: it still autotunes


def test_a_config_the_installed_kernel_does_not_have_narrows_nothing(package):
    tuners = tuning.autotuners(PKG)
    name = tuning.kernel_name(package.scale_kernel)
    alien = {"kwargs": {"BLOCK": 128}, "num_warps": 8, "num_stages": 5, "num_ctas": 1, "maxnreg": None}
    assert tuning.apply({"kernels": {name: [alien]}}, tuners) == (0, 2)
    assert len(tuners[name].configs) == 8


def test_one_pinned_config_means_triton_times_nothing(package):
    tuners = tuning.autotuners(PKG)
    name = tuning.kernel_name(package.shift_kernel.fn)
    one = tuning.config_dict(tuners[name].configs[3])
    tuning.apply({"kernels": {name: [one]}}, tuners)
    assert len(tuners[name].configs) == 1  # Triton's Autotuner.run takes a lone config as is


def test_the_table_for_a_gpu_is_found_by_its_name_and_can_be_switched_off(tmp_path, monkeypatch):
    monkeypatch.delenv(tuning.ENV, raising=False)
    assert tuning.gpu_slug("NVIDIA H200") == "NVIDIA_H200"
    assert tuning.gpu_slug("NVIDIA RTX PRO 6000 Blackwell Server Edition") == \
        "NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition"
    table, why = tuning.load_table("Imaginary GPU 9000")
    assert table is None and "no table for Imaginary GPU 9000" in why
    assert tuning.load_table("NVIDIA H200", {tuning.ENV: "off"}) == (None, f"{tuning.ENV}=off")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert tuning.load_table("NVIDIA H200", {tuning.ENV: str(bad)})[0] is None  # a warning, no crash
    bad.write_text(json.dumps({"format": 99, "kernels": {}}))
    assert tuning.load_table("NVIDIA H200", {tuning.ENV: str(bad)})[0] is None


def test_every_shipped_table_is_well_formed():
    for path in sorted(tuning.TABLES.glob("*.json")):
        table, where = tuning.load_table(path.stem, {tuning.ENV: str(path)})
        assert table is not None, where
        assert tuning.gpu_slug(table["gpu"]) == path.stem
        for name, picks in table["kernels"].items():
            assert name.startswith(tuning.PACKAGE + ".") and picks, name
            assert all(set(p) == {"kwargs", "num_warps", "num_stages", "num_ctas", "maxnreg"} for p in picks), name


def test_a_cold_start_that_autotuned_leaves_its_table_in_the_cache_once(package, tmp_path, monkeypatch):
    monkeypatch.setattr(tuning, "PACKAGE", PKG)
    monkeypatch.setattr(tuning, "_pinned", {})
    monkeypatch.setenv(tuning.ENV, "off")
    scale = package.scale_kernel
    assert tuning.pin("NVIDIA H200") is False  # no table: every candidate is timed
    scale.cache[(4096, "torch.bfloat16")] = scale.configs[1]
    assert tuning.record_learned(str(tmp_path)) == 1
    table = json.loads((tmp_path / tuning.RECORD_NAME).read_text())
    assert list(table["kernels"].values()) == [[tuning.config_dict(scale.configs[1])]]
    assert tuning.record_learned(str(tmp_path)) == 0  # once a process
    assert tuning.state()["recorded"] is True

    # a start that applied a table learned nothing new
    monkeypatch.setattr(tuning, "_pinned", {})
    monkeypatch.setenv(tuning.ENV, str(tmp_path / tuning.RECORD_NAME))
    assert tuning.pin("NVIDIA H200") is True and len(scale.configs) == 1
    assert tuning.record_learned(str(tmp_path / "elsewhere")) == 0
