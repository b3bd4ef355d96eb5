"""The plans as text for a terminal (the JSON documents are the same facts)."""

from __future__ import annotations

from typing import Optional

from ...contract.units import human_bytes, human_duration


def _f(v: Optional[float], fmt: str = "{:.1f}") -> str:
    return "-" if v is None else fmt.format(v)


def render_generate(plan: dict) -> str:
    lines = [f"pilot: {plan['pilot_done']} completions ({plan['pilot_failed']} failed) of {plan['prompts']} prompts, "
             f"{plan['servers']} server(s), {plan.get('pilot_s', 0):.0f}s",
             "",
             f"{'CONC/SERVER':>11} {'DONE':>5} {'IN FLIGHT':>9} {'COMPL/S':>9} {'OUT TOK/S':>10} "
             f"{'LAT P50':>8} {'LAT P95':>8}"]
    for r in plan["levels"]:
        mark = " <- best" if r["concurrency"] == plan["best_concurrency"] else ""
        if r.get("measured") == "model":  # never held full: the latency model's figure
            mark = " (modelled)" + mark
        lines.append(f"{r['concurrency']:>11} {r['completions']:>5} {_f(r['in_flight_per_server']):>9} "
                     f"{_f(r['completions_per_s'], '{:.2f}'):>9} {_f(r['output_tokens_per_s'], '{:.0f}'):>10} "
                     f"{_f(r['latency_p50_s'], '{:.2f}s'):>8} {_f(r['latency_p95_s'], '{:.2f}s'):>8}{mark}")
    ol = plan["output_length"]
    share = (lambda v: "-" if v is None else f"{v:.1%}")
    lines += ["", f"output tokens: mean {_f(ol['mean'], '{:.0f}')}, p50 {_f(ol['p50'], '{:.0f}')}, "
                  f"p95 {_f(ol['p95'], '{:.0f}')}; cut at max_tokens={ol['max_tokens']}: {share(ol['cut_share'])}, "
                  f"empty: {share(ol['empty_share'])}, reasoning: {share(ol['reasoning_share'])}"]
    if plan["projected_wall_s"] is not None:
        lines.append(f"projection at {plan['best_concurrency']} per server: {plan['remaining']} prompts left, "
                     f"{human_duration(plan['projected_wall_s'])} "
                     f"(90% interval {human_duration(plan['projected_wall_s_low'])}"
                     f"-{human_duration(plan['projected_wall_s_high'])}, of it {plan.get('projected_start_s') or 0:.0f}s "
                     f"of start and {plan['projected_tail_s']:.0f}s of drain at the end"
                     f"{', as the pilot drained' if plan.get('tail_measured') else ''})")
    elif plan["best_concurrency"] is not None and plan["remaining"] == 0:
        lines.append(f"projection: none, the pilot did all {plan['prompts']} prompts; nothing is left to run")
    lines.append(f"whole dataset: {_f(plan['projected_output_tokens'], '{:,.0f}')} output tokens, "
                 f"{human_bytes(plan['projected_bytes'])} of shards")
    if plan["deadline_s"] is not None:
        need = plan["servers_needed"]
        lines.append(f"deadline in {human_duration(plan['deadline_s'])}: "
                     + (f"{need} server(s) needed" if need else "not reachable with any number of servers"))
    if plan["projected_cost"] is not None:
        extra = (f" ({plan['servers_needed']} servers: ${plan['projected_cost_at_servers_needed']:,.2f})"
                 if plan.get("projected_cost_at_servers_needed") is not None
                 and plan["servers_needed"] != plan["servers"] else "")
        lines.append(f"cost at ${plan['price_per_hour']}/server-hour: ${plan['projected_cost']:,.2f}{extra}")
    lines += [f"caution: {c}" for c in plan.get("cautions") or []]
    lines += ["", _verdict_line(plan)]
    return "\n".join(lines)


