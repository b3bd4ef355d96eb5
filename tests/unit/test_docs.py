"""The docs keep up with the code: every fleet-file key is documented, every link leads somewhere.

**Fleet-file keys.** The keys the parser accepts are read from the parser's own tables at
test time (:func:`accepted_fleet_keys`), never listed here, so a key added to the parser
fails this test until docs/fleet-file.md documents it. The rule: a key is documented when it
appears as `` `key` `` (the key alone between backticks) in the section of docs/fleet-file.md
about its table. That section starts at the heading that names the table between backticks
(`` `[defaults]` ``, `` `[[nodes]]` ``, `` `[[jobs]]` ``, `` `[alerts]` ``, `` `[[notify]]` ``,
`` `[heartbeat]` ``) and ends at the next heading of the same or a higher level. A job kind's
options are looked for under the heading `` `kind = "NAME"` `` inside the `[[jobs]]` section.

**Links.** Every relative link in README.md and docs/*.md points to a file that exists, and a
``#fragment`` to a markdown file names one of its headings (GitHub's anchors).

It starts no server and reads a few files.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpudeck.agents.contract.jobs import KINDS, JobKind
from gpudeck.remote.fleet import SECTIONS, parse_fleet
from gpudeck.remote.fleet_check import FleetError

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
FLEET_DOC = DOCS / "fleet-file.md"


def accepted_fleet_keys() -> dict[str, frozenset[str]]:
    """Every key the fleet-file parser accepts, per table: the sets it checks a key against
    before refusing it as unknown. Keys of the result: a section of SECTIONS ("defaults",
    "nodes", "envs", "jobs", "alerts", "notify", "heartbeat", "plans"), and "kind=NAME" for each job kind's
    own options."""
    from gpudeck.remote import fleet, fleet_alerting, fleet_cluster, fleet_envs, fleet_jobs, fleet_nodes, fleet_plans
    from gpudeck.agents.contract.cluster import RESOURCE_KEYS

    keys = {
        "fleet": frozenset(fleet.FLEET_KEYS),
        "defaults": frozenset(fleet._DEFAULT_KEYS),
        # fleet_nodes.parse_nodes: the Node fields (less `via`, which `jump` resolves to), and `local`,
        # which it accepts by name
        "nodes": frozenset(fleet_nodes.NODE_FIELDS) | {"local"},
        # fleet_jobs.parse_jobs: the JobSpec fields, less `options` (the bag of a kind's options) and
        # `resources` (a cluster job's scheduler keys, given one by one: RESOURCE_KEYS)
        "jobs": frozenset(fleet_jobs.JOB_FIELDS) - {"options", "resources"} | frozenset(RESOURCE_KEYS),
        "clusters": frozenset(fleet_cluster.CLUSTER_KEYS),
        "envs": frozenset(fleet_envs.ENV_KEYS),
        "alerts": frozenset(fleet_alerting.ALERT_KEYS),
        "notify": frozenset(fleet_alerting.NOTIFY_KEYS),
        "heartbeat": frozenset(fleet_alerting.HEARTBEAT_KEYS),
        "plans": frozenset(fleet_plans.PLAN_KEYS),
    }
    # Each job kind's options: the fleet keys of its dataclass (agents/contract/kinds.py), the
    # set that fleet_jobs.parse_jobs checks a kind's keys against
    for kind in JobKind:
        keys[f"kind={kind.value}"] = frozenset(kind.options)
    return keys


# ---------------------------------------------------------------- reading markdown


def _outside_code(text: str) -> list[str]:
    """The lines of ``text``, with those inside ``` fences blanked (a TOML comment is no heading)."""
    out, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            out.append("")
        else:
            out.append("" if fenced else line)
    return out


_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def _headings(text: str) -> list[tuple[int, int, str]]:
    """(line index, level, title) of each heading outside code blocks."""
    return [(i, len(m.group(1)), m.group(2)) for i, line in enumerate(_outside_code(text))
            if (m := _HEADING.match(line))]


def _section(text: str, marker: str) -> str:
    """The text under the first heading that holds ``marker``, down to the next heading of
    the same or a higher level; '' when no heading holds it."""
    lines, heads = text.splitlines(), _headings(text)
    for n, (i, level, title) in enumerate(heads):
        if marker in title:
            end = next((j for j, lv, _ in heads[n + 1:] if lv <= level), len(lines))
            return "\n".join(lines[i:end])
    return ""


def _table_section(text: str, table: str) -> str:
    return _section(text, f"`[[{table}]]`") or _section(text, f"`[{table}]`")


def _in_backticks(text: str) -> set[str]:
    return set(re.findall(r"`([^`\n]+)`", text))


def _anchors(text: str) -> set[str]:
    """GitHub's anchors for the headings of ``text``: lower case, no punctuation but - and _,
    spaces as -, a repeat numbered -1, -2, ..."""
    seen: dict[str, int] = {}
    out = set()
    for _, _, title in _headings(text):
        slug = re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


# ---------------------------------------------------------------- fleet-file keys


def test_the_accepted_keys_are_the_ones_the_parser_lists_when_it_refuses_a_key():
    """accepted_fleet_keys reads the right tables: for an unknown key in each table (and each
    job kind), the parser's own "expected one of ..." is exactly what it returns. A key the
    parser accepts by some other route fails here, until accepted_fleet_keys reads it."""
    keys = accepted_fleet_keys()
    probes = {"fleet": "[fleet]\n", "defaults": "[defaults]\n", "nodes": '[[nodes]]\nname = "n1"\n', "alerts": "[alerts]\n",
              "clusters": '[[clusters]]\nname = "c1"\n',
              "notify": "[[notify]]\n", "heartbeat": "[heartbeat]\n", "plans": "[[plans]]\n"}
    probes.update({f"kind={k}": f'[[jobs]]\nname = "j1"\nkind = "{k}"\n' for k in KINDS})
    for table, head in probes.items():
        with pytest.raises(FleetError) as caught:
            parse_fleet(head + "zz_not_a_key = 1\n", "fleet.toml")
        listed = re.search(r"expected one of (.*)$", str(caught.value))
        assert listed, f"{table}: the parser's refusal no longer lists the keys: {caught.value}"
        expected = keys[table] | keys["jobs"] if table.startswith("kind=") else keys[table]
        assert {k.strip() for k in listed.group(1).split(",")} == set(expected), \
            f"{table}: accepted_fleet_keys() disagrees with the parser's own list: {caught.value}"
    assert set(SECTIONS) == {k for k in keys if not k.startswith("kind=")}


def test_every_key_the_fleet_parser_accepts_is_documented():
    text = FLEET_DOC.read_text()
    jobs = _table_section(text, "jobs")
    missing = []
    for table, accepted in accepted_fleet_keys().items():
        if table.startswith("kind="):
            kind = table.split("=", 1)[1]
            where, section = f'`kind = "{kind}"` in `[[jobs]]`', _section(jobs, f'`kind = "{kind}"`')
        else:
            where, section = f"`[{table}]` or `[[{table}]]`", _table_section(text, table)
        if not section:
            missing.append(f"no heading holding {where}")
            continue
        missing += [f"{where}: `{k}`" for k in sorted(accepted - _in_backticks(section))]
    assert not missing, (f"{FLEET_DOC.relative_to(ROOT)} does not document these fleet-file keys (the rule is in "
                         f"this test's docstring):\n  " + "\n  ".join(missing))


def test_every_job_kind_is_named_in_the_jobs_section():
    jobs = _in_backticks(_table_section(FLEET_DOC.read_text(), "jobs"))
    assert not set(KINDS) - jobs, f"kinds not named in `[[jobs]]`: {sorted(set(KINDS) - jobs)}"


# ---------------------------------------------------------------- links


def _markdown_files() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]


def _links(path: Path) -> list[tuple[int, str]]:
    """(line number, target) of each markdown link or image outside code blocks."""
    out = []
    for n, line in enumerate(_outside_code(path.read_text()), 1):
        out += [(n, t) for t in re.findall(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)", line)]
    return out


def test_every_relative_link_in_the_readme_and_the_docs_leads_somewhere():
    broken = []
    for path in _markdown_files():
        for line, target in _links(path):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # https:, mailto:: not ours to check
                continue
            file, _, fragment = target.partition("#")
            dest = (path.parent / file).resolve() if file else path
            where = f"{path.relative_to(ROOT)}:{line}: {target}"
            if not dest.exists():
                broken.append(f"{where}: no such file")
            elif fragment and dest.suffix == ".md" and fragment not in _anchors(dest.read_text()):
                broken.append(f"{where}: no heading with that anchor in {dest.name}")
    assert not broken, "broken links:\n  " + "\n  ".join(broken)


def test_the_readme_stays_an_opening():
    """The README opens with the two commands that set a machine up, and stays short: the
    reference lives in docs/."""
    text = (ROOT / "README.md").read_text()
    first = text.split("```sh\n", 1)[1].splitlines()[:2]
    assert [line.split()[:2] for line in first] == [["make", "demo"], ["make", "test"]], first
    assert len(text.splitlines()) < 250
