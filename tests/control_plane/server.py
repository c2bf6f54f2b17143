"""A real control plane for tests: etcd, kube-apiserver and kube-controller-manager on loopback.

Built by `scripts/cluster-tools` from pinned modules (docs/development.md, "The control-plane
tier"). The API server has what the product relies on: RBAC, ServiceAccount token issuance,
TokenReview and SubjectAccessReview, ValidatingAdmissionPolicy, server-side apply; the
controller manager adds the controllers in `CONTROLLERS`, so deletions cascade, every namespace
gets its `default` account and aggregated roles are filled in, as on any cluster. Nothing
schedules or runs pods.

The administrator authenticates with a static token (group `system:masters`); tests act as
other users by impersonation (`ControlPlane.client(user=...)`), which goes through RBAC and
admission exactly as those users' own requests would.
"""

import contextlib
import datetime as dt
import ipaddress
import os
import re
import secrets
import shutil
import signal
import ssl
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from kubernetes import client as k8s

from tests.ports import free_port

REPO = Path(__file__).resolve().parents[2]
TOOLS = REPO / "scripts" / "cluster-tools"
READY_SECONDS = 90.0
"""etcd and the API server from start to `/readyz`; measured at a few seconds on 2 cores."""
STOP_SECONDS = 15.0
CONTROLLERS = (
    "namespace-controller",
    "garbage-collector-controller",
    "serviceaccount-controller",
    "clusterrole-aggregation-controller",
    "root-ca-certificate-publisher-controller",
    "validatingadmissionpolicy-status-controller",
    "persistentvolumeclaim-protection-controller",
)
"""What a cluster does on its own that the product relies on: namespaces deleted with their
contents, owner references followed, `default` accounts, Cozystack's aggregated tenant roles,
the CA bundle in each namespace, the admission policies' type checks, and claims' protection
finalizer removed once no pod uses them (without it no claim is ever deleted)."""
FRONT_PROXY = "front-proxy-client"
"""The client certificate the API server proxies to aggregated API servers with."""
START_ATTEMPTS = 4
"""Ports are chosen free and then bound by another process: a start that lost the race is
tried again on new ports, this many times at most."""


def unavailable(reason: str) -> None:
    """A component the tier needs is not built: a failure in CI, where the tier must run, and a
    skip elsewhere."""
    message = f"{reason}; build it with scripts/cluster-tools all (docs/development.md)"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def built(name: str) -> Path:
    """The folder of a component built by scripts/cluster-tools."""
    run = subprocess.run([TOOLS, "built", name], capture_output=True, text=True, check=False)
    folder = Path(run.stdout.strip())
    if run.returncode != 0:
        unavailable(f"{name} is not built at {folder}")
    return folder


def source(module: str) -> Path:
    """The folder of a pinned Go module's own files (its CRDs, its manifests)."""
    run = subprocess.run([TOOLS, "source", module], capture_output=True, text=True, check=False)
    if run.returncode != 0 or not run.stdout.strip():
        unavailable(f"no source of {module}: {run.stderr.strip()}")
    return Path(run.stdout.strip())


def poll(check: Callable[[], Any], seconds: float, interval: float = 0.2) -> Any:
    """`check()`'s first truthy answer within `seconds`, or None."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if got := check():
            return got
        time.sleep(interval)
    return None


LOOPBACK = ("0100007F", "0000000000000000FFFF00000100007F")
"""127.0.0.1 as /proc/net/tcp and /proc/net/tcp6 write it; gRPC listens on an IPv6 socket with
the IPv4-mapped address."""


def listening_port(pid: int) -> int | None:
    """The loopback TCP port process `pid` listens on, read from /proc: its socket descriptors'
    inodes, matched with the LISTEN rows (state 0A) of /proc/net/tcp and tcp6. With this a
    server started on port 0 reports its port, and no port is chosen free and then lost."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            if m := re.fullmatch(r"socket:\[(\d+)\]", str(fd.readlink())):
                inodes.add(m[1])
    for table in ("tcp", "tcp6"):
        for row in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            cols = row.split()
            (address, port), state, inode = cols[1].split(":"), cols[3], cols[9]
            if state == "0A" and inode in inodes and address in LOOPBACK:
                return int(port, 16)
    return None


