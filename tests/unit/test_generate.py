"""gpudeck generate against real sim-engine processes: formats, records, resume, bad input,
a server that dies mid-run, a full disk.

The unit tier's tests of this file (starts nothing); the others are in
tests/system/test_generate.py."""

from __future__ import annotations

from support.generate_cases import _p


def test_the_prompt_reader_never_holds_a_huge_line(tmp_path):
    import tracemalloc

    from gpudeck.agents.workers.common.idscan import scan_ids
    from gpudeck.agents.workers.generate.prompts import PromptError, PromptReader, line_id
    prompts = tmp_path / "prompts.jsonl"
    with open(prompts, "w") as f:
        f.write(_p("a", "x"))
        f.write('{"id": "huge", "messages": [{"role": "user", "content": "')
        for _ in range(50):
            f.write("y" * (1 << 20))
        f.write('"}]}\n')
        f.write(_p("b", "z"))
    tracemalloc.start()
    reader = PromptReader(str(prompts), lambda _: False)
    items = [reader.next(), reader.next(), reader.next(), reader.next()]
    scan = scan_ids([str(prompts)], line_id, 1 << 20)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert [getattr(i, "id", None) for i in items] == ["a", None, "b", None]
    assert isinstance(items[1], PromptError) and f"{prompts}:2:" in str(items[1])
    assert reader.line == 4 and reader.offset == prompts.stat().st_size
    assert scan.lines == 2 and scan.duplicates == 0
    assert peak < 8 << 20, f"reading a 50 MB line peaked at {peak / 2**20:.1f} MiB"
