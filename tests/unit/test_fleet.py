"""The fleet file: typed objects, and mistakes reported with file, line and what was expected."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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
    assert f.job("gen").options.servers == ["http://127.0.0.1:30000"]  # same node: loopback
    local = f.job("local-script")
    assert local.node is None and local.command == ["/bin/sh", "-c", "python3 extract.py --shard 3"]
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
    ('[[jobs]]\nname = "g"\nkind = "generate"\nprompts = "p"\nout = "o"\nservers = ["nowhere"]\n', 6,
     "neither a URL nor an engine job"),
    ('[[jobs]]\nname = "g"\nkind = "generate"\nprompts = "p"\nout = "o"\nservers = ["http://h:1"]\nconcurrency = "many"\n',
     7, "'concurrency': expected an integer, got 'many'"),
    ('[[jobs]]\nname = "g"\nkind = "generate"\nservers = ["http://h:1"]\n', 1, "kind 'generate' needs 'prompts', 'out'"),
])
def test_mistakes_name_file_line_and_expectation(text, line, expected):
    with pytest.raises(FleetError) as err:
        parse_fleet(text, "fleet.toml")
    assert err.value.line == line, str(err.value)
    assert str(err.value).startswith(f"fleet.toml:{line}: ")
    assert expected in str(err.value)


@pytest.mark.parametrize("key, value, toml", [
    ("max_restarts", 5000, "5000"),  # the fleet file refused it, the node took it
    ("max_restarts", -1, "-1"),
    ("stall_after_s", 0, "0"),
    ("log_max_mb", 0, "0"),
    ("tp", 0, "0"),
    ("kill_grace_s", 4000, "4000"),
    ("restart_backoff_s", "10s", '"10s"'),
    ("gpus", "0,1", '"0,1"'),
    ("total", "many", '"many"'),
])
def test_the_fleet_file_and_the_node_read_a_job_s_own_fields_alike(key, value, toml):
    """One reader: JobSpec checks a job's own fields, whether the spec comes from a fleet file
    or reaches the node in an op; the fleet file says the spec's words at the key's line."""
    from gpudeck.agents.contract.jobs import JobSpec, SpecError

    with pytest.raises(SpecError) as node:
        JobSpec.from_dict({"name": "a", "command": ["x"], key: value})
    with pytest.raises(FleetError) as fleet:
        parse_fleet(f'[[jobs]]\nname = "a"\ncommand = ["x"]\n{key} = {toml}\n', "fleet.toml")
    assert node.value.key == key and str(node.value) == f"job 'a' {node.value.said}"
    assert str(fleet.value) == f"fleet.toml:4: [[jobs]] #1 ('a') {node.value.said}"


def test_missing_file(tmp_path):
    with pytest.raises(FleetError, match="cannot read the fleet file"):
        load_fleet(tmp_path / "nope.toml")


# ---------------------------------------------------------------- what an adversarial run found

@pytest.mark.parametrize("text, where, says", [
    ('[defaults]\ninterval = 0\n', ":2:", "from 0.01 to 3600"),
    ('[[nodes]]\nname = "a"\ninterval = -1\n', ":3:", "from 0.01 to 3600"),
    ('[defaults]\ninterval = nan\n', ":2:", "from 0.01 to 3600"),
    ('[defaults]\nhome = 5\n', ":2:", "expected a string, got 5"),
    ('[defaults]\nnvml = "no"\n', ":2:", "expected true or false"),
    ('[[jobs]]\nname = "j"\ncommand = "echo \\"x"\n', ":3:", "not a valid shell command line"),
    ('[[jobs]]\nname = "j"\ncommand = ["sleep"]\nport = 70000\n', ":4:", "from 1 to 65535"),
    ('[[jobs]]\nname = "' + "x" * 300 + '"\ncommand = ["sleep"]\n', ":1:", "at most 64 characters"),
    ('[[jobs]]\nname = "a b;rm"\ncommand = ["sleep"]\n', ":1:", "only letters, digits"),
])
def test_mistakes_found_by_an_adversarial_run_are_reported_with_their_line(text, where, says):
    with pytest.raises(FleetError) as e:
        parse_fleet(text, "f.toml")
    assert f"f.toml{where}" in str(e.value) and says in str(e.value), str(e.value)


def test_a_type_error_in_env_names_the_key_never_a_value():
    secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY"
    text = (f'[[jobs]]\nname = "j"\ncommand = ["sleep"]\n'
            f'env = {{ AWS_SECRET_ACCESS_KEY = "{secret}", NCCL_DEBUG_LEVEL = 2 }}\n')
    with pytest.raises(FleetError) as e:
        parse_fleet(text, "f.toml")
    assert "NCCL_DEBUG_LEVEL" in str(e.value) and "an integer" in str(e.value)
    assert secret not in str(e.value)
    for text in ('[[jobs]]\nname = "j"\ncommand = ["sleep"]\nmetrics_url = 5\n',
                 f'[[jobs]]\nname = "j"\ncommand = ["sleep"]\nenv = "{secret}"\n'):
        with pytest.raises(FleetError) as e:
            parse_fleet(text, "f.toml")
        assert secret not in str(e.value) and "5" not in str(e.value).split(":", 2)[2]


# a valid fleet, mutated at random: every outcome is a Fleet or a FleetError, never a traceback
_MUTATIONS = ["0", "-1", "nan", "inf", '"x"', '"no"', "true", "[99]", "[]", '["a"]', "{ a = 1 }",
              '"' + "y" * 300 + '"', '"echo \\"x"', '"a b"', "1.5", '"/"', '"."', "[[1]]", '"s3://b/p"']


FUZZ_BASE = GOOD.replace('[defaults]\n', '[defaults]\ninterval = 1.0\nnvml = true\nhome = "~/.gpudeck"\n') + \
    '\n[[jobs]]\nname = "eng"\ncommand = ["sleep", "9"]\nport = 30001\nenv = { A = "b" }\nmetrics_url = "http://x/m"\n'


def _mutate(text: str, data) -> str:
    lines = text.split("\n")
    for _ in range(data.draw(st.integers(1, 2))):
        keyed = [i for i, line in enumerate(lines) if "=" in line]
        op = data.draw(st.sampled_from(["value"] * 8 + ["key", "drop", "raw"]))
        i = data.draw(st.sampled_from(keyed)) if keyed and op in ("value", "key") else \
            data.draw(st.integers(0, len(lines) - 1))
        line = lines[i]
        if op == "value":
            lines[i] = line.split("=", 1)[0] + "= " + data.draw(st.sampled_from(_MUTATIONS))
        elif op == "key":
            key = data.draw(st.sampled_from(["interval", "gpus", "kind", "port", "name", "node", "env", "command",
                                             "servers", "total", "nvml", "home", "python", "bogus", "tp"]))
            lines[i] = key + " =" + line.split("=", 1)[1]
        elif op == "drop":
            del lines[i]
            lines = lines or [""]
        elif op == "dup":
            lines.insert(i, line)
        else:
            lines[i] = data.draw(st.text(max_size=30))
    return "\n".join(lines)


@settings(max_examples=1000, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(st.data())
def test_a_mutated_fleet_file_never_ends_in_a_traceback(data):
    text = _mutate(FUZZ_BASE, data)
    try:
        parse_fleet(text, "f.toml")
    except FleetError:
        pass


# ---------------------------------------------------------------- bastions (`jump`)

JUMPS = """\
[defaults]
user = "root"

