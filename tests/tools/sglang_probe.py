"""Run SGLang's own code on a CPU machine, in a process of its own, and print JSON.

    python tests/tools/sglang_probe.py page SCENARIOS.json  # /metrics pages from SGLang's collectors
    python tests/tools/sglang_probe.py args ARGVS.json      # ServerArgs as SGLang's parser reads each argv

``page`` plays an SGLang server the way it runs: prometheus_client in multiprocess mode
(PROMETHEUS_MULTIPROC_DIR), one forked process per scheduler (one per DP rank, and per TP
rank where every scheduler reports), each with SGLang's runtime context published and its
``SchedulerMetricsCollector.init_new`` labels, its pool usage put through SGLang's
``PoolStats.update_scheduler_stats`` (which makes ``token_usage`` the fullest of the full,
SWA and mamba pools) and ``log_stats``; this process is the tokenizer manager, whose
``TokenizerMetricsCollector`` counts finished requests, and it renders the page with
``MultiProcessCollector`` + ``generate_latest`` as ``sglang.srt.utils.common`` serves it.
SCENARIOS.json maps a name to one server's scenario, each played in a process of its own;
one page is printed per entry of its ``finished`` (the generation tokens of the requests that
finished since the previous page), so two pages give a rate.

``args`` prints the fields gpudeck cares about from ``prepare_server_args(argv)``, the
function ``python -m sglang.launch_server`` calls. It does not call ``resolve_once()``: that
reads the model's config (``/models/...`` must exist or be a Hub id), not a GPU.

Why a stand-in for torchvision: importing the metrics collector imports ``sglang.srt.configs``,
whose ``internvl_utils`` / ``deepseek_ocr`` import ``torchvision.transforms`` at module level.
The torchvision wheels on PyPI are CUDA builds: their ``_C.so`` links ``libtorch_cuda.so`` and
``libc10_cuda.so``, which the CPU torch does not have, so ``import torchvision`` dies in
``torchvision/_meta_registrations.py`` (``register_fake("torchvision::nms")``: "operator
torchvision::nms does not exist"). The CPU build lives only on download.pytorch.org. So
torchvision is not installed, transformers is imported first (it then knows torchvision is
absent and never touches it), and an empty stand-in answers SGLang's module-level
``import torchvision.transforms as T``. No torchvision code runs on the paths used here.

On an import that fails for a missing package it prints {"missing": "<module>"} and exits 3.
"""

from __future__ import annotations

import enum
import importlib.abc
import importlib.machinery
import json
import os
import sys
import tempfile
import types
import warnings

warnings.filterwarnings("ignore")  # "Only CUDA ... support AWQ/GGUF" at import time


class _InterpolationMode(enum.Enum):
    NEAREST = "nearest"
    BILINEAR = "bilinear"
    BICUBIC = "bicubic"
    LANCZOS = "lanczos"


