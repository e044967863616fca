# ---------------------------------------------------------------------------------------- project

variable "project_id" {
  description = "Project that holds the pipeline and the GKE cluster."
  type        = string
}

variable "region" {
  description = "Region of the buckets, functions, Eventarc triggers, workflow and scheduler jobs (the GKE cluster's region, e.g. us-east5)."
  type        = string
}

variable "name_prefix" {
  description = "Prefix of every resource name (service accounts, topics, functions, secrets)."
  type        = string
  default     = "rlpipe"

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{1,11}$", var.name_prefix))
    error_message = "name_prefix: 2-12 characters, lowercase letters, digits and hyphens, starting with a letter (service account ids are limited to 30 characters)."
  }
}

variable "labels" {
  description = "Labels added to every resource that takes labels."
  type        = map(string)
  default     = { app = "rlpipe" }
}

variable "enable_apis" {
  description = "Enable the Google APIs the pipeline uses (needs serviceusage.services.enable). Turn off where a platform team enables APIs."
  type        = bool
  default     = true
}

variable "deletion_protection" {
  description = "Protect the workflow from `terraform destroy` (set false before tearing down)."
  type        = bool
  default     = true
}

# ---------------------------------------------------------------------------------------- names

variable "requests_bucket_name" {
  description = "Requests bucket (request files under requests/). Default: <project>-<prefix>-requests."
  type        = string
  default     = null
}

variable "artifacts_bucket_name" {
  description = "Artifacts bucket: what the workloads write (converted checkpoints, trained checkpoints, exported models, Pathways scratch). Default: <project>-<prefix>-artifacts."
  type        = string
  default     = null
}

variable "state_bucket_name" {
  description = "State bucket: the control plane's own records (run ledgers and events, error records, the conversion cache's READY.json, the upstream watcher's state, the reconcile cursor); workloads have no access to it. Default: <project>-<prefix>-state."
  type        = string
  default     = null
}

variable "workflow_name" {
  description = "Name of the Cloud Workflows workflow (RLPIPE_WORKFLOW)."
  type        = string
  default     = "rlpipe-pipeline"
}

variable "force_destroy_buckets" {
  description = "Let `terraform destroy` delete the requests, artifacts and state buckets with their objects (checkpoints, models, ledgers)."
  type        = bool
  default     = false
}

# ---------------------------------------------------------------------------------------- GKE

variable "gke_cluster_name" {
  description = "Name of the GKE cluster created from Cluster Toolkit's gke-tpu-v6e-advanced blueprint (its deployment_name)."
  type        = string
}

variable "gke_cluster_location" {
  description = "Location of the GKE cluster (the blueprint creates a regional cluster: the region)."
  type        = string
}

variable "gke_use_dns_endpoint" {
  description = "Reach the control plane through its DNS-based endpoint (no CA certificate, no authorized networks needed) instead of its IP endpoint. The cluster must allow external traffic on the DNS endpoint."
  type        = bool
  default     = false
}

variable "k8s_namespace" {
  description = "Namespace of rlpipe's workloads (infra/cluster/k8s; RLPIPE_NAMESPACE)."
  type        = string
  default     = "rlpipe"
}

variable "k8s_workload_service_account" {
  description = "Kubernetes ServiceAccount of the workload pods (RLPIPE_WORKLOAD_SERVICE_ACCOUNT)."
  type        = string
  default     = "rlpipe-workload"
}

variable "k8s_secret_sync_service_account" {
  description = "Kubernetes ServiceAccount that GKE's secret synchronisation uses to read the HF token."
  type        = string
  default     = "rlpipe-secret-sync"
}

variable "kueue_tpu_chips" {
  description = "Kueue quota of google.com/tpu for rlpipe: the chips of the cluster's v6e slices (32 per v6e-32, 64 per v6e-64)."
  type        = number
  default     = 32
}

variable "kueue_cpu_np_cpu" {
  description = "Kueue cpu quota on the cpu-np pool (what the pool holds at its autoscaling maximum)."
  type        = string
  default     = "180"
}

variable "kueue_cpu_np_memory" {
  description = "Kueue memory quota on the cpu-np pool."
  type        = string
  default     = "640Gi"
}

