"""A real Kubernetes control plane on loopback: etcd, the API server, the controller manager, the
scheduler, JobSet and Kueue, each its own supervised process, built from their Go modules.

What runs is upstream code unchanged (``components/``); what is ours is the wiring: free ports,
one CA, kubeconfigs, RBAC authorization and service-account tokens as on GKE, the JobSet and Kueue
webhooks served over TLS on loopback and reached by URL (a process-only cluster has no Service
networking), the ProvisioningRequest API GKE serves (no autoscaler acts on it: a test plays the
autoscaler's conditions), and logs in ``<root>/logs``. There is no kubelet: pods are bound by the
real scheduler to nodes that nothing runs, and whoever plays the containers writes their status.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import yaml

from rlpipe.local.controlplane import addons, components
from rlpipe.local.controlplane.pki import CertificateAuthority, KeyPair, service_account_keys
from rlpipe.local.ports import free_port
from rlpipe.local.procs import Child, http_ready, stop_all

# Kueue reads its metrics certificate from this fixed path whenever its internal certificate
# management is off (kueue v0.17.1 cmd/kueue/main.go, metricsCertPath), even with metrics off.
KUEUE_METRICS_CERTS = Path("/etc/kueue/metrics/certs")
SERVICE_CIDR = "10.0.0.0/24"


class ControlPlane:
    """Start with :meth:`start`, stop with :meth:`stop` (or use it as a context manager)."""

    def __init__(self, root: Path, *, say: Any = None):
        self.root = root
        self.logs = root / "logs"
        self.pki_dir = root / "pki"
        self.children: dict[str, Child] = {}
        self.say = say or (lambda text: None)
        self.started_in: dict[str, float] = {}
        self.ports: dict[str, int] = {}
        self.ca: CertificateAuthority | None = None

    # ---- lifecycle ------------------------------------------------------------------------------

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> ControlPlane:
        reason = components.missing_reason()
        if reason:
            raise RuntimeError(f"the real control plane cannot start: {reason}")
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        stop_all(list(reversed(self.children.values())))
        self.children.clear()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.ports['api']}"

    def kubeconfig(self, user: str = "admin") -> Path:
        return self.root / f"{user}.kubeconfig"

    def kubectl(self, *args: str, user: str = "admin", stdin: str | None = None, check: bool = True) -> str:
        out = subprocess.run(
            [str(components.binary("kubectl")), f"--kubeconfig={self.kubeconfig(user)}", *args],
            input=stdin,
            capture_output=True,
            text=True,
            check=False,
        )
        if check and out.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)} failed ({out.returncode}): {out.stderr.strip()}")
        return out.stdout

    def apply(self, documents: list[dict[str, Any]] | str, *, user: str = "admin") -> str:
        text = (
            documents
            if isinstance(documents, str)
            else yaml.dump_all(documents, Dumper=yaml.CSafeDumper, sort_keys=False)
        )
        return self.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", user=user, stdin=text)

    def add_user(self, name: str) -> Path:
        """A kubeconfig for a client-certificate identity named ``name``. How the pipeline's
        identities reach a GKE cluster (a Google account bound by RoleBinding as a User) is played
        by a certificate with the same user name."""
        assert self.ca is not None
        pair = self.ca.issue(f"user-{name.replace('@', '_').replace(':', '_')}", name)
        return self._write_kubeconfig(name, pair)

    def api_client(self, user: str = "admin") -> Any:
        """A ``kubernetes`` ApiClient authenticated as ``user`` (see :meth:`add_user`)."""
        from kubernetes import config

        return config.new_client_from_config(config_file=str(self.kubeconfig(user)))

    def add_nodes(self, nodes: list[tuple[dict[str, Any], dict[str, str]]]) -> set[str]:
        """Register nodes (``rlpipe.local.controlplane.nodes``) as Ready; their names."""
        from rlpipe.local.controlplane.nodes import node_status

        self.apply([node for node, _ in nodes])
        for node, capacity in nodes:
            self.kubectl(
                "patch",
                "node",
                node["metadata"]["name"],
                "--subresource=status",
                "--type=merge",
                "-p",
                json.dumps(node_status(capacity)),
            )
            # The API server taints a new Node not-ready (admission plugin TaintNodesByCondition);
            # the node lifecycle controller, off here, would lift it once the node is Ready.
            taints = node.get("spec", {}).get("taints", [])
            self.kubectl(
                "patch",
                "node",
                node["metadata"]["name"],
                "--type=merge",
                "-p",
                json.dumps({"spec": {"taints": taints or None}}),
            )
        return {node["metadata"]["name"] for node, _ in nodes}

    # ---- pieces ---------------------------------------------------------------------------------

    def _start(self) -> None:
        self.logs.mkdir(parents=True, exist_ok=True)
        names = ("etcd", "etcd-peer", "api", "kcm", "scheduler", "jobset-webhook", "jobset-probe")
        self.ports = {n: free_port() for n in (*names, "kueue-webhook", "kueue-probe")}
        began = time.monotonic()
        self.ca = CertificateAuthority(self.pki_dir)
        pairs = self._certificates()
        self._etcd()
        self._api_server(pairs)
        for user, pair in (
            ("admin", pairs["admin"]),
            ("kube-controller-manager", pairs["kcm"]),
            ("kube-scheduler", pairs["scheduler"]),
        ):
            self._write_kubeconfig(user, pair)
        self._controller_manager(pairs)
        self._scheduler()
        self._jobset(pairs["webhook"])
        self._provisioning_request_api()
        self._kueue(pairs["webhook"])
        self.started_in["total"] = time.monotonic() - began
        self.say(f"[controlplane] up in {self.started_in['total']:.1f}s on {self.url}")

    def _certificates(self) -> dict[str, KeyPair]:
        assert self.ca is not None
        ca = self.ca
        loopback = ("127.0.0.1", "localhost")
        return {
            "api": ca.issue(
                "apiserver",
                "kube-apiserver",
                server=True,
                hosts=(*loopback, "10.0.0.1", "kubernetes", "kubernetes.default", "kubernetes.default.svc"),
            ),
            "webhook": ca.issue("webhook", "127.0.0.1", server=True, hosts=loopback),
            "admin": ca.issue("admin", "rlpipe-local-admin", organization="system:masters"),
            "kcm": ca.issue("kcm", "system:kube-controller-manager"),
            "scheduler": ca.issue("scheduler", "system:kube-scheduler"),
            "front-proxy": ca.issue("front-proxy-client", "front-proxy-client"),
            "sa": service_account_keys(self.pki_dir),
        }

    def _child(self, name: str, argv: list[str], ready: Any, timeout: float) -> None:
        started = time.monotonic()
        child = Child(name, argv, log_path=self.logs / f"{name}.log").start()
        self.children[name] = child
        child.wait_ready(ready, timeout=timeout)
        self.started_in[name] = time.monotonic() - started
        self.say(f"[controlplane] {name} ready in {self.started_in[name]:.1f}s")

    def _etcd(self) -> None:
        p = self.ports
        client, peer = f"http://127.0.0.1:{p['etcd']}", f"http://127.0.0.1:{p['etcd-peer']}"
        self._child(
            "etcd",
            [
                str(components.binary("etcd")),
                "--name=local",
                f"--data-dir={self.root / 'etcd'}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=local={peer}",
                "--unsafe-no-fsync=true",  # a test cluster: durability is not the point
                "--log-level=warn",
            ],
            _ok_200(f"{client}/health"),
            60,
        )

    def _api_server(self, pairs: dict[str, KeyPair]) -> None:
        assert self.ca is not None
        p = self.ports
        self._child(
            "kube-apiserver",
            [
                str(components.binary("kube-apiserver")),
                f"--etcd-servers=http://127.0.0.1:{p['etcd']}",
                "--bind-address=127.0.0.1",
                f"--secure-port={p['api']}",
                "--advertise-address=127.0.0.1",
                f"--tls-cert-file={pairs['api'].cert}",
                f"--tls-private-key-file={pairs['api'].key}",
                f"--client-ca-file={self.ca.pair.cert}",
                f"--service-account-issuer=https://127.0.0.1:{p['api']}",
                f"--service-account-key-file={pairs['sa'].cert}",
                f"--service-account-signing-key-file={pairs['sa'].key}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--authorization-mode=Node,RBAC",
                "--allow-privileged=true",
                "--endpoint-reconciler-type=none",  # no node is this address's; stops a reconcile error loop
                f"--requestheader-client-ca-file={self.ca.pair.cert}",
                "--requestheader-allowed-names=front-proxy-client",
                "--requestheader-username-headers=X-Remote-User",
                "--requestheader-group-headers=X-Remote-Group",
                "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                f"--proxy-client-cert-file={pairs['front-proxy'].cert}",
                f"--proxy-client-key-file={pairs['front-proxy'].key}",
                "--profiling=false",
            ],
            _https_ok(f"https://127.0.0.1:{p['api']}/readyz", self.ca.pair.cert, pairs["admin"]),
            180,
        )

    def _kube_component(self, name: str, port_key: str, *extra: str) -> None:
        """The controller manager or the scheduler: its own identity's kubeconfig for the API and
        for delegated authentication and authorization, loopback only, one instance."""
        kubeconfig = self.kubeconfig(name)
        self._child(
            name,
            [
                str(components.binary(name)),
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={self.ports[port_key]}",
                "--leader-elect=false",
                "--profiling=false",
                *extra,
            ],
            _https_ok(f"https://127.0.0.1:{self.ports[port_key]}/healthz", None, None),
            120,
        )

    def _controller_manager(self, pairs: dict[str, KeyPair]) -> None:
        assert self.ca is not None
        self._kube_component(
            "kube-controller-manager",
            "kcm",
            f"--service-account-private-key-file={pairs['sa'].key}",
            f"--root-ca-file={self.ca.pair.cert}",
            "--use-service-account-credentials=true",
            f"--cluster-signing-cert-file={self.ca.pair.cert}",
            f"--cluster-signing-key-file={self.ca.pair.key}",
            # Nodes here have no kubelet to renew their Leases; the node lifecycle controller
            # would mark them unreachable and evict everything after its grace period.
            "--controllers=*,-node-lifecycle-controller",
        )

    def _scheduler(self) -> None:
        self._kube_component("kube-scheduler", "scheduler")

    def _install_release(self, module: str, version: str, webhook_port: int) -> None:
        assert self.ca is not None
        documents = addons.localize(
            addons.release_documents(module, version), f"https://127.0.0.1:{webhook_port}", self.ca.pem
        )
        self.apply(documents)
        self._wait_crds_established()

    def _wait_crds_established(self, timeout: float = 120) -> None:
        """``kubectl wait`` fails outright on a CRD created a moment ago (no status yet): retry."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=30s")
                return
            except RuntimeError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def _webhook_cert_dir(self, name: str, pair: KeyPair) -> Path:
        directory = self.pki_dir / name
        directory.mkdir(exist_ok=True)
        (directory / "tls.crt").write_bytes(pair.cert.read_bytes())
        (directory / "tls.key").write_bytes(pair.key.read_bytes())
        return directory

    def _jobset(self, webhook: KeyPair) -> None:
        v = components.versions()
        self._install_release("sigs.k8s.io/jobset", v["JOBSET_VERSION"], self.ports["jobset-webhook"])
        certs = self._webhook_cert_dir("jobset-webhook", webhook)
        config = {
            "apiVersion": "config.jobset.x-k8s.io/v1alpha1",
            "kind": "Configuration",
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
            "webhook": {"port": self.ports["jobset-webhook"], "host": "127.0.0.1", "certDir": str(certs)},
            "metrics": {"bindAddress": "0"},
            "health": {"healthProbeBindAddress": f"127.0.0.1:{self.ports['jobset-probe']}"},
        }
        path = self.root / "jobset-config.yaml"
        path.write_text(yaml.safe_dump(config))
        self._child(
            "jobset",
            [str(components.binary("jobset")), f"--config={path}", f"--kubeconfig={self.kubeconfig()}"],
            _ok_200(f"http://127.0.0.1:{self.ports['jobset-probe']}/readyz"),
            120,
        )

    def _provisioning_request_api(self) -> None:
        """Serve ``autoscaling.x-k8s.io`` ProvisioningRequests before Kueue starts, as GKE does:
        Kueue decides once, at its start, whether to run its provisioning admission check
        (``addons`` module docstring). Every plane serves it; only flex-start's objects use it."""
        started = time.monotonic()
        self.apply(addons.provisioning_request_crd(components.versions()["KUEUE_VERSION"]))
        self._wait_crds_established()
        self.started_in["provisioning-request-api"] = time.monotonic() - started

    def _kueue(self, webhook: KeyPair) -> None:
        v = components.versions()
        self._install_release("sigs.k8s.io/kueue", v["KUEUE_VERSION"], self.ports["kueue-webhook"])
        certs = self._webhook_cert_dir("kueue-webhook", webhook)
        _install_kueue_metrics_cert(webhook)
        config = {
            "apiVersion": "config.kueue.x-k8s.io/v1beta2",
            "kind": "Configuration",
            "namespace": "kueue-system",
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
            "webhook": {"port": self.ports["kueue-webhook"], "host": "127.0.0.1", "certDir": str(certs)},
            "metrics": {"bindAddress": "0"},
            "health": {"healthProbeBindAddress": f"127.0.0.1:{self.ports['kueue-probe']}"},
            "integrations": {"frameworks": ["batch/job", "jobset.x-k8s.io/jobset"]},
        }
        path = self.root / "kueue-config.yaml"
        path.write_text(yaml.safe_dump(config))
        self._child(
            "kueue",
            [
                str(components.binary("kueue")),
                f"--config={path}",
                f"--kubeconfig={self.kubeconfig()}",
                "--feature-gates=VisibilityOnDemand=false",  # its own API server on a fixed port
            ],
            _ok_200(f"http://127.0.0.1:{self.ports['kueue-probe']}/readyz"),
            180,
        )

    def _write_kubeconfig(self, user: str, pair: KeyPair) -> Path:
        assert self.ca is not None
        path = self.kubeconfig(user)
        path.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [
                        {
                            "name": "local",
                            "cluster": {"server": self.url, "certificate-authority": str(self.ca.pair.cert)},
                        }
                    ],
                    "users": [
                        {
                            "name": user,
                            "user": {"client-certificate": str(pair.cert), "client-key": str(pair.key)},
                        }
                    ],
                    "contexts": [{"name": "local", "context": {"cluster": "local", "user": user}}],
                    "current-context": "local",
                }
            )
        )
        return path


def _install_kueue_metrics_cert(pair: KeyPair) -> None:
    try:
        KUEUE_METRICS_CERTS.mkdir(parents=True, exist_ok=True)
        (KUEUE_METRICS_CERTS / "tls.crt").write_bytes(pair.cert.read_bytes())
        (KUEUE_METRICS_CERTS / "tls.key").write_bytes(pair.key.read_bytes())
    except PermissionError as exc:
        raise RuntimeError(
            f"Kueue reads its metrics certificate from {KUEUE_METRICS_CERTS} (a fixed path when its "
            "internal certificate management is off); make that directory writable for this user"
        ) from exc


def _ok_200(url: str) -> Any:
    return http_ready(url, lambda status, body: status == 200)


def _https_ok(url: str, ca: Path | None, client: KeyPair | None) -> Any:
    import ssl
    import urllib.request

    if ca is None:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    else:
        context = ssl.create_default_context(cafile=str(ca))
    if client is not None:
        context.load_cert_chain(str(client.cert), str(client.key))

    def check() -> bool:
        try:
            with urllib.request.urlopen(url, timeout=2, context=context) as resp:
                return bool(resp.status == 200)
        except Exception:
            return False

    return check
