"""Nodes set up from nothing, as a user's are: a real sshd per node on loopback whose sessions
get a home of their own (or a real user of their own) and a bare ``python3``, with a local
wheelhouse as their package index, and the operator's laptop: a HOME with ``~/.ssh/config``
naming the nodes, and the real ``gpudeck`` program."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path
from typing import Optional

from support.core import ROOT
from support.ssh import Sshd, keygen

WHEELHOUSE = ROOT / ".venv" / "wheelhouse"  # `make test` downloads it (Makefile: NODE_WHEELS)


class Laptop:
    """The operator's side: a HOME with ~/.ssh/config naming the nodes, and the gpudeck CLI."""

    def __init__(self, tmp: Path, homes: dict[str, Optional[Path]], user: str = "root",
                 python3: Optional[Path] = None, keys_dir: Optional[Path] = None) -> None:
        """``homes``: node name -> its HOME (None: the user's own, from passwd); ``python3``: the
        nodes' python3 (default: a fresh venv with nothing installed); ``keys_dir``: where the
        authorized key goes, a folder ``user`` can read (sshd reads it as the user)."""
        self.dir = tmp / "laptop"
        ssh = self.dir / ".ssh"
        ssh.mkdir(parents=True)
        key = keygen(ssh / "id_ed25519")
        if python3 is None:
            bare = tmp / "node-python"  # a python3 with nothing installed, as on a fresh node
            venv.EnvBuilder(with_pip=False).create(bare)
            python3 = bare / "bin" / "python3"
        bindir = tmp / "node-bin"
        bindir.mkdir(mode=0o755)
        (bindir / "python3").symlink_to(python3)
        authorized = Path(f"{key}.pub")
        if keys_dir is not None:
            authorized = keys_dir / "authorized_keys"
            shutil.copy(f"{key}.pub", authorized)
            authorized.chmod(0o644)
        self.sshds = {}
        config = []
        for name, home in homes.items():
            if home is not None:
                home.mkdir(parents=True, exist_ok=True)
            env = (f"SetEnv {f'HOME={home} ' if home else ''}PATH={bindir}:/usr/bin:/bin PIP_NO_INDEX=1 "
                   f"PIP_FIND_LINKS={WHEELHOUSE} PIP_DISABLE_PIP_VERSION_CHECK=1\n")
            d = tmp / f"sshd-{name}"
            self.sshds[name] = Sshd(d, authorized, extra_config=env)
            config.append(f"Host {name}\n  HostName 127.0.0.1\n  Port {self.sshds[name].port}\n  User {user}\n"
                          f"  IdentityFile {key}\n  IdentitiesOnly yes\n")
        (ssh / "config").write_text("\n".join(config))

    exe = Path(sys.executable).with_name("gpudeck")  # this checkout's program

    def env(self) -> dict[str, str]:
        """The operator's environment: this machine's, with the laptop's HOME (its ~/.ssh)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUDECK_", "SSH_AUTH"))}
        env.update(HOME=str(self.dir), XDG_STATE_HOME=str(self.dir / "state"))
        return env

    def gpudeck(self, command: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess:
        argv = command.split()
        r = subprocess.run([str(self.exe), *argv[1:]], capture_output=True, text=True, timeout=timeout,
                           cwd=self.dir, env=self.env(), stdin=subprocess.DEVNULL)
        if check and r.returncode != 0:
            raise AssertionError(f"{command} -> {r.returncode}\n{r.stdout}\n{r.stderr}")
        return r

    def stop(self) -> None:
        for s in self.sshds.values():
            s.stop()