variable "kueue_cpu_np_ephemeral_storage" {
  description = "Kueue ephemeral-storage quota on the cpu-np pool: the nodes' allocatable local disk (boot disks, CPU_NP_DISK_SIZE_GB of apply-blueprint-changes.sh, less GKE's reserve) at the pool's autoscaling maximum. A conversion asks for its scratch.convert."
  type        = string
  default     = "800Gi"
}

# ---------------------------------------------------------------------------------------- functions

variable "python_runtime" {
  description = "Cloud Run functions runtime of every function."
  type        = string
  default     = "python312"

  validation {
    condition     = can(regex("^python3(1[1-9]|[2-9][0-9])$", var.python_runtime))
    error_message = "python_runtime must be python311 or newer (the package requires Python >= 3.11)."
  }
}

variable "source_zip" {
  description = "The functions' source archive made by `make bundle` (infra/bundle.sh). Default: build/functions-source.zip of this repository."
  type        = string
  default     = null
}

variable "stage_invokers" {
  description = "Extra members that may call the stage function besides the workflow, e.g. the operators who run `rlpipe cancel` (\"user:alice@example.com\", \"group:ml-platform@example.com\")."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for m in var.stage_invokers : !contains(["allUsers", "allAuthenticatedUsers"], m)])
    error_message = "stage must never be public."
  }
}

variable "stage_ingress" {
  description = "Ingress of the stage function. ALLOW_ALL (IAM still required) lets operators' `rlpipe cancel` reach it; ALLOW_INTERNAL_ONLY if only the workflow calls it."
  type        = string
  default     = "ALLOW_ALL"

  validation {
    condition     = contains(["ALLOW_ALL", "ALLOW_INTERNAL_ONLY", "ALLOW_INTERNAL_AND_GCLB"], var.stage_ingress)
    error_message = "stage_ingress: ALLOW_ALL, ALLOW_INTERNAL_ONLY or ALLOW_INTERNAL_AND_GCLB."
  }
}

variable "function_max_instances" {
  description = "Override of the maximum instance count per function (keys: intake-object, intake-message, artifact-event, stage, upstream-poll, upstream-webhook, reconcile)."
  type        = map(number)
  default     = {}
}

variable "secret_version" {
  description = "Secret Manager version the functions read at instance start (\"latest\" or a number)."
  type        = string
  default     = "latest"
}

variable "start_lease_seconds" {
  description = "RLPIPE_START_LEASE_SECONDS: how long one intake delivery holds the right to start a run's execution. Longer than the intake functions' timeout (docs/timeouts.md)."
  type        = number
  default     = 180
}

variable "callback_timeout_seconds" {
  description = "RLPIPE_CALLBACK_TIMEOUT_SECONDS: how long the workflow waits for a callback before it polls the status."
  type        = number
  default     = 300
}

# ---------------------------------------------------------------------------------------- events

variable "dead_letter_max_delivery_attempts" {
  description = "Deliveries of one event before it goes to the dead-letter topic (Pub/Sub allows 5-100)."
  type        = number
  default     = 5

  validation {
    condition     = var.dead_letter_max_delivery_attempts >= 5 && var.dead_letter_max_delivery_attempts <= 100
    error_message = "Pub/Sub allows 5 to 100 delivery attempts."
  }
}

variable "event_min_retry_delay" {
  description = "Minimum backoff between redeliveries of a failed event."
  type        = string
  default     = "10s"
}

variable "event_max_retry_delay" {
  description = "Maximum backoff between redeliveries of a failed event."
  type        = string
  default     = "600s"
}

variable "configure_dead_letter" {
  description = "Set the dead-letter topic and retry backoff on the Pub/Sub subscriptions Eventarc creates for the triggers (runs infra/terraform/scripts/eventarc-dead-letter.sh, which needs gcloud where terraform runs)."
  type        = bool
  default     = true
}

variable "upstream_poll_schedule" {
  description = "Cron schedule of the upstream tick (Hugging Face release detection)."
  type        = string
  default     = "*/10 * * * *"
}

variable "reconcile_schedule" {
  description = "Cron schedule of the reconcile tick."
  type        = string
  default     = "*/5 * * * *"
}

variable "scheduler_time_zone" {
  description = "Time zone of the schedules."
  type        = string
  default     = "Etc/UTC"
}

# ---------------------------------------------------------------------------------------- storage

variable "requests_noncurrent_days" {
  description = "Days a replaced or deleted request file is kept as a noncurrent version."
  type        = number
  default     = 30
}

