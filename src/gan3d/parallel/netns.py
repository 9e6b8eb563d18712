"""A multi-node network emulated on one machine: one Linux network namespace per rank.

Each rank sits in its own network namespace (and UTS namespace, so that it has its own host
name), joined to the others by a veth pair through a bridge; ``tc`` shapes every link to a
named :data:`PROFILES` entry with a token bucket (``tbf``) on both of its ends. The ranks talk
TCP only: Horovod's Gloo transport (there is no shared memory across namespaces), started
without mpirun by a rendezvous server in this process
(:func:`gan3d.parallel.distributed.gloo_rendezvous`), as ``horovodrun --gloo`` does, or an MPI
job (:meth:`Network.mpirun`) launched as on a cluster: ``mpirun`` starts its daemon on every
"host" (a namespace, named by its address) through an ssh stand-in that runs the daemon in that
namespace, so each namespace has its own daemon and the ranks meet over TCP. (Ranks that
``mpirun`` forks itself, wrapped in ``ip netns exec``, cannot reach its daemon's local PMIx
server across the namespace boundary; this is why the daemons are started per namespace.)

Added delay needs ``netem``, which not every kernel has (:func:`netem_available`); without it
the links keep their native latency, which :mod:`gan3d.scaling.interconnect` measures and reports.

Everything a :class:`Network` creates carries a name unique to the run (interfaces, namespaces,
``/etc/netns`` files, a /24 subnet not in use) and is removed when the ``with`` block ends,
whatever ends it (an error, Ctrl-C, SIGTERM); :func:`leftovers` lists what a killed run left.
Creating namespaces needs root: :func:`unavailable` says why it cannot run here.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Mapping, Sequence

from .. import console
from ..exceptions import ConfigError, EnvironmentProblem, RankFailed
from . import distributed
from .launch import exit_on_termination, restore_handlers

__all__ = ["Profile", "PROFILES", "link_profile", "unavailable", "netem_available", "Network",
           "leftovers", "PREFIX"]

log = console.get_logger(__name__)
PREFIX = "g3n"  # every interface, namespace and /etc/netns folder of this module starts so


@dataclasses.dataclass(frozen=True)
class Profile:
    """A link: ``rate_Bps`` bytes/s one direction (None: unshaped) and ``latency_s`` one way."""

    name: str
    rate_Bps: float | None
    latency_s: float | None


PROFILES = {
    "native": Profile("veth, unshaped", None, None),
    "edr": Profile("EDR InfiniBand-like", 12.5e9, 1e-6),
    "10gbe": Profile("10 GbE", 1.25e9, 20e-6),
    "1gbe": Profile("1 GbE", 125e6, 50e-6),
}


def _run(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    if check and out.returncode != 0:
        raise EnvironmentProblem(f"`{' '.join(cmd)}` failed: {out.stderr.strip()}")
    return out


def unavailable() -> str | None:
    """Why this machine cannot emulate a network here, or None when it can."""
    if os.geteuid() != 0:
        return "network namespaces need root (run as root, e.g. in a container or VM)"
    for tool in ("ip", "tc", "unshare"):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed (Debian: iproute2, util-linux)"
    return None


def netem_available() -> bool:
    """Whether the kernel has the netem qdisc (added delay), tried on a throwaway namespace."""
    if unavailable():
        return False
    ns = f"{PREFIX}{secrets.token_hex(3)}t"
    try:
        _run("ip", "netns", "add", ns)
        _run("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
        return _run("ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", "lo", "root", "netem",
                    "delay", "1ms", check=False).returncode == 0
    finally:
        _run("ip", "netns", "del", ns, check=False)


def _free_subnet() -> ipaddress.IPv4Network:
    used = [ipaddress.ip_interface(word).network for line in _run("ip", "-4", "-o", "addr").stdout
            .splitlines() for word in line.split() if "/" in word and word[0].isdigit()]
    for _ in range(200):
        net = ipaddress.ip_network(f"10.{secrets.randbelow(56) + 200}.{secrets.randbelow(256)}.0/24")
        if not any(net.overlaps(u) for u in used):
            return net
    raise EnvironmentProblem("no free 10.200-255.x.0/24 subnet for the emulated network")


class Network:
    """``ranks`` namespaces on a bridge, every link shaped to ``profile``; with ``slow`` =
    (rank, profile) that rank's link gets another profile (one slow link in the ring)."""

    def __init__(self, ranks: int, profile: str | Profile = "native",
                 slow: tuple[int, str | Profile] | None = None):
        reason = unavailable()
        if reason:
            raise EnvironmentProblem(f"cannot emulate a network: {reason}")
        if ranks < 2:
            raise ValueError("an emulated network needs at least 2 ranks")
        self.ranks = ranks
        self.profiles = [link_profile(profile)] * ranks
        if slow is not None:
            self.profiles[slow[0]] = link_profile(slow[1])
        self.tag = f"{PREFIX}{secrets.token_hex(2)}"  # 7 characters: names stay <= 15
        self.bridge = f"{self.tag}br"
        self.namespaces = [f"{self.tag}n{i}" for i in range(ranks)]
        self.hosts = [f"{self.tag}-rank{i}" for i in range(ranks)]
        self.subnet: ipaddress.IPv4Network | None = None
        self.addresses: list[str] = []
        self.gateway = ""
        self._old_handlers: dict = {}
        self._folder: Path | None = None  # the ssh stand-in of :meth:`mpirun`

    # -- life cycle ----------------------------------------------------------------------------
    def __enter__(self) -> "Network":
        self._old_handlers = exit_on_termination()  # SIGTERM, SIGHUP: the teardown runs
        try:
            self._create()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _create(self) -> None:
        self.subnet = _free_subnet()
        hosts = list(self.subnet.hosts())
        self.addresses = [str(hosts[i]) for i in range(self.ranks)]
        self.gateway = str(hosts[-1])
        _run("ip", "link", "add", self.bridge, "type", "bridge")
        _run("ip", "addr", "add", f"{self.gateway}/24", "dev", self.bridge)
        _run("ip", "link", "set", self.bridge, "up")
        table = "127.0.0.1 localhost\n" + "".join(
            f"{a} {h}\n" for a, h in zip(self.addresses, self.hosts))
        for i, (ns, addr, prof) in enumerate(zip(self.namespaces, self.addresses, self.profiles)):
            host_end, ns_end = f"{self.tag}h{i}", f"{self.tag}c{i}"
            _run("ip", "netns", "add", ns)
            folder = Path("/etc/netns") / ns  # `ip netns exec` shows it as the rank's /etc/hosts
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "hosts").write_text(table)
            _run("ip", "link", "add", host_end, "type", "veth", "peer", "name", ns_end)
            _run("ip", "link", "set", ns_end, "netns", ns)
            _run("ip", "link", "set", host_end, "master", self.bridge)
            _run("ip", "link", "set", host_end, "up")
            inside = ("ip", "netns", "exec", ns)
            _run(*inside, "ip", "link", "set", ns_end, "name", "eth0")
            _run(*inside, "ip", "addr", "add", f"{addr}/24", "dev", "eth0")
            _run(*inside, "ip", "link", "set", "eth0", "up")
            _run(*inside, "ip", "link", "set", "lo", "up")
            if prof.rate_Bps:  # both directions of the link: the rank's egress and the bridge's
                _run(*inside, "tc", "qdisc", "add", "dev", "eth0", "root", *_tbf(prof.rate_Bps))
                _run("tc", "qdisc", "add", "dev", host_end, "root", *_tbf(prof.rate_Bps))
        log.info("emulated network %s: %d ranks on %s, links %s", self.tag, self.ranks,
                 self.subnet, ", ".join(p.name for p in self.profiles))

    def close(self) -> None:
        """Remove everything this network made (idempotent; errors only logged)."""
        for ns in self.namespaces:
            _run("ip", "netns", "del", ns, check=False)  # takes its veth pair with it
            shutil.rmtree(Path("/etc/netns") / ns, ignore_errors=True)
        for i in range(self.ranks):
            _run("ip", "link", "del", f"{self.tag}h{i}", check=False)
        _run("ip", "link", "del", self.bridge, check=False)
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None
        restore_handlers(self._old_handlers)
        left = leftovers(self.tag)
        if left:
            log.warning("emulated network %s: could not remove %s", self.tag, ", ".join(left))

    # -- running ranks -------------------------------------------------------------------------
    def command(self, rank: int, argv: Sequence[str]) -> list[str]:
        """``argv`` run in ``rank``'s network namespace, under its own host name."""
        return ["ip", "netns", "exec", self.namespaces[rank], "unshare", "--uts", "sh", "-c",
                f"hostname {self.hosts[rank]} && exec {shlex.join(argv)}"]

    def run_horovod(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None,
                    timeout: float = 600.0) -> list[str]:
        """Run ``argv`` as one Horovod (Gloo) rank per namespace; their outputs, in rank order.
        If a rank fails, the others are stopped at once and :class:`RankFailed` names it."""
        server, port, slots = distributed.gloo_rendezvous(self.hosts)  # DISTRIBUTED: they meet here
        procs, outs = [], []
        try:
            for slot in slots:
                rank_env = {**os.environ, **(env or {}), **distributed.gloo_environment(
                    slot, self.gateway, port, "eth0")}
                procs.append(subprocess.Popen(self.command(slot.rank, argv), env=rank_env,
                                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                              text=True, start_new_session=True))
            deadline = time.monotonic() + timeout
            while any(p.poll() is None for p in procs):
                failed = [i for i, p in enumerate(procs) if p.poll() not in (None, 0)]
                if failed or time.monotonic() > deadline:
                    _stop(procs)
                    if failed:
                        rank = failed[0]
                        raise RankFailed(rank, f"exited with status {procs[rank].returncode}:\n"
                                         + procs[rank].stdout.read()[-3000:])
                    raise RankFailed(0, f"no result after {timeout:.0f} s on network {self.tag}")
                time.sleep(0.05)
            outs = [p.stdout.read() for p in procs]
            for i, p in enumerate(procs):
                if p.returncode != 0:
                    raise RankFailed(i, f"exited with status {p.returncode}:\n{outs[i][-3000:]}")
            return outs
        finally:
            _stop(procs)
            for p in procs:
                p.stdout.close()
            distributed.gloo_stop(server)


    def _ssh_agent(self) -> Path:
        """The ssh stand-in ``mpirun`` starts its daemons with: ``agent HOST COMMAND...`` runs
        COMMAND (a shell line, as ssh would) in the namespace whose address is HOST."""
        if self._folder is None:
            self._folder = Path(tempfile.mkdtemp(prefix=f"{self.tag}-mpi-"))
        agent = self._folder / "agent"  # not named ssh: mpirun would pass ssh options
        cases = "".join(f"  {a}) ns={ns}; h={h};;\n"
                        for a, ns, h in zip(self.addresses, self.namespaces, self.hosts))
        agent.write_text("#!/bin/sh\n# ssh stand-in: run the command in the namespace of HOST\n"
                         "host=$1; shift\ncase $host in\n" + cases
                         + '  *) echo "no namespace for host $host" >&2; exit 1;;\nesac\n'
                         'exec ip netns exec "$ns" unshare --uts sh -c "hostname $h && $*"\n')
        agent.chmod(0o755)
        return agent

    def mpirun(self, argv: Sequence[str], *, per_host: int = 1,
               mca: Mapping[str, str] | None = None, env: Mapping[str, str] | None = None,
               timeout: float = 600.0) -> str:
        """Run ``argv`` as one MPI job of ``per_host`` ranks in every namespace (ranks
        0..per_host-1 in the first, and so on); its merged output. Between namespaces Open MPI
        talks TCP over the shaped links; inside one, shared memory (``sm``), as on a node.
        ``mca``: further Open MPI parameters (e.g. the all-reduce algorithm). A rank that fails
        ends the job (mpirun's own fail-fast) and raises :class:`RankFailed`; so does a job that
        outlives ``timeout`` (its process group is killed)."""
        from . import runtime

        subnet = str(self.subnet)
        params = {"btl": "tcp,self,sm" if per_host > 1 else "tcp,self",
                  "btl_tcp_if_include": subnet, "oob_tcp_if_include": subnet, **(mca or {})}
        mpirun = runtime.env_bin() / "mpirun"
        cmd = [str(mpirun if mpirun.exists() else "mpirun"), "--allow-run-as-root",
               "-np", str(per_host * self.ranks),
               "--host", ",".join(f"{a}:{per_host}" for a in self.addresses),
               "--map-by", "slot", "--bind-to", "none",
               "--prtemca", "plm_ssh_agent", str(self._ssh_agent()),
               "--prtemca", "plm_ssh_no_tree_spawn", "1", "--prtemca", "oob_tcp_if_include", subnet]
        for key, value in params.items():
            cmd += ["--mca", key, str(value)]
        run_env = runtime.mpi_environment({**os.environ, **(env or {})})
        for key in (env or {}):
            cmd += ["-x", key]
        cmd += ["-x", "PATH", *argv]
        proc = subprocess.Popen(cmd, env=run_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, start_new_session=True)
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _stop([proc])
            out = proc.stdout.read() if proc.stdout else ""
            raise RankFailed(0, f"MPI job on network {self.tag} gave no result after "
                                f"{timeout:.0f} s:\n{out[-3000:]}") from None
        finally:
            _stop([proc])
            if proc.stdout:
                proc.stdout.close()
        if proc.returncode != 0:
            raise RankFailed(0, f"MPI job on network {self.tag} exited with status "
                                f"{proc.returncode}:\n{out[-3000:]}")
        return out


