"""``gpudeck generate --part I/N``: one option of GenerateOptions (flag, fleet key, argv), the
split of the prompts between parts by extract's rule (every prompt in exactly one part, each
bad line reported by one part), each part in its own directory and S3 prefix with its own
total, and a part killed mid-run that resumes its own done-set.

The unit tier's tests of this file (starts nothing); the others are in
tests/system/test_generate_parts.py."""

from __future__ import annotations

import json
import re

import pytest

from gpudeck.agents.contract.jobs import JobSpec
from gpudeck.agents.contract.kinds import GenerateOptions, OptionError
from gpudeck.agents.workers.common.idscan import scan_ids
from gpudeck.agents.workers.common.parts import in_part, part_name
from gpudeck.agents.workers.generate.cli import build_parser
from gpudeck.agents.workers.generate.options import options_from_args
from gpudeck.agents.workers.generate.prompts import PromptError, PromptReader, line_id
from support.generate import write_prompts
from support.generate_parts import N


def _parse(*argv: str):
    return options_from_args(build_parser().parse_args(["--prompts", "p.jsonl", "--out", "o", "--server",
                                                        "http://127.0.0.1:30000", *argv]))


# ---------------------------------------------------------------- the option


def test_part_is_one_option_its_flag_fleet_key_and_argv():
    assert "part" in GenerateOptions.fleet_keys()
    assert _parse("--part", "2/3").part == (2, 3)
    assert _parse().part is None
    for bad in ("3/3", "-1/3", "1/0", "1", "a/b"):
        with pytest.raises(SystemExit):
            _parse("--part", bad)
    # a fleet job: "I/N" or [I, N]; its argv says --part I/N and reads back into the same options
    for value in ("1/4", [1, 4]):
        spec = JobSpec(name="g", kind="generate", options={"prompts": "/p.jsonl", "out": "/o",
                                                            "servers": ["http://10.0.0.1:30000"], "part": value})
        assert spec.options.part == (1, 4) and spec.options.fleet_dict()["part"] == [1, 4]
        argv = spec.argv("/venv/bin/python")
        assert argv[argv.index("--part") + 1] == "1/4"
        assert options_from_args(build_parser().parse_args(argv[3:])).fleet_dict() == spec.options.fleet_dict()
    with pytest.raises(OptionError) as err:
        GenerateOptions.from_fleet({"prompts": "/p", "out": "/o", "servers": ["http://h:1"], "part": "4/4"})
    assert err.value.key == "part" and "need 0 <= I < N" in str(err.value)
    no_part = JobSpec(name="g", kind="generate", options={"prompts": "/p.jsonl", "out": "/o",
                                                           "servers": ["http://10.0.0.1:30000"]})
    assert "--part" not in no_part.argv("/venv/bin/python")


def test_extract_and_generate_split_by_the_one_rule():
    import zlib
    pytest.importorskip("numpy", reason="the extraction worker's data module imports numpy (pip install "
                                        "'.[extract]')")
    from gpudeck.agents.workers.extract import data
    assert not hasattr(data, "in_part"), "one in_part, in agents/workers/common/parts.py"
    assert part_name((1, 4)) == "part-1-of-4"
    for rid in ("p0", "41", "é", "x" * 100):
        assert in_part(rid, None)
        assert [in_part(rid, (i, 5)) for i in range(5)].count(True) == 1
        assert in_part(rid, (zlib.crc32(rid.encode()) % 5, 5))


def test_the_reader_gives_each_prompt_and_each_bad_line_to_one_part(tmp_path):
    prompts = tmp_path / "prompts.jsonl"
    ids = write_prompts(prompts, 300)
    with open(prompts, "a") as f:
        f.write("{this is not json\n")  # no id: the part of its line index, "300"
        f.write('{"id": "broken", nope\n')  # an id peeked, then not JSON: the part of "broken"
        f.write(json.dumps({"id": 7, "messages": [{"role": "system", "content": "x"}]}) + "\n")  # no user turn
        f.write(json.dumps({"messages": [{"role": "user", "content": "an id-less line"}]}) + "\n")  # id "303"
        f.write("[1, 2]\n")  # not an object: the part of "304"
    ids.append("303")
    got: list[str] = []
    bad: list[int] = []
    part_lines = 0
    for i in range(N):
        reader = PromptReader(str(prompts), lambda pid: False, part=(i, N))
        mine = []
        while (item := reader.next()) is not None:
            if isinstance(item, PromptError):
                bad.append(int(re.search(r":(\d+): ", str(item)).group(1)))
            elif item is not True:
                assert in_part(item.id, (i, N))
                mine.append(item.id)
        assert mine, f"part {i} got no prompt"
        got += mine
        scan = scan_ids([str(prompts)], line_id, None, (i, N))
        assert scan.lines == 305 and scan.part_lines is not None
        part_lines += scan.part_lines
    assert sorted(got) == sorted(ids)
    assert sorted(bad) == [301, 302, 303, 305], "each bad line is reported by exactly one part"
    assert part_lines == 305, "the parts' line counts add up to the file's"
