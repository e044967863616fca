#!/usr/bin/env bash
# Check, with the current kubectl context, that the cluster has what rlpipe's workloads need.
#
#   infra/cluster/check-addons.sh            exit 0 when every check passes, 1 otherwise
#
# Checks (read-only; nothing is changed and no secret value is printed):
#   - the JobSet CRD serves jobset.x-k8s.io/v1alpha2 and the controller is >= v0.7
#     (spec.coordinator needs >= v0.6, failurePolicy.restartStrategy >= v0.7; v0.10.1 is the
#     version Cluster Toolkit and xpk install and the one rlpipe was tested against);
#   - Kueue serves kueue.x-k8s.io/v1beta2 and rlpipe's ClusterQueue is active, LocalQueue present;
#   - GKE secret synchronisation is on (SecretSync CRD) and the Secret rlpipe/hf-token has key token;
#   - the rlpipe-workload ServiceAccount carries its Workload Identity annotation;
#   - the cpu-np node pool exists (its nodes may be scaled to zero: then only a warning);
#   - provisioning modes (docs/provisioning.md): the spot flavor rlpipe-tpu-v6e-spot exists (Spot
#     v6e nodes: only a warning, the pool scales from zero and is optional); when flex-start is set
#     up (ClusterQueue rlpipe-flex, infra/cluster/k8s/flex-start): the ProvisioningRequest API is
#     served, the admission check rlpipe-flex-prov and the ClusterQueue are active, the LocalQueue
#     flex-queue exists. Without flex-start only a warning.
set -uo pipefail

NS="${RLPIPE_NAMESPACE:-rlpipe}"
MIN_JOBSET="0.7.0"
failures=0
ok() { printf '  ok    %s\n' "$*"; }
bad() { printf '  FAIL  %s\n' "$*"; failures=$((failures + 1)); }
warn() { printf '  warn  %s\n' "$*"; }