def link_profile(p: str | Profile) -> Profile:
    """The link of profile ``p``: a name of :data:`PROFILES` (or a :class:`Profile`, as it is).

    Raises :class:`~gan3d.exceptions.ConfigError` (a ``ValueError``) naming the profiles for any
    other name, before anything is created.
    """
    if isinstance(p, Profile):
        return p
    if p not in PROFILES:
        raise ConfigError(f"unknown network profile {p!r}; choose one of {', '.join(PROFILES)}")
    return PROFILES[p]


def _tbf(rate_Bps: float) -> list[str]:
    """A token bucket of ``rate_Bps``: burst of 1 ms of traffic (at least 64 KiB)."""
    burst = max(int(rate_Bps * 1e-3), 65536)
    return ["tbf", "rate", f"{int(rate_Bps * 8)}bit", "burst", str(burst), "latency", "100ms"]


def _stop(procs) -> None:
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL does not wait
            pass


def leftovers(tag: str = PREFIX) -> list[str]:
    """Namespaces, interfaces and /etc/netns folders whose names start with ``tag``."""
    names = [line.split()[0] for line in _run("ip", "netns", "list", check=False).stdout.splitlines()
             if line.startswith(tag)]
    links = [line.split(":")[1].strip().split("@")[0] for line in
             _run("ip", "-o", "link", check=False).stdout.splitlines()
             if line.split(":")[1].strip().startswith(tag)]
    folders = [p.name for p in Path("/etc/netns").glob(f"{tag}*")] if Path("/etc/netns").is_dir() else []
    return sorted(set(names) | set(links) | set(folders))


if __name__ == "__main__":  # pragma: no cover - `python -m gan3d.parallel.netns`: what is left
    print("\n".join(leftovers()) or "nothing left", file=sys.stdout)