class _StandIn(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        if name == "InterpolationMode":
            return _InterpolationMode
        return type(name, (), {"__init__": lambda self, *a, **k: None})


class _TorchvisionStandIn(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if name == "torchvision" or name.startswith("torchvision."):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        return _StandIn(spec.name)

    def exec_module(self, module):
        module.__path__ = []


def import_sglang():
    """(metrics_collector, server_args, runtime_context, pool_stats_observer) modules."""
    import transformers.utils.import_utils as hf_imports

    if hf_imports.is_torchvision_available():  # a working torchvision: use it
        pass
    else:
        sys.meta_path.insert(0, _TorchvisionStandIn())
    from sglang.srt import runtime_context, server_args
    from sglang.srt.managers.scheduler_components import pool_stats_observer
    from sglang.srt.observability import metrics_collector

    return metrics_collector, server_args, runtime_context, pool_stats_observer


# ------------------------------------------------------------------ args


def cmd_args(argvs: list[list[str]]) -> list[dict]:
    _, sa_mod, _, _ = import_sglang()
    fields = ["model_path", "host", "port", "tp_size", "dp_size", "enable_metrics", "reasoning_parser",
              "mem_fraction_static", "speculative_algorithm", "speculative_num_steps",
              "speculative_eagle_topk", "speculative_num_draft_tokens"]
    out = []
    for argv in argvs:  # an argument SGLang does not know: argparse exits 2 with its message
        sa = sa_mod.prepare_server_args(argv)
        out.append({f: getattr(sa, f) for f in fields})
    return out


# ------------------------------------------------------------------ page


def _scheduler(mc, sa_mod, rc, pso, scenario: dict, rank: dict) -> None:
    """One scheduler process: publish its context, make its collector, log its stats."""
    argv = ["--model-path", "dummy", "--served-model-name", scenario["model"], "--device", "cpu",
            "--tp-size", str(scenario.get("tp", 1)), "--dp-size", str(len(scenario["dp"])), "--enable-metrics"]
    if scenario.get("all_schedulers"):
        argv.append("--enable-metrics-for-all-schedulers")
    sa = sa_mod.prepare_server_args(argv)
    dp_rank = rank["dp_rank"] if len(scenario["dp"]) > 1 else None
    rc.publish(sa, role="scheduler", ranks=rc.SpawnRanks(world_rank=rank["tp_rank"], dp_rank=dp_rank))
    ctx = mc.SchedulerMetricsCollector.init_new(server_args=sa, enable_priority_scheduling=False,
                                               enable_lora=False, enable_hierarchical_cache=False)
    if not ctx.current_scheduler_metrics_enabled:
        return  # SGLang's own rule: only the stats-logging rank reports, unless all schedulers do
    r = scenario["dp"][rank["dp_rank"]]
    pools = pso.PoolStats(full_num_used=0, full_token_usage=r["full"], full_available_size=0,
                          full_evictable_size=0, is_hybrid_swa="swa" in r, is_hybrid_ssm="mamba" in r,
                          swa_num_used=0, swa_token_usage=r.get("swa"), swa_available_size=0,
                          swa_evictable_size=0, mamba_num_used=0, mamba_usage=r.get("mamba"),
                          mamba_available_size=0, mamba_evictable_size=0)
    stats = mc.SchedulerStats()
    stats.num_running_reqs = mc.QueueCount(total=r["running"])
    stats.num_queue_reqs = mc.QueueCount(total=r["queued"])
    stats.spec_accept_length = r.get("accept", 0.0)
    pools.update_scheduler_stats(stats)
    ctx.collector.log_stats(stats)


def _fork(fn, *args) -> None:
    """Run fn in a forked child (a process of SGLang's own: a scheduler, a tokenizer manager)."""
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            fn(*args)
        except BaseException:
            import traceback
            traceback.print_exc()
            code = 1
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    if status != 0:
        raise SystemExit(f"{fn.__name__}{args[-1:]} failed")


def _server(mods, scenario: dict, out: str) -> None:
    """One SGLang server: its schedulers, then its tokenizer manager counting and serving pages."""
    mc, sa_mod, rc, pso = mods
    from prometheus_client import CollectorRegistry, generate_latest, multiprocess

    os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(dir=os.environ["PROMETHEUS_MULTIPROC_DIR"])
    for d in range(len(scenario["dp"])):
        for t in range(scenario.get("tp", 1)):
            _fork(_scheduler, mc, sa_mod, rc, pso, scenario, {"dp_rank": d, "tp_rank": t})
    sa = sa_mod.prepare_server_args(["--model-path", "dummy", "--served-model-name", scenario["model"],
                                     "--device", "cpu", "--enable-metrics"])
    rc.publish(sa, role="tokenizer")
    tok = mc.TokenizerMetricsCollector(server_args=sa, labels=mc.tokenizer_metric_labels())
    pages = []
    for step in scenario["finished"]:
        for n, tokens in enumerate(step):
            tok.observe_one_finished_request(mc.tokenizer_metric_labels(), prompt_tokens=100,
                                             generation_tokens=tokens, cached_tokens=0, e2e_latency=1.0,
                                             has_grammar=False, is_streaming=bool(n % 2))
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        pages.append(generate_latest(registry).decode())
    with open(out, "w") as f:
        json.dump(pages, f)


def cmd_page(scenarios: dict) -> dict:
    mods = import_sglang()
    out = {}
    for name, scenario in scenarios.items():
        path = os.path.join(os.environ["PROMETHEUS_MULTIPROC_DIR"], f"{name}.json")
        _fork(_server, mods, scenario, path)
        with open(path) as f:
            out[name] = json.load(f)
    return out


def main() -> int:
    cmd, rest = sys.argv[1], sys.argv[2:]
    try:
        if cmd == "page":
            scenarios = json.loads(open(rest[0]).read())
            with tempfile.TemporaryDirectory(prefix="sglang-metrics-") as tmp:
                # prometheus_client picks its multiprocess value class when first imported: set it first
                os.environ["PROMETHEUS_MULTIPROC_DIR"] = tmp
                out = cmd_page(scenarios)
        else:
            out = cmd_args(json.loads(open(rest[0]).read()))
    except ModuleNotFoundError as exc:
        print(json.dumps({"missing": exc.name}))
        return 3
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
