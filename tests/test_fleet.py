"""The fleet file: typed objects, and mistakes reported with file, line and what was expected."""

from __future__ import annotations

import pytest

from gpudeck.remote.fleet import LOCAL, FleetError, load_fleet, local_fleet, parse_fleet

GOOD = '''
[defaults]
python = "/workspace/venv/bin/python3"

[[nodes]]
name = "pro6000"
host = "pro6000"
user = "ubuntu"

[[jobs]]
name = "sglang-0"
node = "pro6000"
kind = "sglang-server"
gpus = [0]
model = "/models/Qwen3.6-27B"
port = 30000
args = ["--reasoning-parser", "qwen3", "--mem-fraction-static", "0.80"]

[[jobs]]
name = "gen"
node = "pro6000"
kind = "generate"
servers = ["sglang-0"]
prompts = "/data/prompts.jsonl"
out = "/data/gen"
s3 = "s3://bucket/run-1"

[[jobs]]
name = "local-script"
command = "python3 extract.py --shard 3"
gpus = [1, 2]
done_set = "/data/done.txt"
total = 914000
'''


def test_a_good_fleet():
    f = parse_fleet(GOOD, "fleet.toml")
    assert [n.name for n in f.nodes] == [LOCAL, "pro6000"]
    assert f.node("pro6000").user == "ubuntu" and f.node("pro6000").python == "/workspace/venv/bin/python3"
    sg = f.job("sglang-0")
    argv = sg.argv("python3")
    assert argv[:3] == ["/workspace/venv/bin/python3", "-m", "sglang.launch_server"]
    assert argv[-1] == "--enable-metrics" and "--reasoning-parser" in argv
    assert sg.scrape_url == "http://127.0.0.1:30000/metrics"
    assert f.job("gen").options["servers"] == ["http://127.0.0.1:30000"]  # same node: loopback
    local = f.job("local-script")
    assert local.node is None and local.command == ["python3", "extract.py", "--shard", "3"]
    assert [j.name for j in f.jobs_on(LOCAL)] == ["local-script"]


def test_no_fleet_file_is_this_machine_alone():
    f = local_fleet()
    assert [n.name for n in f.nodes] == [LOCAL] and f.nodes[0].local and f.jobs == []


@pytest.mark.parametrize("text, line, expected", [
    ('[[jobs]]\nname = "a"\ncommand = ["x"\n', 3, "not valid TOML: Unclosed array"),
    ('[[jobs]]\nname = "a"\ncommand = ["x"]\ngpus = [0,,1]\n', 4, "not valid TOML"),
    ('[[jobs]]\nname = "a"\ncommand = ["x"]\ngpus = "0,1"\n', 4, "'gpus': expected a list of integers"),
    ('[[jobs]]\nname = "a"\ncommand = ["x"]\n\n[[jobs]]\nname = "b"\nkind = "command"\nmodle = "x"\n', 8,
     "has no key 'modle' for kind 'command'"),
    ('[[jobs]]\nname = "a"\ncommand = ["x"]\nnode = "gpu9"\n', 4, "no node named 'gpu9'"),
    ('[[jobs]]\nname = "a"\nkind = "sglang-server"\nmodel = "m"\n', 1, "needs a 'port'"),
    ('[[jobs]]\nname = "a"\nkind = "sglang-server"\nport = 1\n', 1, "needs a 'model'"),
    ('[[jobs]]\nname = "a"\nkind = "warp-drive"\n', 3, "'kind': expected one of"),
    ('[[jobs]]\nname = "a"\ncommand = ["x"]\n[[jobs]]\nname = "a"\ncommand = ["y"]\n', 5, "declared twice"),
    ('[[nodes]]\nhost = "x"\n', 1, "needs a 'name'"),
    ('[[nodes]]\nname = "x"\nport = "22"\n', 3, "'port': expected an integer"),
    ('[defaults]\npyhton = "x"\n', 2, "[defaults] has no key 'pyhton'"),
    ('[jobz]\n', 1, "unknown section 'jobz'"),
    ('[[jobs]]\nname = "g"\nkind = "generate"\nservers = ["nowhere"]\n', 4, "neither a URL nor an engine job"),
])
def test_mistakes_name_file_line_and_expectation(text, line, expected):
    with pytest.raises(FleetError) as err:
        parse_fleet(text, "fleet.toml")
    assert err.value.line == line, str(err.value)
    assert str(err.value).startswith(f"fleet.toml:{line}: ")
    assert expected in str(err.value)


def test_missing_file(tmp_path):
    with pytest.raises(FleetError, match="cannot read the fleet file"):
        load_fleet(tmp_path / "nope.toml")
