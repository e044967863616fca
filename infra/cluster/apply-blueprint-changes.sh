#!/usr/bin/env bash
# Apply rlpipe's changes to Cluster Toolkit's gke-tpu-v6e-advanced.yaml blueprint (v1.103.0).
#
#   infra/cluster/apply-blueprint-changes.sh BLUEPRINT [OUTPUT]
#
# BLUEPRINT is a copy of examples/gke-tpu-v6e/gke-tpu-v6e-advanced.yaml from the Cluster Toolkit
# bundle; without OUTPUT it is edited in place. Settings (environment variables):
#
#   CPU_NP_MACHINE_TYPE  machine type of the cpu-np pool            (default c4d-standard-96)
#   CPU_NP_MAX_NODES     autoscaling maximum of the cpu-np pool     (default 4)
#   CPU_NP_DISK_TYPE     boot disk type of the cpu-np pool          (default hyperdisk-balanced;
#                        C4D machines only take Hyperdisk)
#   CPU_NP_DISK_SIZE_GB  boot disk size of the cpu-np pool          (default 500; see infra/README.md:
#                        the conversion pod's scratch volume alone requests 100Gi)
#
# The changes, the first three exactly as the tutorials make them:
#   1. system node pool n2-standard-8 -> e2-standard-8 (avoids GCE_STOCKOUT in some regions);
#   2. system node pool pinned to the deployment's zone (system_node_pool_zones: [$(vars.zone)]);
#   3. the node pool service account gets storage.admin instead of storage.objectViewer;
#   4. a cpu-np node pool sized for conversion and export. The blueprint's own cpu-np (created by
#      the gke-cluster module when enable_pathways_for_tpus is true) has a fixed machine type
#      (n4-standard-64 in the toolkit releases we could read) that cannot hold one conversion pod
#      (32 CPU, 256Gi, rlpipe.core.presets). So the flag is turned off and a gke-node-pool module named
#      cpu-np is added instead, with the machine type above, in the deployment's zone, scaling
#      from 0. The Kueue configuration of the blueprint does not depend on the flag (the
#      advanced blueprint passes its own kueue_configuration_path); rlpipe's queue for cpu-np
#      comes from infra/cluster/k8s.
#
# Unlike a bare `sed -i`, every change checks its anchor: if the blueprint does not look like the
# one this script was written for (an anchor is missing or ambiguous), nothing is written and the
# script says which anchor failed. Running it twice is harmless (changes already made are kept).
set -euo pipefail

