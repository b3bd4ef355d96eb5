"""Host key checking for the SSH transport, as OpenSSH does it, with refusals that say where.

The known_hosts files are the node's ``known_hosts`` (else ~/.ssh/config's
``UserKnownHostsFile``, else ``~/.ssh/known_hosts``) and the global ones
(``GlobalKnownHostsFile``, else ``/etc/ssh/ssh_known_hosts``). Entries may be hashed
(``|1|salt|hash``), carry patterns (``*``, ``?``, ``!``) and the ``@revoked`` and
``@cert-authority`` markers: a host that presents a certificate signed by a CA listed for a
pattern matching it is accepted; asyncssh then checks the certificate's validity and
principals, and a refusal says which check failed.

An unknown host is refused unless the node says ``host_keys = "accept-new"`` (then the key
is appended to the first user file, as OpenSSH does); a changed or revoked key is always
refused, naming the file and line.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence, cast

import asyncssh
from asyncssh.public_key import (KeyImportError, decode_ssh_public_key, get_default_certificate_algs,
                                 get_default_public_key_algs)

from .ssh_errors import HostCertificateRefused, HostKeyChanged, HostKeyError, HostKeyUnknown

log = logging.getLogger(__name__)

DEFAULT_KNOWN_HOSTS = "~/.ssh/known_hosts"
GLOBAL_KNOWN_HOSTS = "/etc/ssh/ssh_known_hosts"


@dataclass(frozen=True)
class KnownHost:
    path: str
    line: int
    marker: Optional[str]  # None, "revoked" or "cert-authority"
    patterns: str
    keytype: str
    key: bytes  # the public key blob, as the server sends it

    def fingerprint(self) -> str:
        return "SHA256:" + base64.b64encode(hashlib.sha256(self.key).digest()).decode().rstrip("=")


def read_known_hosts(paths: Iterable[str]) -> list[KnownHost]:
    entries = []
    for path in paths:
        try:
            text = Path(path).expanduser().read_text(errors="replace")
        except FileNotFoundError:
            continue
        except OSError as exc:
            log.warning("cannot read known hosts file %s: %s", path, exc.strerror or exc)
            continue
        for n, raw in enumerate(text.splitlines(), start=1):
            parts = raw.split()
            if not parts or parts[0].startswith("#"):
                continue
            marker = None
            if parts[0].startswith("@"):
                marker, parts = parts[0][1:], parts[1:]
            if len(parts) < 3:
                continue
            try:
                blob = base64.b64decode(parts[2], validate=True)
            except ValueError:
                continue
            entries.append(KnownHost(path, n, marker, parts[0], parts[1], blob))
    return entries


def known_hosts_name(host: str, port: Optional[int]) -> str:
    """How OpenSSH writes a host in known_hosts: ``host``, or ``[host]:port`` off port 22."""
    return host if not port or port == 22 else f"[{host}]:{port}"


def host_matches(patterns: str, name: str) -> bool:
    """OpenSSH's rules: comma-separated patterns with ``*`` and ``?``, ``!`` negates,
    ``|1|salt|hash`` for hashed names."""
    name = name.lower()
    hit = False
    for pat in patterns.split(","):
        if pat.startswith("|1|"):
            try:
                salt, digest = (base64.b64decode(p) for p in pat[3:].split("|", 1))
            except ValueError:
                continue
            if hmac.compare_digest(hmac.new(salt, name.encode(), hashlib.sha1).digest(), digest):
                hit = True
            continue
        negated = pat.startswith("!")
        pat = pat[1:] if negated else pat
        regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pat.lower())
        if re.fullmatch(regex, name):
            if negated:
                return False
            hit = True
    return hit


def _host_key_algs(keytype: str) -> list[str]:
    return ["rsa-sha2-512", "rsa-sha2-256", "ssh-rsa"] if keytype == "ssh-rsa" else [keytype]


class HostKeyPolicy:
    """What we know of one host's keys, and the verdict on the key it presents."""

    def __init__(self, node: str, host: str, port: Optional[int], user_files: Sequence[str],
                 global_files: Sequence[str], accept_new: bool) -> None:
        self.node, self.host, self.name = node, host, known_hosts_name(host, port)
        self.ssh_hint = f"ssh -p {port} {host}" if port and port != 22 else f"ssh {host}"
        self.user_files, self.files = list(user_files), list(user_files) + list(global_files)
        self.accept_new = accept_new
        entries = [e for e in read_known_hosts(self.files) if host_matches(e.patterns, self.name)]
        self.matching = [e for e in entries if e.marker != "cert-authority"]
        self.known = [e for e in self.matching if e.marker is None]
        self.cas = [e for e in entries if e.marker == "cert-authority"]
        self.problem: Optional[HostKeyError] = None
        self.recorded_in: Optional[str] = None
        self.ca: Optional[KnownHost] = None  # the @cert-authority line that signed the host's certificate

    def server_host_key_algs(self) -> list[str]:
        """Prefer what we can check (as OpenSSH does): certificates when a CA is listed for the
        host, then the key types recorded for it (a host known by its RSA key is not taken for
        changed when it also has an ed25519 one), then every other type, so that a host that
        offers none of the recorded types is refused with a host-key message, not a reset."""
        algs: list[str] = [a.decode() for a in get_default_certificate_algs()] if self.cas else []
        for e in self.known:
            algs += [a for a in _host_key_algs(e.keytype) if a not in algs]
        algs += [a for a in (b.decode() for b in get_default_public_key_algs()) if a not in algs]
        return algs

    def check(self, key: asyncssh.SSHKey) -> bool:
        blob, alg, fp = key.public_data, key.get_algorithm(), key.get_fingerprint()
        for e in self.matching:
            if e.marker == "revoked" and e.key == blob:
                self.problem = HostKeyError(self.node, f"the host key of {self.name} ({alg} {fp}) is marked "
                                                       f"@revoked in {e.path} line {e.line}; refusing to connect")
                return False
        if any(e.key == blob for e in self.known):
            return True
        if self.known and not any(e.keytype == alg for e in self.known):
            e = self.known[0]
            types = ", ".join(sorted({k.keytype for k in self.known}))
            self.problem = HostKeyChanged(
                self.node,
                f"HOST KEY TYPE CHANGED for {self.name}: it offers only {alg} ({fp}), but {e.path} line {e.line} "
                f"records {e.keytype} {e.fingerprint()}" + (f" (types recorded: {types})" if len(self.known) > 1
                                                           else "") +
                f" and no {alg} key. If the node's sshd changed its host keys, check the new key and replace "
                f"that line (ssh-keygen -R '{self.name}' -f {e.path}, then `{self.ssh_hint}` once). Refused.",
                e.path, e.line)
            return False
        if self.known:
            e = next((e for e in self.known if e.keytype == alg), self.known[0])
            self.problem = HostKeyChanged(
                self.node,
                f"HOST KEY CHANGED for {self.name}: it now presents {alg} {fp}, but {e.path} line {e.line} "
                f"records {e.keytype} {e.fingerprint()}. Someone may be intercepting the connection, or the "
                f"node was reinstalled; if you know it was, remove that line "
                f"(ssh-keygen -R '{self.name}' -f {e.path}) and connect again. Refused.",
                e.path, e.line)
            return False
        if not self.accept_new:
            where = ", ".join(self.files)
            ca = (f"; a @cert-authority line ({self.cas[0].path} line {self.cas[0].line}) matches it, but it "
                  f"offered a plain key, no certificate" if self.cas else "")
            self.problem = HostKeyUnknown(
                self.node,
                f"host key of {self.name} is not known ({alg} {fp}; looked in {where}{ca}). Check the fingerprint "
                f"and add it (`{self.ssh_hint}` once, or ssh-keyscan), or set host_keys = \"accept-new\" for "
                f"this node in the fleet file (or deploy with --accept-new-host-keys)")
            return False
        path = Path(self.user_files[0]).expanduser()
        try:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            with open(path, "a") as f:
                f.write(f"{self.name} {alg} {base64.b64encode(blob).decode()}\n")
        except OSError as exc:
            self.problem = HostKeyError(self.node, f"host key of {self.name} is new and host_keys is accept-new, "
                                                   f"but it cannot be recorded in {path}: {exc.strerror or exc}")
            return False
        self.recorded_in = str(path)
        log.warning("node %s: recorded the new host key of %s (%s %s) in %s", self.node, self.name, alg, fp, path)
        return True

    def check_ca(self, ca_key: asyncssh.SSHKey) -> bool:
        """Whether the CA that signed the host's certificate is listed for this host; asyncssh
        then checks the certificate itself (type, validity, principals)."""
        blob, fp = ca_key.public_data, ca_key.get_fingerprint()
        for e in self.matching:
            if e.marker == "revoked" and e.key == blob:
                self.problem = HostCertificateRefused(
                    self.node, f"the host certificate of {self.name} is signed by a CA ({fp}) marked @revoked in "
                               f"{e.path} line {e.line}; refusing to connect")
                return False
        self.ca = next((e for e in self.cas if e.key == blob), None)
        if self.ca is None:
            listed = "; ".join(f"{e.path} line {e.line} lists {e.fingerprint()}" for e in self.cas)
            self.problem = HostCertificateRefused(
                self.node, f"the host certificate of {self.name} is signed by an unknown CA "
                           f"({ca_key.get_algorithm()} {fp}): no @cert-authority line for it trusts that CA "
                           f"({listed or 'looked in ' + ', '.join(self.files)}); refused")
        return self.ca is not None

    def _certificate_refusal(self, reason: str) -> Optional[HostKeyError]:
        """asyncssh's verdict on a certificate signed by a listed CA, said with the CA's line."""
        if self.ca is None:
            return None
        why = {"Certificate expired": "has expired",
               "Certificate not yet valid": "is not valid yet",
               "Certificate principal mismatch": f"does not name {self.host} among its principals",
               "Invalid certificate type": "is not a host certificate",
               "Host key is revoked": "carries a host key marked @revoked"}
        what = next((text for key, text in why.items() if reason.startswith(key)), None)
        if what is None:
            return None
        return HostCertificateRefused(
            self.node, f"the host certificate of {self.name} {what} (it is signed by the CA of {self.ca.path} line "
                       f"{self.ca.line}, {self.ca.fingerprint()}); refused")

    @classmethod
    def for_connection(cls, node: str, opts: asyncssh.SSHClientConnectionOptions, known_hosts: Optional[str],
                       default_known_hosts: str, accept_new: bool) -> "HostKeyPolicy":
        """The policy for one connection: the node's ``known_hosts`` file (else ssh config's
        UserKnownHostsFile, else ``default_known_hosts``) and the global files."""
        cfg = opts.config
        user_files = [known_hosts] if known_hosts else \
            list(cast("Sequence[str]", cfg.get("UserKnownHostsFile", ())) or [default_known_hosts])
        global_files = list(cast("Sequence[str]", cfg.get("GlobalKnownHostsFile", ())) or [GLOBAL_KNOWN_HOSTS])
        return cls(node, opts.host_key_alias or opts.host, opts.port, user_files, global_files, accept_new)

    def connect_options(self) -> dict[str, Any]:
        """asyncssh.connect() arguments: this policy checks the key, asyncssh's own check is off."""
        revoked = []  # asyncssh checks the key inside a certificate against these
        for e in self.matching if self.cas else ():
            if e.marker == "revoked":
                try:
                    revoked.append(decode_ssh_public_key(e.key))
                except KeyImportError:
                    pass
        return dict(client_factory=lambda: PolicyClient(self), known_hosts=([], [], revoked),
                    server_host_key_algs=self.server_host_key_algs())

    def refusal(self, exc: BaseException, where: str) -> Optional[HostKeyError]:
        """Why the connection failed, when the host key is the reason; else None."""
        if self.problem is not None:
            return self.problem
        if isinstance(exc, asyncssh.KeyExchangeFailed) and self.known:
            e = self.known[0]
            return HostKeyChanged(self.node, f"HOST KEY CHANGED for {self.name}: the server offers none of the "
                                             f"key types recorded in {e.path} line {e.line} ({e.keytype}); "
                                             f"refused ({exc.reason})", e.path, e.line)
        if isinstance(exc, asyncssh.HostKeyNotVerifiable):
            refused = self._certificate_refusal(exc.reason)
            if refused is not None:
                return refused
            return HostKeyError(self.node, f"host key of {where} not verified: {exc.reason}")
        return None


class PolicyClient(asyncssh.SSHClient):
    """The asyncssh client whose host key check is a :class:`HostKeyPolicy`'s."""

    def __init__(self, policy: HostKeyPolicy) -> None:
        self.policy = policy

    def validate_host_public_key(self, host: str, addr: str, port: int, key: asyncssh.SSHKey) -> bool:
        return self.policy.check(key)

    def validate_host_ca_key(self, host: str, addr: str, port: int, key: asyncssh.SSHKey) -> bool:
        return self.policy.check_ca(key)