version_ge() {  # version_ge A B: A >= B (dotted numbers, leading v ignored)
  [[ "$(printf '%s\n%s\n' "${1#v}" "${2#v}" | sort -V | head -n1)" == "${2#v}" ]]
}

kubectl version --request-timeout=10s >/dev/null 2>&1 || { echo "check-addons: cannot reach the cluster with the current kubectl context" >&2; exit 1; }

echo "JobSet"
if kubectl get crd jobsets.jobset.x-k8s.io -o jsonpath='{.spec.versions[*].name}' 2>/dev/null | grep -qw v1alpha2; then
  ok "CRD jobsets.jobset.x-k8s.io serves v1alpha2"
else
  bad "CRD jobsets.jobset.x-k8s.io with v1alpha2 not found (install JobSet >= v0.7; v0.10.1 tested)"
fi
image="$(kubectl get deployments -A -l app.kubernetes.io/name=jobset -o jsonpath='{.items[*].spec.template.spec.containers[*].image}' 2>/dev/null)"
[[ -n "$image" ]] || image="$(kubectl -n jobset-system get deployment jobset-controller-manager -o jsonpath='{.spec.template.spec.containers[*].image}' 2>/dev/null)"
tag="$(tr ' ' '\n' <<<"$image" | grep -i jobset | head -n1 | sed -n 's/.*:\(v[0-9][0-9.]*\).*/\1/p')"
if [[ -z "$tag" ]]; then
  bad "JobSet controller image not found or not tagged with a version (saw: ${image:-nothing})"
elif version_ge "$tag" "$MIN_JOBSET"; then
  ok "JobSet controller $tag (>= v$MIN_JOBSET)"
else
  bad "JobSet controller $tag is older than v$MIN_JOBSET"
fi

echo "Kueue"
if kubectl get crd clusterqueues.kueue.x-k8s.io -o jsonpath='{.spec.versions[?(@.served==true)].name}' 2>/dev/null | grep -qw v1beta2; then
  ok "Kueue serves v1beta2"
else
  bad "Kueue CRDs with v1beta2 not found (Kueue >= v0.15 needed; Cluster Toolkit installs v0.17.x)"
fi
active="$(kubectl get clusterqueues.kueue.x-k8s.io rlpipe -o jsonpath='{.status.conditions[?(@.type=="Active")].status}' 2>/dev/null)"
if [[ "$active" == "True" ]]; then ok "ClusterQueue rlpipe is active"; else bad "ClusterQueue rlpipe is not active (${active:-missing}): kubectl describe clusterqueue rlpipe"; fi
if kubectl -n "$NS" get localqueues.kueue.x-k8s.io user-queue >/dev/null 2>&1; then ok "LocalQueue $NS/user-queue"; else bad "LocalQueue $NS/user-queue missing"; fi

echo "Secrets"
if kubectl get crd secretsyncs.secret-sync.gke.io >/dev/null 2>&1; then
  ok "GKE secret synchronisation is enabled"
else
  bad "CRD secretsyncs.secret-sync.gke.io missing: gcloud container clusters update CLUSTER --location LOCATION --enable-secret-sync"
fi
# shellcheck disable=SC2016  # a go-template, not a shell expansion
keys="$(kubectl -n "$NS" get secret hf-token -o go-template='{{range $k, $v := .data}}{{$k}} {{end}}' 2>/dev/null)"
if grep -qw token <<<"$keys"; then
  ok "Secret $NS/hf-token has key token"
else
  bad "Secret $NS/hf-token with key token missing: kubectl -n $NS describe secretsync hf-token"
fi

echo "Identity"
gsa="$(kubectl -n "$NS" get serviceaccount rlpipe-workload -o jsonpath='{.metadata.annotations.iam\.gke\.io/gcp-service-account}' 2>/dev/null)"
if [[ "$gsa" == *@*.iam.gserviceaccount.com ]]; then ok "rlpipe-workload -> $gsa"; else bad "ServiceAccount $NS/rlpipe-workload has no Workload Identity annotation (${gsa:-none})"; fi

echo "Nodes"
if kubectl get nodes -l cloud.google.com/gke-nodepool=cpu-np -o name 2>/dev/null | grep -q .; then
  ok "cpu-np nodes: $(kubectl get nodes -l cloud.google.com/gke-nodepool=cpu-np -o jsonpath='{.items[0].metadata.labels.node\.kubernetes\.io/instance-type}')"
else
  warn "no cpu-np node right now (fine if the pool is scaled to zero; check: gcloud container node-pools list --cluster CLUSTER)"
fi

echo "Provisioning modes"
if kubectl get resourceflavors.kueue.x-k8s.io rlpipe-tpu-v6e-spot >/dev/null 2>&1; then
  ok "ResourceFlavor rlpipe-tpu-v6e-spot (tpu.provisioning: spot)"
else
  bad "ResourceFlavor rlpipe-tpu-v6e-spot missing: kubectl apply -k infra/cluster/k8s"
fi
if kubectl get nodes -l cloud.google.com/gke-spot=true,cloud.google.com/gke-tpu-accelerator=tpu-v6e-slice -o name 2>/dev/null | grep -q .; then
  ok "Spot v6e nodes present"
else
  warn "no Spot v6e node right now (fine if the Spot pool is scaled to zero; it exists only if apply-blueprint-changes.sh ran with SPOT_POOL=1)"
fi
if kubectl get clusterqueues.kueue.x-k8s.io rlpipe-flex >/dev/null 2>&1; then
  if kubectl get crd provisioningrequests.autoscaling.x-k8s.io >/dev/null 2>&1; then
    ok "the ProvisioningRequest API (autoscaling.x-k8s.io) is served"
  else
    bad "CRD provisioningrequests.autoscaling.x-k8s.io missing: flex-start with queued provisioning cannot work on this cluster"
  fi
  ac="$(kubectl get admissionchecks.kueue.x-k8s.io rlpipe-flex-prov -o jsonpath='{.status.conditions[?(@.type=="Active")].status}' 2>/dev/null)"
  if [[ "$ac" == "True" ]]; then
    ok "AdmissionCheck rlpipe-flex-prov is active"
  else
    bad "AdmissionCheck rlpipe-flex-prov is not active (${ac:-missing}): kubectl describe admissioncheck rlpipe-flex-prov (Kueue starts its ProvisioningRequest controller only if the API was served when Kueue started: restart Kueue's controller manager after enabling it)"
  fi
  active="$(kubectl get clusterqueues.kueue.x-k8s.io rlpipe-flex -o jsonpath='{.status.conditions[?(@.type=="Active")].status}' 2>/dev/null)"
  if [[ "$active" == "True" ]]; then ok "ClusterQueue rlpipe-flex is active"; else bad "ClusterQueue rlpipe-flex is not active (${active:-unknown}): kubectl describe clusterqueue rlpipe-flex"; fi
  if kubectl -n "$NS" get localqueues.kueue.x-k8s.io flex-queue >/dev/null 2>&1; then ok "LocalQueue $NS/flex-queue"; else bad "LocalQueue $NS/flex-queue missing: kubectl apply -k infra/cluster/k8s/flex-start"; fi
  if kubectl get nodes -l cloud.google.com/gke-queued=true -o name 2>/dev/null | grep -q .; then
    ok "queued-provisioning nodes present"
  else
    warn "no queued-provisioning node right now (expected: the flex-start pool has nodes only while a ProvisioningRequest holds them)"
  fi
else
  warn "flex-start is not set up (no ClusterQueue rlpipe-flex): tpu.provisioning: flex-start workloads stay suspended; see docs/provisioning.md"
fi

if (( failures )); then
  echo "check-addons: $failures check(s) failed" >&2
  exit 1
fi
echo "check-addons: all checks passed"