def render_assumed(plan: dict) -> str:
    """A plan of hardware not rented yet (plan generate --tokens-per-s): what was assumed, the
    levers, the projection with no interval."""
    a, ol = plan["assumptions"], plan["output_length"]
    length = (f"the output lengths of {a['lengths_from']}" if a["lengths_from"]
              else f"{a['output_tokens']:,.0f} output tokens an answer")
    lines = [f"ASSUMED, no server measured: {a['tokens_per_s']:,.0f} output tokens/s per server x "
             f"{a['server_count']} server(s), {length}",
             f"prompts: {plan['prompts']:,}" + (f" of {plan['prompts_in_file']:,}" if a["subset"] is not None else "")]
    lines += [f"  lever: {lever}" for lever in plan["levers"]]
    cut = ol["cut_share"]
    lines.append(f"output tokens: mean {_f(ol['mean'], '{:,.0f}')} under max_tokens={ol['max_tokens']}"
                 + (f", {cut:.1%} cut" if cut is not None else ""))
    if plan["projected_wall_s"] is not None:
        lines.append(f"projection: {human_duration(plan['projected_wall_s'])} ({plan['projected_wall_s']:,.0f} s, "
                     f"{plan['projected_wall_s'] / 86400:.2f} days) at {plan['output_tokens_per_s']:,.0f} output "
                     f"tokens/s in all; no interval: nothing was measured")
    lines.append(f"whole run: {_f(plan['projected_output_tokens'], '{:,.0f}')} output tokens, "
                 f"{human_bytes(plan['projected_bytes'])} of shards (at {a['bytes_per_token']:g} bytes a token)")
    if plan["deadline_s"] is not None:
        lines.append(f"deadline in {human_duration(plan['deadline_s'])}: {plan['servers_needed']} server(s) needed")
    if plan["projected_cost"] is not None:
        lines.append(f"cost at ${plan['price_per_hour']}/server-hour: ${plan['projected_cost']:,.2f} (on any number "
                     f"of servers: no drain is assumed)")
    lines += ["", _verdict_line(plan) + " (assumed)"]
    return "\n".join(lines)


def _verdict_line(plan: dict) -> str:
    if plan["verdict"] == "go":
        return "verdict: GO"
    return "verdict: NO-GO: " + "; ".join(plan["reasons"])


def render_extract(plan: dict) -> str:
    lines = [f"data: {plan['samples']:,} samples, {plan['tokens']:,} tokens"
             f"{' (given)' if plan['tokens_given'] else ' (counted after the chat template)'}",
             f"model: {plan['layers_kept']} of {plan['num_layers']} layers kept x hidden {plan['hidden_size']} x "
             f"{plan['dtype_bytes']} bytes = {plan['bytes_per_token_raw']:,} bytes/token"]
    c = plan["compression"]
    if c is not None:
        lines.append(f"--compress: x{c['ratio']:.3f} ({'measured on a pilot of ' + str(c['pilot_tokens']) + ' tokens' if c['measured'] else 'the documented ratio, not measured: ' + c['why']})")
    lines += [f"output: {human_bytes(plan['projected_bytes'])} ({human_bytes(plan['projected_bytes'], binary=True)}); "
              f"free on {plan['disk_path']}: {human_bytes(plan['free_bytes'])} -> "
              f"{'fits' if plan['fits'] else 'DOES NOT FIT'}",
              f"S3: ${plan['s3_cost_per_month']:,.2f} per month at ${plan['s3_price_per_gb_month']}/GB-month"]
    t = plan["time"]
    if t["tokens_per_s"]:
        gpus = plan.get("gpus", 1)
        lines.append(f"time: {human_duration(plan['projected_wall_s'])} at {t['tokens_per_s']:,.0f} tok/s"
                     f"{' per GPU x ' + str(gpus) + ' GPUs' if gpus > 1 else ''} ({t['source']})")
        if plan.get("projected_cost") is not None:
            lines.append(f"cost at ${plan['price_per_hour']}/GPU-hour: ${plan['projected_cost']:,.2f}")
    else:
        lines.append(f"time: unknown ({t['source']})")
    if t.get("startup_s") is not None:
        starts = 1 + t.get("restarts", 0)
        lines.append(f"start-up: {t['startup_s']:.0f} s to the first durable shard x {starts} start(s) "
                     f"(--restarts {t.get('restarts', 0)}) = {human_duration(starts * t['startup_s'])}, "
                     f"included ({t['startup_source']})")
    elif "startup_source" in t:
        lines.append(f"start-up: {t['startup_source']}")
    for lever in plan["levers"]:
        lines.append(f"  lever: {lever}")
    lines += ["", "verdict: GO" if plan["verdict"] == "go" else "verdict: NO-GO: " + "; ".join(plan["reasons"])]
    return "\n".join(lines)
