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
#   SPOT_POOL=1          add a Spot TPU pool (change 5; for tpu.provisioning: spot)
#   SPOT_POOL_MAX_NODES  its autoscaling maximum per slice           (default 8: one 4x8 slice)
#   FLEX_POOL=1          add a flex-start TPU pool with queued provisioning (change 6; for
#                        tpu.provisioning: flex-start)
#   FLEX_POOL_MAX_NODES  its autoscaling maximum per slice           (default 8: one 4x8 slice)
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
#   5. (SPOT_POOL=1) a gke-node-pool module tpu-spot-pool (node pool rlpipe-tpu-spot): a copy of the
#      TPU pool module (same slices, machine type, topology, zone, networks) without its
#      reservation_affinity, with `spot: true` and the taint cloud.google.com/gke-spot=true:
#      NoSchedule, scaling from 0 to SPOT_POOL_MAX_NODES nodes per slice. Settings of Cluster
#      Toolkit's gke-node-pool module (snapshot 10470803, v1.95.0+1, 2026-06-25): `spot`
#      (modules/compute/gke-node-pool/variables.tf:223-227, node_config.spot in main.tf:163; the
#      module refuses spot with a reservation, main.tf:436-437), `taints` (variables.tf:275-283,
#      main.tf:197-203; effects in the provider's spelling, NO_SCHEDULE). The taint is
#      the one Kueue's flavor rlpipe-tpu-v6e-spot declares (infra/cluster/k8s/kueue-spot.yaml), so
#      that only workloads rendered for spot (they tolerate it) get spot quota and spot nodes; GKE
#      labels Spot nodes cloud.google.com/gke-spot=true itself (docs/provisioning.md).
#   6. (FLEX_POOL=1) a gke-node-pool module tpu-flex-pool (node pool rlpipe-tpu-flex): the same copy
#      with `enable_flex_start: true` and `enable_queued_provisioning: true` (variables.tf:458-473;
#      main.tf:148-153 and :165; the module then labels the nodes cloud.google.com/gke-queued=true,
#      main.tf:69-75, and GKE taints them cloud.google.com/gke-queued), `auto_repair: false` (the
#      module requires it for flex-start, main.tf:416-417) and per-zone autoscaling 0 to
#      FLEX_POOL_MAX_NODES (autoscaling_min/max_node_count, variables.tf:511-523: "currently only
#      required for deploying TPU DWS Flex clusters"), as the toolkit's own example
#      examples/gke-consumption-options/dws-flex-start-queued-provisioning/gke-tpu-v6e/ does. It is
#      the gcloud `--flex-start --enable-queued-provisioning --reservation-affinity=none
#      --enable-autoscaling --num-nodes=0` pool of GKE's v6e DWS tutorial. The Kueue objects that
#      use it are infra/cluster/k8s/flex-start (applied separately).
#      Both pools scale from zero (no nodes until a workload asks for them). Setting the variable
#      back to 0 does not remove a pool the script added; delete its module by hand. The toolkit
#      source read was v1.95.0+1, not v1.103.0: check these setting names against the bundle used.
#
# Unlike a bare `sed -i`, every change checks its anchor: if the blueprint does not look like the
# one this script was written for (an anchor is missing or ambiguous), nothing is written and the
# script says which anchor failed. Running it twice is harmless (changes already made are kept).
set -euo pipefail