[[nodes]]
name = "bastion"
host = "10.0.0.1"

[[nodes]]
name = "gpu1"
host = "10.1.0.1"
jump = "bastion"
"""


def test_a_jump_names_a_node_or_a_host():
    fleet = parse_fleet(JUMPS, "f.toml")
    assert fleet.node("gpu1").via == fleet.node("bastion") and fleet.node("bastion").via is None
    host = parse_fleet(JUMPS.replace('jump = "bastion"', 'jump = "admin@gate.example.com:2222"'), "f.toml")
    via = host.node("gpu1").via
    assert (via.name, via.user, via.host, via.port) == ("admin@gate.example.com:2222", "admin", "gate.example.com",
                                                        2222)
    # a default jump: for every node but the bastion it names
    fleet = parse_fleet(JUMPS.replace('user = "root"\n', 'user = "root"\njump = "bastion"\n'), "f.toml")
    assert fleet.node("bastion").via is None and fleet.node("gpu1").via.name == "bastion"
    assert parse_fleet(JUMPS.replace('jump = "bastion"', 'jump = "none"'), "f.toml").node("gpu1").via is None


@pytest.mark.parametrize("jump, line, says", [
    ('"gpu1"', 11, "node 'gpu1' 'jump': a node cannot jump through itself"),
    ('"bastoin"', 11, "no node named 'bastoin' (did you mean 'bastion'?)"),
    ('"local"', 11, "'local' is the local node, not an SSH host"),
    ('"root@gate.example.com:99999"', 11, "the port must be a number from 1 to 65535"),
    ('"@gate"', 11, "expected [user@]host[:port]"),
    ('3', 11, "[[nodes]] #2 'jump': expected a string, got 3"),
])
def test_a_wrong_jump_says_file_line_and_why(jump, line, says):
    with pytest.raises(FleetError) as err:
        parse_fleet(JUMPS.replace('jump = "bastion"', f"jump = {jump}"), "f.toml")
    assert str(err.value).startswith(f"f.toml:{line}: ") and says in str(err.value), str(err.value)


def test_jumps_in_a_circle_are_refused():
    text = JUMPS.replace('host = "10.0.0.1"\n', 'host = "10.0.0.1"\njump = "gpu1"\n')
    with pytest.raises(FleetError) as err:
        parse_fleet(text, "f.toml")
    assert str(err.value) == "f.toml:12: node 'gpu1' 'jump': the jumps go round in a circle (bastion -> gpu1 -> bastion)"


def test_the_local_node_may_be_declared_with_its_own_settings():
    f = parse_fleet('[[nodes]]\nname = "local"\nsimulate_gpus = "2xH200:141"\ninterval = 0.5\n', "f.toml")
    assert [n.name for n in f.nodes] == ["local"]
    assert f.node("local").host is None and f.node("local").simulate_gpus == "2xH200:141"


def test_price_per_hour_on_a_node_or_as_every_nodes_default():
    f = parse_fleet('[defaults]\nprice_per_hour = 12.5\n\n[[nodes]]\nname = "b200"\nprice_per_hour = 98\n\n'
                    '[[nodes]]\nname = "pro6000"\n\n[[nodes]]\nname = "spare"\nprice_per_hour = 0\n', "f.toml")
    assert {n.name: n.price_per_hour for n in f.nodes} == {"local": 12.5, "b200": 98, "pro6000": 12.5, "spare": 0}
    assert parse_fleet('[[nodes]]\nname = "a"\n', "f.toml").node("a").price_per_hour is None  # not priced, not $0


@pytest.mark.parametrize("text, line, says", [
    ('[[nodes]]\nname = "a"\nprice_per_hour = -2.5\n', 3, "[[nodes]] #1 'price_per_hour': expected a finite number "
                                                          "at least 0, got -2.5"),
    ('[[nodes]]\nname = "a"\n\nprice_per_hour = "$98"\n', 4, "[[nodes]] #1 'price_per_hour': expected a number, "
                                                             "got \"$98\""),
    ('[[nodes]]\nname = "a"\nprice_per_hour = true\n', 3, "'price_per_hour': expected a number, got true"),
    ('[[nodes]]\nname = "a"\nprice_per_hour = inf\n', 3, "expected a finite number at least 0, got inf"),
    ('[defaults]\nprice_per_hour = nan\n', 2, "[defaults] 'price_per_hour': expected a finite number at least 0"),
    ('[[jobs]]\nname = "j"\ncommand = ["x"]\nprice_per_hour = 3\n', 4, "has no key 'price_per_hour' for kind"),
])
def test_a_bad_price_per_hour_says_file_line_and_what_was_expected(text, line, says):
    with pytest.raises(FleetError) as err:
        parse_fleet(text, "fleet.toml")
    assert str(err.value).startswith(f"fleet.toml:{line}: ") and says in str(err.value), str(err.value)


def test_the_plan_drift_limit_is_an_alerts_threshold():
    assert parse_fleet('[alerts]\nplan_drift_pct = 10\n', "f.toml").alerts.plan_drift_pct == 10
    assert parse_fleet('', "f.toml").alerts.plan_drift_pct == 25.0
    with pytest.raises(FleetError) as err:
        parse_fleet('[alerts]\nplan_drift_pct = -5\n', "f.toml")
    assert str(err.value).startswith("f.toml:2: [alerts] 'plan_drift_pct': expected a finite number >= 0")


def test_hello_timeout_s_on_a_node_or_as_every_nodes_default():
    f = parse_fleet('[defaults]\nhello_timeout_s = 40\n\n[[nodes]]\nname = "nfs"\n\n'
                    '[[nodes]]\nname = "fast"\nhello_timeout_s = 5.5\n', "f.toml")
    assert {n.name: n.hello_timeout_s for n in f.nodes} == {"local": 40, "nfs": 40, "fast": 5.5}
    assert parse_fleet('[[nodes]]\nname = "a"\n', "f.toml").node("a").hello_timeout_s == 15.0


@pytest.mark.parametrize("text, line, says", [
    ('[[nodes]]\nname = "a"\nhello_timeout_s = 0\n', 3, "[[nodes]] #1 'hello_timeout_s': expected a number from "
                                                         "0.1 to 3600, got 0"),
    ('[[nodes]]\nname = "a"\n\nhello_timeout_s = -5\n', 4, "'hello_timeout_s': expected a number from 0.1 to 3600"),
    ('[[nodes]]\nname = "a"\nhello_timeout_s = 86400\n', 3, "expected a number from 0.1 to 3600, got 86400"),
    ('[[nodes]]\nname = "a"\nhello_timeout_s = "40s"\n', 3, "'hello_timeout_s': expected a number, got \"40s\""),
    ('[defaults]\nhello_timeout_s = nan\n\n[[nodes]]\nname = "a"\n', 2,
     "[defaults] 'hello_timeout_s': expected a number from 0.1 to 3600, got nan"),
    ('[defaults]\nhello_timeout = 40\n', 2, "[defaults] has no key 'hello_timeout' (did you mean 'hello_timeout_s'?)"),
])
def test_a_bad_hello_timeout_s_says_file_line_and_what_was_expected(text, line, says):
    with pytest.raises(FleetError) as err:
        parse_fleet(text, "fleet.toml")
    assert str(err.value).startswith(f"fleet.toml:{line}: ") and says in str(err.value), str(err.value)


# ---------------------------------------------------------------- what a user trying a real fleet found

def test_a_bad_default_is_reported_against_defaults_on_its_own_line_with_its_value():
    text = '[defaults]\nuser = "ubuntu"\nhost_keys = "accept_new"\n\n[[nodes]]\nname = "gpu1"\n'
    with pytest.raises(FleetError) as err:
        parse_fleet(text, "f.toml")
    assert str(err.value) == ("f.toml:3: [defaults] 'host_keys': expected \"strict\" or \"accept-new\", "
                              "got \"accept_new\"")
    with pytest.raises(FleetError) as err:  # no [[nodes]] to take it: still a mistake
        parse_fleet('[defaults]\nhost_keys = "yes"\n', "f.toml")
    assert str(err.value).startswith("f.toml:2: [defaults] 'host_keys'") and 'got "yes"' in str(err.value)
    with pytest.raises(FleetError) as err:  # a node's own, with its value too
        parse_fleet('[[nodes]]\nname = "a"\nhost_keys = "no"\n', "f.toml")
    assert str(err.value) == "f.toml:3: [[nodes]] #1 'host_keys': expected \"strict\" or \"accept-new\", got \"no\""
    secret = "/home/op/.ssh/id_ed25519_prod_gpu_fleet"
    with pytest.raises(FleetError) as err:  # a secret-like key shows no value, only its type
        parse_fleet(f'[defaults]\nidentity = ["{secret}"]\n\n[[nodes]]\nname = "a"\n', "f.toml")
    assert str(err.value).startswith("f.toml:2: [defaults] 'identity': expected a string, got a list")
    assert secret not in str(err.value)


@pytest.mark.parametrize("text, line, says", [
    ('[[nodes]]\nname = "a"\nprot = 22\n', 3, "[[nodes]] #1 has no key 'prot' (did you mean 'port'?)"),
    ('[[nodes]]\nname = "a"\nhost_key = "accept-new"\n', 3, "has no key 'host_key' (did you mean 'host_keys'?)"),
    ('[defaults]\nhost_key = "accept-new"\n', 2, "[defaults] has no key 'host_key' (did you mean 'host_keys'?)"),
    ('[[jobs]]\nname = "j"\ncommand = ["x"]\ngpu = [0]\n', 4, "has no key 'gpu' for kind 'command' (did you mean "
                                                              "'gpus'?)"),
    ('[[jobs]]\nname = "g"\nkind = "generate"\nprompt = "p.jsonl"\n', 4, "(did you mean 'prompts'?)"),
    ('[[jobs]]\nname = "s"\nkind = "sglang_server"\n', 3, "got 'sglang_server' (did you mean 'sglang-server'?)"),
    ('[alerts]\ngpu_temp = 80\n', 2, "[alerts] has no key 'gpu_temp' (did you mean 'gpu_temp_c'?)"),
    ('[[notify]]\nurl = "https://ntfy.sh/x"\nevent = ["died"]\n', 3, "[[notify]] #1 has no key 'event' (did you mean "
                                                                   "'events'?)"),
    ('[[job]]\nname = "j"\n', 1, "unknown section 'job' (did you mean 'jobs'?)"),
    ('[[nodes]]\nname = "a"\nbananas = 1\n', 3, "[[nodes]] #1 has no key 'bananas'; expected one of"),
])
def test_a_near_miss_of_a_key_says_which_was_meant(text, line, says):
    with pytest.raises(FleetError) as err:
        parse_fleet(text, "f.toml")
    assert str(err.value).startswith(f"f.toml:{line}: ") and says in str(err.value), str(err.value)


def test_a_node_may_be_this_machine_under_its_own_name():
    f = parse_fleet('[[nodes]]\nname = "b200"\nlocal = true\nhome = "/tmp/b200"\n\n[[nodes]]\nname = "gpu1"\n',
                    "f.toml")
    assert f.node("b200").local and f.node("b200").home == "/tmp/b200" and not f.node("gpu1").local
    with pytest.raises(FleetError, match=r"f.toml:3: \[\[nodes\]\] #1: 'local = true' and a 'host' contradict"):
        parse_fleet('[[nodes]]\nname = "a"\nlocal = true\nhost = "a.example"\n', "f.toml")


def test_a_fleet_file_with_three_mistakes_reports_all_three_in_one_run():
    """One mistake a run made a newcomer run three times: each [[nodes]] and [[jobs]] table's
    mistake is said, a line each in the file's order; a job on a node whose table has a mistake
    is not blamed for it."""
    text = ('[[nodes]]\nname = "a"\nhots = "a.example"\n\n'
            '[[jobs]]\nname = "one"\nkind = "command"\ncommand = ["true"]\nnode = "a"\ngpus = "zero"\n\n'
            '[[jobs]]\nname = "two"\nkind = "command"\ncommand = ["true"]\nrestart = "sometimes"\n')
    with pytest.raises(FleetError) as err:
        parse_fleet(text, "f.toml")
    lines = str(err.value).splitlines()
    assert [ln.split(":")[1] for ln in lines] == ["3", "10", "12"], lines
    assert "'hots' (did you mean 'host'?)" in lines[0] and "'gpus'" in lines[1] and "'restart'" in lines[2]
    assert err.value.line == 3
    # one mistake is said as before
    with pytest.raises(FleetError, match=r"^f.toml:3: \[\[nodes\]\] #1 has no key 'hots'") as one:
        parse_fleet(text.split("\n\n")[0] + "\n", "f.toml")
    assert "\n" not in str(one.value)
