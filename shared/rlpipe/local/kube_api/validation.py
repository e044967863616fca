"""Offline validation of the Kubernetes objects rlpipe renders (batch/v1 Job, JobSet v1alpha2).

A real API server prunes fields it does not know without saying so. A misspelt
`successPolicy` or `restartPolicy` would then vanish, and the JobSet would hang
instead of failing. So every rendered object, and every object the local fake API
server accepts, goes through strict schemas here first. Each function returns
problems a person can act on, each starting with the JSON path of the field
(`$.spec.replicatedJobs[1].replicas: ...`). An empty list means valid.

jsonschema and kubernetes_validate are imported on first use, so importing this
module costs nothing until something validates. It serves the API double (``store.py``) and the
tests that check every rendered manifest offline; it never ships in the function bundle.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterable, Iterator, Mapping
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jsonschema import ValidationError
    from jsonschema.protocols import Validator

# Schemas are additive across Kubernetes minors, so a strict check against an
# older minor also rejects fields our clusters may not have yet. 1.32 is the floor
# we target: it has every Job/pod field the manifests use (native sidecars
# since 1.29, podFailurePolicy, Indexed completion), and it matches the kubectl
# (1.32.4) in the emulator image (reference/emulators.md). Raising it is a
# deliberate decision, not drift.
K8S_VERSION = "1.32"

JOB_API_VERSION = "batch/v1"
JOBSET_API_VERSION = "jobset.x-k8s.io/v1alpha2"
JOBSET_SCHEMA_FILE = "jobset-v1alpha2.schema.json"

_MAX_INT32 = 2**31 - 1
_DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
# A label value (apimachinery validation.IsValidLabelValue): empty, or alphanumeric at both ends.
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# The name the JobSet webhook gives a failure policy rule that has none.
_DEFAULT_RULE_NAME = "failurePolicyRule{}"


def validate_object(obj: dict[str, Any]) -> list[str]:
    """Validate a Job or a JobSet, chosen by apiVersion and kind."""
    if not isinstance(obj, dict):
        return [f"$: expected a Kubernetes object (a JSON object), got {type(obj).__name__}"]
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    if (api_version, kind) == (JOB_API_VERSION, "Job"):
        return validate_job(obj)
    if (api_version, kind) == (JOBSET_API_VERSION, "JobSet"):
        return validate_jobset(obj)
    return [
        f"$: kind {kind!r} in apiVersion {api_version!r} is not supported; "
        f"only Job ({JOB_API_VERSION}) and JobSet ({JOBSET_API_VERSION}) can be validated"
    ]


def validate_job(obj: dict[str, Any]) -> list[str]:
    """Validate a batch/v1 Job against the strict Kubernetes OpenAPI schema."""
    return _problems(_job_validator(), obj, "$")


def validate_jobset(obj: dict[str, Any]) -> list[str]:
    """Validate a JobSet: its own schema, each Job template, then the webhook's cross-field rules."""
    problems = _problems(_jobset_validator(), obj, "$")
    spec = obj.get("spec") if isinstance(obj, dict) else None
    rjobs = spec.get("replicatedJobs") if isinstance(spec, dict) else None
    for i, rjob in enumerate(rjobs if isinstance(rjobs, list) else []):
        template = rjob.get("template") if isinstance(rjob, dict) else None
        job_spec = template.get("spec", {}) if isinstance(template, dict) else None
        if isinstance(job_spec, dict):  # anything else the JobSet schema has reported
            # The JobSet schema already checks template.metadata, more strictly than
            # ObjectMeta would; only the spec needs the Job schema.
            job = {"apiVersion": JOB_API_VERSION, "kind": "Job", "spec": job_spec}
            problems += _problems(_job_validator(), job, f"$.spec.replicatedJobs[{i}].template")
    if not problems:
        # These rules index into the object as the webhook's typed Go structs
        # would, so they only run once every shape is known to be right.
        problems += _admission_problems(obj)
    return problems


@cache
def _jobset_validator() -> Validator:
    import jsonschema

    text = (
        resources.files("rlpipe.local.kube_api")
        .joinpath("schemas", JOBSET_SCHEMA_FILE)
        .read_text(encoding="utf-8")
    )
    schema = json.loads(text)
    validator_class = jsonschema.validators.validator_for(schema)
    validator_class.check_schema(schema)
    return validator_class(schema)


