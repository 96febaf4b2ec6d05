"""Runs the REAL operator binary for the tests: built here with `go build`, started with the
mock provider (whose proxies are real forward proxies on 127.x.y.z that demand their
credential) on loopback ports, and driven the way Metacontroller drives it: sync bodies are
posted, and each answer's status and children (the credentials Secret among them) are fed
back, until every Proxy is Ready."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest
import requests

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TOKEN = "python-client-test-token"
NAMESPACE = "crawl"
PROXIES = ("alpha", "beta")
READY_DEADLINE = 120.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(what, check, deadline_seconds, interval=0.1):
    deadline = time.monotonic() + deadline_seconds
    last = None
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except Exception as exc:  # not up yet
            last = exc
        time.sleep(interval)
    raise AssertionError(f"{what} not reached within {deadline_seconds}s (last error: {last})")


class Operator:
    def __init__(self, proc, hook_url, api_url, log_path):
        self.proc = proc
        self.hook_url = hook_url
        self.api_url = api_url
        self.log_path = log_path
        self.token = TOKEN
        self.parents = {}
        self.children = {}
        self.child_uids = {}

    def log(self) -> str:
        try:
            return Path(self.log_path).read_text(errors="replace")
        except OSError:
            return ""

    def parent(self, name: str) -> dict:
        return {
            "apiVersion": "crawl.example.com/v1alpha1",
            "kind": "Proxy",
            "metadata": {"name": name, "namespace": NAMESPACE, "uid": str(uuid.uuid5(uuid.NAMESPACE_URL, name)),
                         "generation": 1, "creationTimestamp": "2026-12-01T12:00:00Z"},
            "spec": {
                "mode": "Managed",
                "provider": "mock",
                "attributes": {"pool": "scrapy", "name": name},
                "maxLeases": 10,
                "healthCheck": {"probeURL": self.hook_url + "/healthz", "intervalSeconds": 1,
                                "timeoutSeconds": 1, "successThreshold": 1, "failureThreshold": 3},
            },
            "status": {},
        }

    def sync(self, name: str) -> dict:
        parent = self.parents.setdefault(name, self.parent(name))
        body = {"controller": {"apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
                               "metadata": {"name": "proxy-operator"}},
                "parent": parent, "children": self.children.get(name, {}), "related": {}, "finalizing": False}
        res = requests.post(self.hook_url + "/sync", json=body, timeout=30)
        assert res.status_code == 200, f"sync {name}: {res.status_code} {res.text}"
        answer = res.json()
        parent["status"] = answer["status"]
        # Apply the children as Metacontroller would: create what is new (with a UID), keep the
        # rest, delete what the answer left out.
        observed = {}
        for child in answer.get("children") or []:
            kind, api = child["kind"], child["apiVersion"]
            meta = dict(child["metadata"])
            key = f"{meta.get('namespace', NAMESPACE)}/{meta['name']}"
            meta["uid"] = self.child_uids.setdefault((name, kind, key), str(uuid.uuid4()))
            meta.setdefault("namespace", NAMESPACE)
            obj = dict(child, metadata=meta)
            if kind == "Pod":
                obj["status"] = {"phase": "Running"}
            observed.setdefault(f"{kind}.{api}", {})[key] = obj
        self.children[name] = observed
        return answer

    def sync_until_ready(self, names=PROXIES):
        def all_ready():
            phases = [self.sync(n)["status"].get("phase") for n in names]
            return all(p == "Ready" for p in phases)
        wait_until("every Proxy Ready", all_ready, READY_DEADLINE, interval=0.3)

    def api(self):
        from proxy_operator import Client

        return Client(self.api_url, token=self.token)


def go_build(package: str, binary: str) -> str:
    """Builds a Go command of the repository (e.g. "." for the operator) into binary."""
    go = os.environ.get("GO", "go")
    if shutil.which(go) is None:
        pytest.fail(f"{go} not found: the tests build the real binaries")
    env = dict(os.environ)
    env.setdefault("GOTOOLCHAIN", "go1.27.3")
    res = subprocess.run([go, "build", "-o", binary, package], cwd=REPO, env=env, capture_output=True, text=True)
    if res.returncode != 0:
        pytest.fail(f"go build {package} failed:\n{res.stdout}\n{res.stderr}")
    return binary


def build_operator(out_dir: str) -> str:
    return go_build(".", os.path.join(out_dir, "proxy-operator"))


@pytest.fixture(scope="session")
def operator():
    tmp = tempfile.mkdtemp(prefix="proxy-operator-py-")
    binary = build_operator(tmp)
    config = os.path.join(tmp, "providers.yaml")
    with open(config, "w") as f:
        f.write("providers:\n  - name: mock\n    type: mock\n    mock:\n      provisioningDelay: 1s\n      serveProxies: true\n")
    hook_port, api_port = free_port(), free_port()
    log_path = os.path.join(tmp, "operator.log")
    log = open(log_path, "w")
    env = dict(os.environ, DISCOVERY_TOKEN=TOKEN)
    proc = subprocess.Popen(
        [binary, "-hook-addr", f"127.0.0.1:{hook_port}", "-hooks-insecure", "-discovery-addr", f"127.0.0.1:{api_port}",
         "-providers-config", config, "-fleet-warmup", "0s", "-log-format", "text", "-gc-interval", "0"],
        stdout=log, stderr=subprocess.STDOUT, env=env)
    op = Operator(proc, f"http://127.0.0.1:{hook_port}", f"http://127.0.0.1:{api_port}", log_path)
    try:
        wait_until("operator listening", lambda: proc.poll() is None and
                   requests.get(op.hook_url + "/healthz", timeout=2).status_code == 200 and
                   requests.get(op.api_url + "/healthz", timeout=2).status_code == 200, 60)
        op.sync_until_ready()
        yield op
    except BaseException:
        sys.stderr.write("operator log:\n" + op.log()[-8000:])
        raise
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        if os.environ.get("KEEP_OPERATOR_LOG"):
            print("operator log kept in", log_path)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