if [[ $# -lt 1 || $# -gt 2 || "$1" == "-h" || "$1" == "--help" ]]; then
  sed -n '2,31p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
in="$1"
out="${2:-$1}"
[[ -f "$in" ]] || { echo "apply-blueprint-changes: no such file: $in" >&2; exit 1; }

export CPU_NP_MACHINE_TYPE="${CPU_NP_MACHINE_TYPE:-c4d-standard-96}"
export CPU_NP_MAX_NODES="${CPU_NP_MAX_NODES:-4}"
export CPU_NP_DISK_TYPE="${CPU_NP_DISK_TYPE:-hyperdisk-balanced}"
export CPU_NP_DISK_SIZE_GB="${CPU_NP_DISK_SIZE_GB:-500}"

tmp="$(mktemp)"
trap 'rm -f "$tmp"' EXIT

"${PYTHON:-python3}" - "$in" "$tmp" <<'PY'
import os
import re
import sys

src, dst = sys.argv[1], sys.argv[2]
lines = open(src, encoding="utf-8").read().split("\n")
machine = os.environ["CPU_NP_MACHINE_TYPE"]
max_nodes = os.environ["CPU_NP_MAX_NODES"]
disk_type = os.environ["CPU_NP_DISK_TYPE"]
disk_size = os.environ["CPU_NP_DISK_SIZE_GB"]
for name, value, pattern in (("CPU_NP_MACHINE_TYPE", machine, r"[a-z0-9]+(-[a-z0-9]+)+"),
                             ("CPU_NP_MAX_NODES", max_nodes, r"[1-9][0-9]*"),
                             ("CPU_NP_DISK_TYPE", disk_type, r"[a-z]+(-[a-z]+)*"),
                             ("CPU_NP_DISK_SIZE_GB", disk_size, r"[1-9][0-9]*")):
    if not re.fullmatch(pattern, value):
        sys.exit(f"apply-blueprint-changes: {name}={value!r} is not valid")

done = []


def fail(msg):
    sys.exit(f"apply-blueprint-changes: {msg}; the blueprint was not changed")


def find(pattern, start=0, end=None):
    rx = re.compile(pattern)
    return [i for i in range(start, len(lines) if end is None else end) if rx.search(lines[i])]


def one(pattern, what, start=0, end=None):
    hits = find(pattern, start, end)
    if len(hits) != 1:
        fail(f"expected exactly one {what} (/{pattern}/), found {len(hits)}")
    return hits[0]


def indent(line):
    return len(line) - len(line.lstrip(" "))


def module_block(module_id):
    """(first, end) line indexes of the `- id: <module_id>` list item."""
    start = one(rf"^\s*- id:\s*{re.escape(module_id)}\s*$", f"module {module_id}")
    level = indent(lines[start])
    end = start + 1
    while end < len(lines):
        line = lines[end]
        if line.strip() and not line.lstrip().startswith("#") and indent(line) <= level:
            break
        end += 1
    return start, end


def module_with_source(source):
    hits = find(rf"^\s*source:\s*{re.escape(source)}\s*$")
    if len(hits) != 1:
        fail(f"expected exactly one module with source {source}, found {len(hits)}")
    for i in range(hits[0], -1, -1):
        m = re.match(r"^\s*- id:\s*(\S+)\s*$", lines[i])
        if m:
            return m.group(1)
    fail(f"no module id above source {source}")


# 1 + 2: system node pool machine type and zone (in the gke-cluster module).
cluster_id = module_with_source("modules/scheduler/gke-cluster")
c_start, c_end = module_block(cluster_id)
mt = one(r"^\s*system_node_pool_machine_type:", "system_node_pool_machine_type setting", c_start, c_end)
if re.search(r"\bn2-standard-8\b", lines[mt]):
    lines[mt] = re.sub(r"\bn2-standard-8\b", "e2-standard-8", lines[mt])
    done.append("system node pool: n2-standard-8 -> e2-standard-8")
elif not re.search(r"\be2-standard-8\b", lines[mt]):
    fail(f"system_node_pool_machine_type is neither n2-standard-8 nor e2-standard-8: {lines[mt].strip()}")
if not find(r"^\s*system_node_pool_zones:", c_start, c_end):
    lines.insert(mt + 1, " " * indent(lines[mt]) + "system_node_pool_zones: [$(vars.zone)]")
    done.append("system node pool: pinned to $(vars.zone)")

# 3: storage.admin for the node pool service account.
s_start, s_end = module_block("node_pool_service_account")
viewer = find(r"^\s*-\s*storage\.objectViewer\s*$", s_start, s_end)
admin = find(r"^\s*-\s*storage\.admin\s*$", s_start, s_end)
if len(viewer) == 1:
    lines[viewer[0]] = lines[viewer[0]].replace("storage.objectViewer", "storage.admin")
    done.append("node pool service account: storage.objectViewer -> storage.admin")
elif not (len(viewer) == 0 and len(admin) == 1):
    fail("node_pool_service_account should list storage.objectViewer (or storage.admin) exactly once")

# 4a: vars. The toolkit's own cpu-np off, ours configured.
flag = one(r"^\s*enable_pathways_for_tpus:\s*(true|false)\s*(#.*)?$", "enable_pathways_for_tpus var", 0,
           one(r"^deployment_groups:", "deployment_groups key"))
if re.search(r":\s*true\b", lines[flag]):
    pad = " " * indent(lines[flag])
    lines[flag] = pad + "enable_pathways_for_tpus: false  # rlpipe: cpu-np comes from the cpu-np module below"
    done.append("vars: enable_pathways_for_tpus -> false (the toolkit's fixed-size cpu-np is not created)")
pad = " " * indent(lines[flag])
wanted = {"cpu_np_machine_type": machine, "cpu_np_max_nodes": max_nodes, "cpu_np_disk_type": disk_type,
          "cpu_np_disk_size_gb": disk_size}
vars_end = one(r"^deployment_groups:", "deployment_groups key")
at = flag + 1
for key, value in wanted.items():
    hits = find(rf"^\s*{key}:", 0, vars_end)
    if hits:
        lines[hits[0]] = f"{pad}{key}: {value}"
    else:
        lines.insert(at, f"{pad}{key}: {value}")
        vars_end += 1
        at += 1
done.append(f"vars: cpu-np {machine}, 0..{max_nodes} nodes, {disk_type} {disk_size} GB")

# 4b: the cpu-np module, after the TPU node pool module.
if not find(r"^\s*- id:\s*cpu-np\s*$"):
    pools = find(r"^\s*source:\s*modules/compute/gke-node-pool\s*$")
    if not pools:
        fail("no gke-node-pool module to place cpu-np after")
    tpu_pool = None
    for hit in pools:
        for i in range(hit, -1, -1):
            m = re.match(r"^\s*- id:\s*(\S+)\s*$", lines[i])
            if m:
                tpu_pool = m.group(1)
                break
        break
    p_start, p_end = module_block(tpu_pool)
    level = indent(lines[p_start])
    # The block ends at its last setting, not at the commented-out modules that may follow it.
    while p_end > p_start + 1 and (not lines[p_end - 1].strip() or (
            lines[p_end - 1].lstrip().startswith("#") and indent(lines[p_end - 1]) <= level)):
        p_end -= 1
    item = " " * indent(lines[p_start])
    body = item + "    "
    block = [
        "",
        f"{item}# rlpipe: CPU pool for conversion/export Jobs and the Pathways head (nodeSelector",
        f"{item}# cloud.google.com/gke-nodepool: cpu-np), sized by the cpu_np_* vars.",
        f"{item}- id: cpu-np",
        f"{item}  source: modules/compute/gke-node-pool",
        f"{item}  use: [{cluster_id}, node_pool_service_account]",
        f"{item}  settings:",
        f"{body}name: cpu-np",
        f"{body}machine_type: $(vars.cpu_np_machine_type)",
        f"{body}zones: [$(vars.zone)]",
        f"{body}disk_type: $(vars.cpu_np_disk_type)",
        f"{body}disk_size_gb: $(vars.cpu_np_disk_size_gb)",
        f"{body}autoscaling_total_min_nodes: 0",
        f"{body}autoscaling_total_max_nodes: $(vars.cpu_np_max_nodes)",
        f"{body}auto_upgrade: true",
    ]
    lines[p_end:p_end] = block
    done.append(f"module cpu-np added after {tpu_pool}")

with open(dst, "w", encoding="utf-8") as fh:
    fh.write("\n".join(lines))
for d in done:
    print(f"  - {d}", file=sys.stderr)

try:
    import yaml  # optional: a final parse check where PyYAML is installed
except ImportError:
    pass
else:
    yaml.safe_load(open(dst, encoding="utf-8"))
PY

cp "$tmp" "$out"
echo "apply-blueprint-changes: wrote $out" >&2