if [[ $# -lt 1 || $# -gt 2 || "$1" == "-h" || "$1" == "--help" ]]; then
  sed -n '2,/^set -euo pipefail/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
  exit 2
fi
in="$1"
out="${2:-$1}"
[[ -f "$in" ]] || { echo "apply-blueprint-changes: no such file: $in" >&2; exit 1; }

export CPU_NP_MACHINE_TYPE="${CPU_NP_MACHINE_TYPE:-c4d-standard-96}"
export CPU_NP_MAX_NODES="${CPU_NP_MAX_NODES:-4}"
export CPU_NP_DISK_TYPE="${CPU_NP_DISK_TYPE:-hyperdisk-balanced}"
export CPU_NP_DISK_SIZE_GB="${CPU_NP_DISK_SIZE_GB:-500}"
export SPOT_POOL="${SPOT_POOL:-0}"
export SPOT_POOL_MAX_NODES="${SPOT_POOL_MAX_NODES:-8}"
export FLEX_POOL="${FLEX_POOL:-0}"
export FLEX_POOL_MAX_NODES="${FLEX_POOL_MAX_NODES:-8}"

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
spot_pool, spot_max = os.environ["SPOT_POOL"], os.environ["SPOT_POOL_MAX_NODES"]
flex_pool, flex_max = os.environ["FLEX_POOL"], os.environ["FLEX_POOL_MAX_NODES"]
for name, value, pattern in (("CPU_NP_MACHINE_TYPE", machine, r"[a-z0-9]+(-[a-z0-9]+)+"),
                             ("CPU_NP_MAX_NODES", max_nodes, r"[1-9][0-9]*"),
                             ("CPU_NP_DISK_TYPE", disk_type, r"[a-z]+(-[a-z]+)*"),
                             ("CPU_NP_DISK_SIZE_GB", disk_size, r"[1-9][0-9]*"),
                             ("SPOT_POOL", spot_pool, r"[01]"),
                             ("SPOT_POOL_MAX_NODES", spot_max, r"[1-9][0-9]*"),
                             ("FLEX_POOL", flex_pool, r"[01]"),
                             ("FLEX_POOL_MAX_NODES", flex_max, r"[1-9][0-9]*")):
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

def trimmed_block(module_id):
    """module_block, ending at the module's last setting, not at the commented-out modules that
    may follow it."""
    p_start, p_end = module_block(module_id)
    level = indent(lines[p_start])
    while p_end > p_start + 1 and (not lines[p_end - 1].strip() or (
            lines[p_end - 1].lstrip().startswith("#") and indent(lines[p_end - 1]) <= level)):
        p_end -= 1
    return p_start, p_end


RLPIPE_POOLS = ("cpu-np", "tpu-spot-pool", "tpu-flex-pool")


def module_id_above(i):
    for j in range(i, -1, -1):
        m = re.match(r"^\s*- id:\s*(\S+)\s*$", lines[j])
        if m:
            return m.group(1)
    fail(f"no module id above line {i + 1}")


# 4b: the cpu-np module, after the TPU node pool module.
if not find(r"^\s*- id:\s*cpu-np\s*$"):
    pools = find(r"^\s*source:\s*modules/compute/gke-node-pool\s*$")
    if not pools:
        fail("no gke-node-pool module to place cpu-np after")
    tpu_pool = module_id_above(pools[0])
    p_start, p_end = trimmed_block(tpu_pool)
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

# 5 + 6: Spot and flex-start TPU pools, copies of the TPU pool module.
def set_var(key, value):
    """Set a var, a new one after rlpipe's other vars (those of change 4a come first)."""
    vars_end = one(r"^deployment_groups:", "deployment_groups key")
    hits = find(rf"^\s*{key}:", 0, vars_end)
    pad = " " * indent(lines[flag])
    if hits:
        lines[hits[0]] = f"{pad}{key}: {value}"
    else:
        ours = find(r"^\s*(cpu_np_\w+|spot_pool_max_nodes|flex_pool_max_nodes):", 0, vars_end)
        lines.insert(max([flag, *ours]) + 1, f"{pad}{key}: {value}")


# Settings of the TPU pool that the copies do not keep: the capacity (reservation), the node
# counts, and whatever the copy sets itself.
DROPPED = {"name", "reservation_affinity", "static_node_count", "initial_node_count",
           "autoscaling_total_min_nodes", "autoscaling_total_max_nodes", "autoscaling_min_node_count",
           "autoscaling_max_node_count", "is_reservation_active", "spot", "taints", "enable_flex_start",
           "enable_queued_provisioning", "auto_repair", "max_run_duration"}


def add_tpu_pool_copy(module_id, comment, settings):
    if find(rf"^\s*- id:\s*{re.escape(module_id)}\s*$"):
        return  # added by an earlier run
    pools = [module_id_above(i) for i in find(r"^\s*source:\s*modules/compute/gke-node-pool\s*$")]
    tpu = [p for p in pools if p not in RLPIPE_POOLS]
    if len(tpu) != 1:
        fail(f"expected exactly one TPU gke-node-pool module to copy for {module_id}, found {len(tpu)}")
    t_start, t_end = trimmed_block(tpu[0])
    item_level = indent(lines[t_start])
    item = " " * item_level
    block = lines[t_start:t_end]
    s_rel = [i for i, line in enumerate(block) if re.match(rf"^{item}  settings:\s*$", line)]
    if len(s_rel) != 1:
        fail(f"expected exactly one settings: key in module {tpu[0]}, found {len(s_rel)}")
    keys = [i for i in range(s_rel[0] + 1, len(block))
            if block[i].strip() and not block[i].lstrip().startswith("#")]
    if not keys or indent(block[keys[0]]) <= item_level + 2:
        fail(f"module {tpu[0]} has no settings")
    key_pad = " " * indent(block[keys[0]])
    if not any(re.match(rf"^{key_pad}machine_type:", block[i]) for i in keys):
        fail(f"module {tpu[0]} has no machine_type setting")
    copy = [f"{item}- id: {module_id}"]
    i = 1
    while i < len(block):  # the module's own keys: keep source and use, drop outputs and the like
        line = block[i]
        m = re.match(rf"^{item}  (\w+):", line)
        if m and m.group(1) == "settings":
            break
        j = i + 1
        while j < len(block) and (not block[j].strip() or indent(block[j]) > item_level + 2):
            j += 1
        if m and m.group(1) in ("source", "use"):
            copy += block[i:j]
        i = j
    copy += [block[s_rel[0]], key_pad + settings[0]]
    i = s_rel[0] + 1
    while i < len(block):
        line = block[i]
        j = i + 1
        while j < len(block) and (not block[j].strip() or indent(block[j]) > len(key_pad)):
            j += 1
        m = re.match(rf"^{key_pad}(\w+):", line)
        if m and m.group(1) not in DROPPED:
            copy += [x for x in block[i:j] if x.strip()]
        i = j
    copy += [key_pad + x for x in settings[1:]]
    after = [m for m in RLPIPE_POOLS if find(rf"^\s*- id:\s*{re.escape(m)}\s*$")] or [tpu[0]]
    _, at = trimmed_block(after[-1])
    lines[at:at] = ["", f"{item}# rlpipe: {comment[0]}", *(f"{item}# {c}" for c in comment[1:]), *copy]
    done.append(f"module {module_id} added (a copy of {tpu[0]})")


if spot_pool == "1":
    set_var("spot_pool_max_nodes", spot_max)
    add_tpu_pool_copy(  # the settings: name first, the rest after the copied ones
        "tpu-spot-pool",
        ["Spot TPU pool for tpu.provisioning: spot (apply-blueprint-changes.sh, change 5);",
         "Kueue flavor rlpipe-tpu-v6e-spot (infra/cluster/k8s/kueue-spot.yaml) matches its label",
         "and taint."],
        ["name: rlpipe-tpu-spot",
         "spot: true",
         "taints:",
         "- key: cloud.google.com/gke-spot",
         '  value: "true"',
         "  effect: NO_SCHEDULE",
         "autoscaling_min_node_count: 0",
         "autoscaling_max_node_count: $(vars.spot_pool_max_nodes)"])
    done.append(f"vars: spot pool 0..{spot_max} nodes per slice")
if flex_pool == "1":
    set_var("flex_pool_max_nodes", flex_max)
    add_tpu_pool_copy(
        "tpu-flex-pool",
        ["flex-start TPU pool with queued provisioning for tpu.provisioning: flex-start",
         "(apply-blueprint-changes.sh, change 6); Kueue objects in infra/cluster/k8s/flex-start."],
        ["name: rlpipe-tpu-flex",
         "enable_flex_start: true",
         "enable_queued_provisioning: true",
         "auto_repair: false  # required by the module for flex-start",
         "autoscaling_min_node_count: 0",
         "autoscaling_max_node_count: $(vars.flex_pool_max_nodes)"])
    done.append(f"vars: flex-start pool 0..{flex_max} nodes per slice")

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
