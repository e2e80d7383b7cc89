"""API-server CPU of the LISTs a copyrator job makes, one kind at a time, on a fresh control plane
(BENCHMARKS.md, "Where the fan-out's LISTs go"):

    scripts/control-plane.sh run -- python3 benches/list_cost.py

Knobs: N namespaces with a copy each (500), U unrelated Secrets (2000), R LISTs per kind (100),
ONLY a substring of the kinds to run (e.g. "watch cache").
Creates N namespaces, each with one Secret carrying copy-like marks (2 labels, 4 annotations),
written twice (create + replace) so managedFields look like a copy's. Then measures
kube-apiserver CPU (utime+stime from /proc) for R LISTs in each encoding."""
import json, os, ssl, subprocess, time, urllib.request, concurrent.futures as cf

N = int(os.environ.get("N", "500")); R = int(os.environ.get("R", "100"))
kc = open(os.environ["KUBECONFIG"]).read()
server = kc.split("server: ")[1].split()[0]
ca = kc.split("certificate-authority: ")[1].split()[0]
token = kc.split("token: ")[1].split()[0]
ctx = ssl.create_default_context(cafile=ca)
pid = int(subprocess.check_output(["pgrep", "-f", "kube-apiserver-1.20"]).split()[0])
TICK = os.sysconf("SC_CLK_TCK")

def cpu():
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / TICK

def req(method, path, body=None, accept="application/json"):
    data = json.dumps(body).encode() if body is not None else None
    r = urllib.request.Request(server + path, data=data, method=method,
                               headers={"Authorization": "Bearer " + token, "Accept": accept,
                                        "Content-Type": "application/json"})
    with urllib.request.urlopen(r, context=ctx) as resp:
        return resp.read()

def setup(i):
    ns = f"lc-{i}"
    req("POST", "/api/v1/namespaces", {"metadata": {"name": ns, "labels": {"lc": "yes"}}})
    s = {"metadata": {"name": "copy", "namespace": ns,
                      "labels": {"app.kubernetes.io/managed-by": "copyrator", "copyrator.io/source-uid": "0f8e2a4c-5d1b-4c3e-9a7f-123456789abc"},
                      "annotations": {"copyrator.io/source": "src/registry", "copyrator.io/content-hash": "sha256:" + "ab" * 32,
                                      "copyrator.io/rule": "annotation:src/registry", "copyrator.io/deletion-policy": "delete"}},
         "type": "Opaque", "data": {"k": "dmFsdWU="}}
    o = json.loads(req("POST", f"/api/v1/namespaces/{ns}/secrets", s))
    o["data"] = {"k": "dmFsdWUy"}
    req("PUT", f"/api/v1/namespaces/{ns}/secrets/copy", o)

with cf.ThreadPoolExecutor(16) as ex:
    list(ex.map(setup, range(N)))
# unrelated Secrets, as a cluster has
U = int(os.environ.get("U", "2000"))
def unrelated(i):
    req("POST", "/api/v1/namespaces/default/secrets", {"metadata": {"name": f"u{i}"}, "data": {"k": "dmFsdWU="}})
with cf.ThreadPoolExecutor(16) as ex:
    list(ex.map(unrelated, range(U)))
time.sleep(2)

META = ";as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
cases = [
    ("copies, metadata, watch cache, JSON", "/api/v1/secrets?labelSelector=app.kubernetes.io%2Fmanaged-by%3Dcopyrator&resourceVersion=0", "application/json" + META),
    ("copies, metadata, watch cache, protobuf", "/api/v1/secrets?labelSelector=app.kubernetes.io%2Fmanaged-by%3Dcopyrator&resourceVersion=0", "application/vnd.kubernetes.protobuf" + META),
    ("copies, metadata, etcd, JSON", "/api/v1/secrets?labelSelector=app.kubernetes.io%2Fmanaged-by%3Dcopyrator&limit=1000", "application/json" + META),
    ("namespaces selected, watch cache, JSON", "/api/v1/namespaces?labelSelector=lc%3Dyes&resourceVersion=0", "application/json"),
    ("namespaces selected, watch cache, protobuf", "/api/v1/namespaces?labelSelector=lc%3Dyes&resourceVersion=0", "application/vnd.kubernetes.protobuf"),
    ("namespaces all, etcd, JSON", "/api/v1/namespaces?limit=1000", "application/json"),
    ("namespaces all, etcd, metadata JSON", "/api/v1/namespaces?limit=1000", "application/json" + META),
    ("namespaces selected, etcd, JSON", "/api/v1/namespaces?labelSelector=lc%3Dyes&limit=1000", "application/json"),
]
only = os.environ.get("ONLY")
for rep in range(2):
    for name, path, accept in cases:
        if only and only not in name: continue
        req("GET", path, accept=accept)
        c0 = cpu(); t0 = time.time(); size = 0
        for _ in range(R):
            size = len(req("GET", path, accept=accept))
        c1 = cpu(); t1 = time.time()
        print(f"{name}: {1000*(c1-c0)/R:.2f} ms API-server CPU per LIST, {1000*(t1-t0)/R:.2f} ms wall, {size} bytes", flush=True)