variable "artifact_lifecycle_rules" {
  description = <<-EOT
    Delete rules for the artifacts bucket: objects whose name starts with one of `prefixes` (and,
    if given, ends with one of `suffixes`) are deleted `age_days` after they were written.
    GCS matches name prefixes literally, so a rule cannot say runs/*/trained/: see runs_retention_days.
    The defaults delete conversion attempt directories after 30 days (their READY.json markers, in
    the state bucket, expire earlier: conversion_ready_days) and Pathways scratch after a week.
  EOT
  type = list(object({
    prefixes = list(string)
    suffixes = optional(list(string), [])
    age_days = number
  }))
  default = [
    { prefixes = ["cache/maxtext/"], age_days = 30 },
    { prefixes = ["pathways/"], age_days = 7 },
  ]
}

variable "conversion_ready_days" {
  description = "Days after which a conversion cache marker (cache/maxtext/<key>/READY.json, state bucket) is deleted. Keep it below the age of the artifacts bucket's cache/maxtext/ rule (30 days by default), so no run is pointed at a checkpoint that is being deleted; the next run of the key then converts again."
  type        = number
  default     = 28
}

variable "state_noncurrent_days" {
  description = "Days a replaced or deleted object of the state bucket (a ledger's earlier version, say) is kept as a noncurrent version."
  type        = number
  default     = 30
}

variable "runs_retention_days" {
  description = "If set, delete everything under runs/ (trained checkpoints and exported models in the artifacts bucket, ledgers, events and error records in the state bucket) this many days after it was written. Off by default."
  type        = number
  default     = null
}

variable "artifacts_soft_delete_seconds" {
  description = "Soft-delete retention of the artifacts bucket. 0 turns it off: deleted checkpoints (hundreds of GB) would otherwise be billed for 7 more days."
  type        = number
  default     = 0
}

variable "api_propagation_wait" {
  description = "How long the first apply waits after enabling the APIs before it creates IAM grants, functions and Eventarc triggers (the Eventarc service agent's permissions need minutes to spread on a fresh project). A duration such as \"180s\"; only waited when enable_apis is true, once."
  type        = string
  default     = "180s"

  validation {
    condition     = can(regex("^[0-9]+(s|m)$", var.api_propagation_wait))
    error_message = "api_propagation_wait is a whole number of seconds or minutes, e.g. \"180s\"."
  }
}

variable "operators" {
  description = "People or groups who operate rlpipe with the CLI (\"user:alice@example.com\", \"group:ml-platform@example.com\"): submit (objectCreator on the requests bucket, publisher on the requests topic), status/list/watch (objectViewer on the state bucket, where the ledgers are, and on the artifacts bucket, to download models), cancel (workflows.invoker on the project: workflows.executions.cancel) and an ID token for the stage function by impersonating the operator service account (serviceAccountTokenCreator on it; it may invoke stage)."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for m in var.operators : !contains(["allUsers", "allAuthenticatedUsers"], m)])
    error_message = "operators must name people, groups or service accounts, never everyone."
  }
}

variable "request_namespaces" {
  description = "Teams that submit under their own folder, requests/<namespace>/, with the members who may (\"user:…\", \"group:…\"). A request_id names a run only within its namespace, so one team cannot take an id another published; files directly in requests/ and messages on the requests topic share the default namespace (var.operators). Each member gets objectCreator on the requests bucket for its folder only."
  type        = map(list(string))
  default     = {}

  validation {
    condition     = alltrue([for ns in keys(var.request_namespaces) : can(regex("^[a-z0-9][a-z0-9-]{0,39}$", ns))])
    error_message = "A namespace is a folder name of lowercase letters, digits and - (at most 40), as `rlpipe submit --namespace` takes."
  }
  validation {
    condition     = alltrue(flatten([for ms in values(var.request_namespaces) : [for m in ms : !contains(["allUsers", "allAuthenticatedUsers"], m)]]))
    error_message = "Namespace members must name people, groups or service accounts, never everyone."
  }
}

variable "allowed_image_prefixes" {
  description = "RLPIPE_ALLOWED_IMAGE_PREFIXES: image prefixes a request may run; any other image is refused at intake. Default: the registries of the tutorials' images."
  type        = list(string)
  default     = ["us-docker.pkg.dev/cloud-tpu-images/", "us-docker.pkg.dev/cloud-tpu-v2-images/"]
}

variable "allowed_env" {
  description = "RLPIPE_ALLOWED_ENV: environment variables a request may set beyond the built-in allowlist (shared/rlpipe/core/request/env_allowlist.py), as NAME (one whose values rlpipe has a rule for), NAME=int:LOW..HIGH or NAME=word|word (a rule for its values), or a family WORD_*. Every word of a name must be one docs/security.md lists as harmless: a word saying proxy, CA or certificate, endpoint, URL, host, server, resolver, emulator, plugin, code path or credential is refused whatever is listed, and so is '*' (the functions refuse to load)."
  type        = list(string)
  default     = []
  validation {
    condition     = alltrue([for n in var.allowed_env : can(regex("^[A-Za-z_][A-Za-z0-9_]*(=[^=]+)?$", n)) || can(regex("^[A-Za-z][A-Za-z0-9]*(_[A-Za-z0-9]+)*_\\*$", n))])
    error_message = "each entry is a variable NAME, NAME=<rule> (int:LOW..HIGH or word|word) or a family of whole words ending in _* (such as VLLM_LOGGING_*); '*' alone is never allowed."
  }
}

variable "read_token_secrets" {
  description = "RLPIPE_READ_TOKEN_SECRETS: the Kubernetes Secrets (name:key) a request may name as hf_token_secret."
  type        = list(string)
  default     = ["hf-token:token"]
}

variable "write_token_secrets" {
  description = "RLPIPE_WRITE_TOKEN_SECRETS: the Kubernetes Secrets (name:key) a request may name as publish.token_secret."
  type        = list(string)
  default     = ["hf-write-token:token"]
}

variable "read_only_gcs_prefixes" {
  description = "RLPIPE_READ_ONLY_GCS_PREFIXES: gs:// prefixes of shared data every request may read; any other gs:// value must be under the run's own prefix (docs/security.md)."
  type        = list(string)
  default     = []
  validation {
    condition     = alltrue([for p in var.read_only_gcs_prefixes : startswith(p, "gs://") && endswith(p, "/")])
    error_message = "each read-only prefix is gs://bucket/path/ (ending in /)."
  }
}

variable "allowed_publish_repos" {
  description = "RLPIPE_ALLOWED_PUBLISH_REPOS: Hugging Face Hub repositories a request may publish to with the deployment's write token, as org/ (any repository of the organisation) or org/name. Default: the organisation examples/ publish to; list your own."
  type        = list(string)
  default     = ["rlpipe-demo/"]
  validation {
    condition     = alltrue([for r in var.allowed_publish_repos : can(regex("^[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/([A-Za-z0-9][A-Za-z0-9_.-]{0,95})?$", r))])
    error_message = "each entry is org/ or org/name (no wildcard)."
  }
}

variable "allowed_queues" {
  description = "RLPIPE_ALLOWED_QUEUES: Kueue LocalQueues a request may name as tpu.queue. Default: the queues the presets name (user-queue; flex-queue for flex-start)."
  type        = list(string)
  default     = ["flex-queue", "user-queue"]
  validation {
    condition     = alltrue([for q in var.allowed_queues : can(regex("^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$", q))])
    error_message = "each entry is a LocalQueue name (a DNS label, no wildcard)."
  }
}

variable "allowed_reservations" {
  description = "RLPIPE_ALLOWED_RESERVATIONS: TPU reservations a request may name as tpu.reservation. Default: none (the presets name none)."
  type        = list(string)
  default     = []
  validation {
    condition     = alltrue([for r in var.allowed_reservations : can(regex("^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$", r))])
    error_message = "each entry is a reservation name (a DNS label, no wildcard)."
  }
}

variable "allowed_label_prefixes" {
  description = "RLPIPE_ALLOWED_LABEL_PREFIXES: label key prefixes a request's labels may use beside plain names (labels go on every pod, where the controller owning a prefix may act on them). Default: none. Prefixes the system owns (rlpipe.dev, kubernetes.io, k8s.io, x-k8s.io, jobset.sigs.k8s.io) are refused when the functions load."
  type        = list(string)
  default     = []
}

variable "allowed_node_pools" {
  description = "RLPIPE_ALLOWED_NODE_POOLS: node pools a request may name as cpu_job.node_pool or pathways.head_node_pool. Default: the pool the presets name (cpu-np)."
  type        = list(string)
  default     = ["cpu-np"]
  validation {
    condition     = alltrue([for n in var.allowed_node_pools : can(regex("^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$", n))])
    error_message = "each entry is a node pool name (a DNS label, no wildcard)."
  }
}

variable "allow_user_code" {
  description = "RLPIPE_ALLOW_USER_CODE: whether a request may bring Python (reward functions, a dataset processor) that runs in its training pods with the workload identity (docs/security.md). Off by default."
  type        = bool
  default     = false
}

variable "max_sweep_children" {
  description = "RLPIPE_MAX_SWEEP_CHILDREN: the most child runs one request's sweep may make; a larger grid is refused at intake and by rlpipe validate (docs/sweeps.md)."
  type        = number
  default     = 16
  validation {
    condition     = var.max_sweep_children >= 1 && var.max_sweep_children <= 256 && floor(var.max_sweep_children) == var.max_sweep_children
    error_message = "max_sweep_children is a whole number from 1 to 256."
  }
}

variable "notify_topics" {
  description = "RLPIPE_NOTIFY_TOPICS: Pub/Sub topics (projects/P/topics/T, or a bare name in this project) a request's notify may name besides the status topic. Nothing else is allowed, and never a topic the deployment reads (its requests topics, tick topics, dead-letter topic), even if listed."
  type        = list(string)
  default     = []
}

variable "tpu_prices_json" {
  description = "RLPIPE_PRICES: the deployment's TPU list prices per chip-hour, overriding shared/rlpipe/core/prices.json (which has no published v6e price): JSON {family: {mode: {price, source, read}}}, e.g. {\"v6e\": {\"spot\": {\"price\": 1.2, \"source\": \"our contract\", \"read\": \"2026-11-30\"}}}. Empty: costs are reported as unset."
  type        = string
  default     = ""
}

variable "teams" {
  description = "Teams on this deployment (docs/teams.md; rlpipe.core.teams reads the same declaration as RLPIPE_TEAMS). Each gets its own request folder (requests/<team>/, objectCreator for its submitters only), its own requests topic (<prefix>-requests-<team>, publisher for its submitters only), its own operator service account (op-<team>, impersonated by its operators, the only identity the stage function lets cancel, retry or promote the team's runs), and its own allowlists: nothing of the deployment-wide lists is inherited but the image registries and the environment names. Empty: one team, as before."
  type = map(object({
    submitters      = optional(list(string), [])
    operators       = optional(list(string), [])
    read_secrets    = optional(list(string), [])
    write_secrets   = optional(list(string), [])
    publish_repos   = optional(list(string), [])
    read_only_gcs   = optional(list(string), [])
    queues          = optional(list(string))
    reservations    = optional(list(string), [])
    node_pools      = optional(list(string))
    extra_env       = optional(list(string), [])
    allow_user_code = optional(bool, false)
    # A Secret Manager secret (its id, in this project) holding the team's own Hugging Face read
    # token: plan resolves the team's model revision and datasets with it, the stage function
    # reading it as RLPIPE_HF_TOKEN_<TEAM>. Without one, plan reads the Hub anonymously (public
    # repositories only), never with the deployment's token (docs/teams.md).
    hf_token_secret = optional(string)
    quota = optional(object({
      chips           = number
      borrowing_limit = optional(number)
      lending_limit   = optional(number)
    }))
    limits = optional(object({
      active_runs        = optional(number)
      sweep_children     = optional(number)
      monthly_chip_hours = optional(number)
    }), {})
  }))
  default = {}

  validation {
    # core.teams.TEAM_NAME, 3 to 14 characters here: the operator service account's id is
    # <name_prefix>-op-<team>, 6 to 30 characters with a prefix of at most 12. `default` names the
    # runs of a deployment without teams.
    condition     = alltrue([for name in keys(var.teams) : can(regex("^[a-z][a-z0-9-]{1,12}[a-z0-9]$", name)) && name != "default"])
    error_message = "A team's name is 3 to 14 lowercase letters, digits and -, starting with a letter and not ending with -, and not `default` (its operator service account is <name_prefix>-op-<team>)."
  }
  validation {
    condition     = alltrue(flatten([for t in values(var.teams) : [for m in concat(t.submitters, t.operators) : can(regex("^(user|group|serviceAccount):[^@ :]+@[^@ :]+$", m))]]))
    error_message = "Team members are user:, group: or serviceAccount: and an e-mail; never allUsers or allAuthenticatedUsers."
  }
}