PEM = serialization.Encoding.PEM


def _private(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


def issue(
    pki: Path, name: str, *, client: bool = False, hosts: Sequence[str] = ()
) -> tuple[Path, Path]:
    """A certificate from the plane's CA for 127.0.0.1, localhost and `hosts` (a client
    certificate with `client`): the certificate's and the key's files, `<name>.crt` and
    `<name>.key` in `pki`."""
    ca_key = serialization.load_pem_private_key((pki / "ca.key").read_bytes(), password=None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    ca = x509.load_pem_x509_certificate((pki / "ca.crt").read_bytes())
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    names: list[x509.GeneralName] = [x509.DNSName(h) for h in ("localhost", *hosts)]
    names.append(x509.IPAddress(ipaddress.ip_address("127.0.0.1")))
    usage = x509.ExtendedKeyUsageOID.CLIENT_AUTH if client else x509.ExtendedKeyUsageOID.SERVER_AUTH
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    crt, private = pki / f"{name}.crt", pki / f"{name}.key"
    crt.write_bytes(cert.public_bytes(PEM))
    private.write_bytes(_private(key))
    return crt, private


def _certificates(pki: Path) -> None:
    """The plane's CA, the API server's serving certificate, the ServiceAccount signing key."""
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "workspace-sandbox-test-ca")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    (pki / "ca.crt").write_bytes(ca.public_bytes(PEM))
    (pki / "ca.key").write_bytes(_private(ca_key))
    issue(pki, "serving")
    issue(pki, FRONT_PROXY, client=True)
    account_key = ec.generate_private_key(ec.SECP256R1())
    (pki / "service-accounts.key").write_bytes(_private(account_key))
    public = serialization.PublicFormat.SubjectPublicKeyInfo
    (pki / "service-accounts.pub").write_bytes(account_key.public_key().public_bytes(PEM, public))


@dataclass
class ControlPlane:
    """etcd, kube-apiserver and kube-controller-manager in `root`, started by `start()`."""

    root: Path
    url: str = ""
    token: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    controllers: Sequence[str] = CONTROLLERS
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    http: httpx.Client | None = None
    """The administrator's connection, kept open for `request`."""

    @property
    def kubeconfig(self) -> Path:
        return self.root / "admin.kubeconfig"

    @property
    def ca(self) -> Path:
        return self.root / "pki" / "ca.crt"

    def start(self) -> None:
        kubernetes, etcd = built("kubernetes"), built("etcd")
        pki = self.root / "pki"
        pki.mkdir(parents=True)
        _certificates(pki)
        (self.root / "tokens.csv").write_text(f"{self.token},admin,admin,system:masters\n")
        for attempt in range(START_ATTEMPTS):
            client, peer, secure = free_port(), free_port(), free_port()
            data = self.root / f"etcd-{attempt}"
            self._spawn("etcd", [
                etcd / "etcd", "--data-dir", data, "--name", "test",
                "--listen-client-urls", f"http://127.0.0.1:{client}",
                "--advertise-client-urls", f"http://127.0.0.1:{client}",
                "--listen-peer-urls", f"http://127.0.0.1:{peer}",
                "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
                "--initial-cluster", f"test=http://127.0.0.1:{peer}",
                "--unsafe-no-fsync", "--log-level", "warn",
            ])  # fmt: skip
            self._spawn("kube-apiserver", [
                kubernetes / "kube-apiserver",
                "--etcd-servers", f"http://127.0.0.1:{client}",
                "--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1",
                "--secure-port", str(secure),
                "--tls-cert-file", pki / "serving.crt", "--tls-private-key-file", pki / "serving.key",
                "--client-ca-file", pki / "ca.crt",
                "--token-auth-file", self.root / "tokens.csv",
                "--authorization-mode", "RBAC",
                "--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
                "--service-account-key-file", pki / "service-accounts.pub",
                "--service-account-signing-key-file", pki / "service-accounts.key",
                "--service-cluster-ip-range", "10.96.0.0/16",
                "--allow-privileged=true",
                "--profiling=false",
                # The aggregation layer, as kubeadm sets it up: the API server proxies to
                # aggregated API servers (Cozystack's) with this client certificate, and they
                # trust the user it names in these headers.
                "--proxy-client-cert-file", pki / f"{FRONT_PROXY}.crt",
                "--proxy-client-key-file", pki / f"{FRONT_PROXY}.key",
                "--requestheader-client-ca-file", pki / "ca.crt",
                "--requestheader-allowed-names", FRONT_PROXY,
                "--requestheader-username-headers", "X-Remote-User",
                "--requestheader-group-headers", "X-Remote-Group",
                "--requestheader-extra-headers-prefix", "X-Remote-Extra-",
            ])  # fmt: skip
            self.url = f"https://127.0.0.1:{secure}"
            if self._ready():
                break
            self._stop_all()
            if "address already in use" not in self.logs():
                raise AssertionError(f"the control plane did not start:\n{self.logs()}")
        else:
            raise AssertionError(f"the control plane did not start:\n{self.logs()}")
        self._write_kubeconfig()
        self._spawn("kube-controller-manager", [
            kubernetes / "kube-controller-manager",
            "--kubeconfig", self.kubeconfig,
            "--authentication-kubeconfig", self.kubeconfig,
            "--authorization-kubeconfig", self.kubeconfig,
            "--leader-elect=false", "--secure-port", "0",
            # Each controller as its own account (system:serviceaccount:kube-system:<name>), as
            # kubeadm and Talos run it: the admission policies name the garbage collector so.
            "--use-service-account-credentials",
            "--controllers", ",".join(self.controllers),
            "--root-ca-file", pki / "ca.crt",
            "--service-account-private-key-file", pki / "service-accounts.key",
            "--concurrent-gc-syncs", "4",
        ])  # fmt: skip

    def _spawn(
        self, name: str, argv: Sequence[object], env: Mapping[str, str] | None = None
    ) -> None:
        log = (self.root / f"{name}.log").open("ab")
        self.processes[name] = subprocess.Popen(
            [str(a) for a in argv],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, **(env or {})},
        )
        log.close()

    def run(self, name: str, argv: Sequence[object], env: Mapping[str, str] | None = None) -> None:
        """Start another component against the plane (the administrator's kubeconfig in
        `KUBECONFIG`); it is stopped with the plane, and its log is in `logs()`."""
        self._spawn(name, argv, {"KUBECONFIG": str(self.kubeconfig), **(env or {})})

    def halt(self, name: str) -> None:
        """Stop one component started with `run`."""
        process = self.processes.pop(name)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(STOP_SECONDS)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(STOP_SECONDS)

    def _ready(self) -> bool:
        """Whether the API server answers `/readyz`; False if a process ended first."""
        deadline = time.monotonic() + READY_SECONDS
        with self._http() as http:
            while time.monotonic() < deadline:
                if any(p.poll() is not None for p in self.processes.values()):
                    return False
                with contextlib.suppress(httpx.HTTPError):
                    if http.get("/readyz").status_code == 200:
                        return True
                time.sleep(0.25)
        return False

    def _http(self) -> httpx.Client:
        context = ssl.create_default_context(cafile=str(self.ca))
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        return httpx.Client(base_url=self.url, verify=context, headers=headers, timeout=30)

    def _write_kubeconfig(self) -> None:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "test",
                    "cluster": {"server": self.url, "certificate-authority": str(self.ca)},
                }
            ],
            "users": [{"name": "admin", "user": {"token": self.token}}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": "admin"}}],
            "current-context": "test",
        }
        self.kubeconfig.write_text(yaml.safe_dump(config))

    def certificates(self, name: str, *, client: bool = False, hosts: Sequence[str] = ()) -> Path:
        """A folder `name` in the plane's root holding `tls.crt` and `tls.key` (a certificate
        from the plane's CA for 127.0.0.1, localhost and `hosts`, a client one with `client`)
        and the CA's `ca.crt`: what Crossplane, functions and providers read from their
        certificates' folders."""
        pki = self.root / "pki"
        folder = self.root / name
        folder.mkdir()
        crt, key = issue(pki, name, client=client, hosts=hosts)
        shutil.copy(pki / "ca.crt", folder / "ca.crt")
        shutil.copy(crt, folder / "tls.crt")
        shutil.copy(key, folder / "tls.key")
        return folder

    def account_kubeconfig(self, namespace: str, account: str, seconds: int = 86400) -> Path:
        """A kubeconfig for a ServiceAccount (which must exist), with a token from the server's
        TokenRequest API: what a pod of that account has, for a component run out of cluster."""
        path = f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token"
        status, answer = self.request("POST", path, {"spec": {"expirationSeconds": seconds}})
        assert status == 201, answer
        config = yaml.safe_load(self.kubeconfig.read_text())
        config["users"] = [{"name": account, "user": {"token": answer["status"]["token"]}}]
        config["contexts"][0]["context"]["user"] = account
        out = self.root / f"{namespace}-{account}.kubeconfig"
        out.write_text(yaml.safe_dump(config))
        return out

    def client(self, user: str = "", group: str = "") -> k8s.ApiClient:
        """An API client as the administrator, or as `user` (in `group`, if given) by
        impersonation: RBAC and admission judge its requests as that user's own, and the
        server adds `system:authenticated`. One group at most: the client sends one value per
        header."""
        config = k8s.Configuration(host=self.url)
        config.ssl_ca_cert = str(self.ca)
        config.api_key = {"authorization": self.token}
        config.api_key_prefix = {"authorization": "Bearer"}
        api = k8s.ApiClient(config)
        if user:
            api.set_default_header("Impersonate-User", user)
        if group:
            api.set_default_header("Impersonate-Group", group)
        return api

    def request(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        *,
        user: str = "",
        group: str = "",
        query: str = "",
    ) -> tuple[int, dict[str, Any]]:
        """One REST call, as the administrator or as `user` (in `group`) by impersonation: the
        status and the decoded answer, errors included (a Status object)."""
        headers = {}
        if user:
            headers["Impersonate-User"] = user
        if group:
            headers["Impersonate-Group"] = group
        url = f"{path}?{query}" if query else path
        if self.http is None:
            self.http = self._http()
        answer = self.http.request(method, url, json=body, headers=headers)
        return answer.status_code, answer.json() if answer.content else {}

    def resources(self) -> dict[tuple[str, str, str], tuple[str, bool]]:
        """What the server serves, from its discovery: (group, version, kind) to (resource,
        namespaced), subresources as "resource/sub" under their own kind."""
        out: dict[tuple[str, str, str], tuple[str, bool]] = {}
        versions = [("", "v1", "/api/v1")]
        status, groups = self.request("GET", "/apis")
        assert status == 200, groups
        for group in groups["groups"]:
            versions += [
                (group["name"], v["version"], f"/apis/{v['groupVersion']}")
                for v in group["versions"]
            ]
        for group_name, version, path in versions:
            status, listing = self.request("GET", path)
            assert status == 200, listing
            for r in listing["resources"]:
                if "/" not in r["name"]:
                    out[group_name, version, r["kind"]] = (r["name"], r["namespaced"])
        return out

    def logs(self, lines: int = 40) -> str:
        """The last lines of each component's log."""
        out = []
        for path in sorted(self.root.glob("*.log")):
            tail = path.read_text(errors="replace").splitlines()[-lines:]
            out.append(f"--- {path.stem}\n" + "\n".join(tail))
        return "\n".join(out)

    def _stop_all(self) -> None:
        """Kill every component at once: a test cluster's state is thrown away with it, so
        nothing is gained by the API server's graceful shutdown, which waits out open watches
        (20 s a plane on 2 cores, most of a module's teardown)."""
        for process in self.processes.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
        for process in self.processes.values():
            process.wait(STOP_SECONDS)
        self.processes.clear()

    def stop(self) -> None:
        if self.http is not None:
            self.http.close()
        self._stop_all()
        shutil.rmtree(self.root, ignore_errors=True)


@contextlib.contextmanager
def control_plane(root: Path, controllers: Sequence[str] = CONTROLLERS) -> Iterator[ControlPlane]:
    plane = ControlPlane(root, controllers=controllers)
    try:
        plane.start()
        yield plane
    finally:
        plane.stop()