@cache
def _job_validator() -> Validator:
    # kubernetes_validate.validate() stops at the first error and reloads 1.3 MB of
    # definitions per call. Its bundled strict schemas are what we want, so build
    # one reusable validator over them and collect every error.
    import jsonschema
    from kubernetes_validate import utils as kv
    from referencing import Registry, Resource

    bundled = [v for v in kv.all_versions() if kv.major_minor(v) == K8S_VERSION]
    if not bundled:
        raise RuntimeError(f"kubernetes-validate bundles no schemas for Kubernetes {K8S_VERSION}")
    folder = f"kubernetes-json-schema/v{bundled[-1]}-local-strict"
    job_schema = kv.schema_contents(f"{folder}/job-batch-v1.json", K8S_VERSION)
    definitions = kv.schema_contents(f"{folder}/_definitions.json", K8S_VERSION)
    registry: Registry = Resource.from_contents(definitions) @ (
        Resource.from_contents(job_schema) @ Registry()
    )
    return jsonschema.Draft202012Validator(job_schema, registry=registry)


def _problems(validator: Validator, instance: Any, root: str) -> list[str]:
    errors = sorted(validator.iter_errors(instance), key=_path_sort_key)
    seen: dict[str, None] = {}
    for error in errors:
        for problem in _describe(error, root):
            seen.setdefault(problem, None)
    return list(seen)


def _path_sort_key(error: ValidationError) -> list[tuple[int, int | str]]:
    # Document order for list indices, so replicatedJobs[2] reports before [10].
    return [(0, p) if isinstance(p, int) else (1, p) for p in error.absolute_path]


def _describe(error: ValidationError, root: str) -> Iterator[str]:
    path = list(error.absolute_path)
    schema = error.schema if isinstance(error.schema, Mapping) else {}
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        known = list(schema.get("properties", {}))
        for key in sorted(k for k in error.instance if k not in known):
            hint = difflib.get_close_matches(key, known, n=1)
            suffix = f" (did you mean {hint[0]!r}?)" if hint else ""
            yield f"{_json_path(root, [*path, key])}: unknown field{suffix}"
    elif error.validator == "required" and isinstance(error.instance, dict):
        for key in error.validator_value if isinstance(error.validator_value, list) else ():
            if key not in error.instance:
                yield f"{_json_path(root, [*path, key])}: required field is missing"
    elif error.validator == "const":
        yield f"{_json_path(root, path)}: must be {error.validator_value!r}, not {_shorten(repr(error.instance))}"
    elif error.validator in ("anyOf", "oneOf") and error.context:
        # The default message repeats the whole instance; the alternatives say more.
        reasons = sorted({_shorten(sub.message) for sub in error.context})
        yield f"{_json_path(root, path)}: matches none of the allowed forms: {'; '.join(reasons)}"
    else:
        yield f"{_json_path(root, path)}: {_shorten(error.message)}"


def _json_path(root: str, parts: Iterable[str | int]) -> str:
    out = root
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _IDENTIFIER.match(part):
            out += f".{part}"
        else:
            out += f"[{json.dumps(part)}]"
    return out


def _shorten(message: str, limit: int = 200) -> str:
    return message if len(message) <= limit else message[: limit - 3] + "..."


def _admission_problems(js: dict[str, Any]) -> list[str]:
    """The JobSet v0.10.1 webhook's cross-field checks (pkg/webhooks/jobset_webhook.go), restated.

    Without them the fake API server would accept JobSets the real one refuses
    (a coordinator naming no replicatedJob, a name too long for its pods), and
    the mistake would only surface on a cluster.
    """
    meta, spec = js["metadata"], js["spec"]
    # generateName gets five random characters appended by the API server.
    name = meta.get("name") or meta.get("generateName", "") + "xxxxx"
    rjobs: list[dict[str, Any]] = spec.get("replicatedJobs", [])
    by_name: dict[str, dict[str, Any]] = {}
    problems: list[str] = []

    for i, rjob in enumerate(rjobs):
        path = f"$.spec.replicatedJobs[{i}]"
        rname, replicas = rjob["name"], rjob.get("replicas", 1)
        if rname in by_name:
            problems.append(f"{path}.name: duplicate replicatedJob name {rname!r}")
        job_spec = rjob["template"].get("spec", {})
        problems += _generated_name_problems(path, name, rname, replicas, job_spec)
        if job_spec.get("parallelism", 1) * replicas > _MAX_INT32:
            problems.append(f"{path}.replicas: replicas x parallelism must not exceed {_MAX_INT32}")
        for k, dep in enumerate(rjob.get("dependsOn", [])):
            if i == 0:
                problems.append(f"{path}.dependsOn: the first replicatedJob cannot depend on another")
            elif dep["name"] not in by_name:
                problems.append(
                    f"{path}.dependsOn[{k}].name: {dep['name']!r} is not an earlier replicatedJob"
                )
        by_name.setdefault(rname, rjob)

    in_order = spec.get("startupPolicy", {}).get("startupPolicyOrder") == "InOrder"
    if in_order and any("dependsOn" in rjob for rjob in rjobs):
        problems.append("$.spec.startupPolicy: startupPolicy InOrder and dependsOn are mutually exclusive")
    problems += _unknown_targets(
        "$.spec.successPolicy.targetReplicatedJobs",
        spec.get("successPolicy", {}).get("targetReplicatedJobs", []),
        by_name,
    )
    problems += _failure_policy_problems(spec.get("failurePolicy", {}), by_name)
    if "coordinator" in spec:
        problems += _coordinator_problems(spec["coordinator"], by_name)
        if not problems:
            problems += _coordinator_label_problems(name, spec)
    return problems


def _coordinator_label_problems(jobset: str, spec: dict[str, Any]) -> list[str]:
    """The coordinator endpoint becomes a label value on every child Job and pod; over 63
    characters every Job create fails. JobSet v0.10.1 never checks it (its controller only logs
    the failed creates while Kueue holds the quota); v0.11 refuses such a JobSet at creation
    (``pkg/webhooks/jobset_webhook.go``, kubernetes-sigs/jobset#1079). We refuse it offline."""
    coordinator = spec["coordinator"]
    subdomain = (spec.get("network") or {}).get("subdomain") or jobset
    endpoint = (
        f"{jobset}-{coordinator['replicatedJob']}-{coordinator.get('jobIndex', 0)}"
        f"-{coordinator.get('podIndex', 0)}.{subdomain}"
    )
    if len(endpoint) <= 63 and _LABEL_VALUE.match(endpoint):
        return []
    return [
        f"$.spec.coordinator: the coordinator endpoint {endpoint!r} ({len(endpoint)} characters) is "
        "stamped into the label jobset.sigs.k8s.io/coordinator, whose values have at most 63; "
        "set a shorter spec.network.subdomain or JobSet name"
    ]


def _generated_name_problems(
    path: str, jobset: str, rjob: str, replicas: int, job_spec: dict[str, Any]
) -> list[str]:
    # Child Jobs are <jobset>-<rjob>-<index> and pods add -<completion-index>-<5 random>;
    # all must be DNS-1035 labels. docs/design.md#names-and-labels caps JobSet names at 28 characters for this.
    problems = []
    job_name = f"{jobset}-{rjob}-{replicas - 1}"
    if len(job_name) > 63 or not _DNS1035.match(job_name):
        problems.append(f"{path}.name: child Job name {job_name!r} would not be a valid DNS-1035 label")
    # The webhook defaults completionMode to Indexed before it validates.
    indexed = job_spec.get("completionMode", "Indexed") == "Indexed"
    completions = job_spec.get("completions")
    if indexed and isinstance(completions, int):
        pod_name = f"{job_name}-{completions - 1}-abcde"
        if len(pod_name) > 63 or not _DNS1035.match(pod_name):
            problems.append(
                f"{path}.name: pod names such as {pod_name!r} would exceed 63 characters "
                "or not be DNS-1035 labels; shorten the JobSet or replicatedJob name"
            )
    return problems


def _unknown_targets(path: str, targets: list[str], by_name: dict[str, Any]) -> list[str]:
    return [
        f"{path}[{k}]: {target!r} is not the name of a replicatedJob"
        for k, target in enumerate(targets)
        if target not in by_name
    ]


def _failure_policy_problems(policy: dict[str, Any], by_name: dict[str, Any]) -> list[str]:
    problems: list[str] = []
    first_index: dict[str, int] = {}
    for k, rule in enumerate(policy.get("rules", [])):
        path = f"$.spec.failurePolicy.rules[{k}]"
        rule_name = rule.get("name") or _DEFAULT_RULE_NAME.format(k)
        if rule_name in first_index:
            problems.append(
                f"{path}.name: rule name {rule_name!r} is already used by rules[{first_index[rule_name]}]"
            )
        first_index.setdefault(rule_name, k)
        problems += _unknown_targets(
            f"{path}.targetReplicatedJobs", rule.get("targetReplicatedJobs", []), by_name
        )
    return problems


def _coordinator_problems(coordinator: dict[str, Any], by_name: dict[str, Any]) -> list[str]:
    path = "$.spec.coordinator"
    rjob = by_name.get(coordinator["replicatedJob"])
    if rjob is None:
        return [f"{path}.replicatedJob: {coordinator['replicatedJob']!r} is not the name of a replicatedJob"]
    job_index, pod_index = coordinator.get("jobIndex", 0), coordinator.get("podIndex", 0)
    if job_index >= rjob.get("replicas", 1):
        return [f"{path}.jobIndex: {job_index} is out of range for {rjob.get('replicas', 1)} replicas"]
    job_spec = rjob["template"].get("spec", {})
    completions = job_spec.get("completions")
    if job_spec.get("completionMode", "Indexed") != "Indexed" or not isinstance(completions, int):
        return [f"{path}: the coordinator's Job must use completionMode Indexed and set completions"]
    if pod_index >= completions:
        return [f"{path}.podIndex: {pod_index} is out of range for {completions} completions"]
    return []
